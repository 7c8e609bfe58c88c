"""Statistics of records that arrive serialized (``WriteBalancedTFRecord``), whose schema is inferred only at
publish: accumulated per feature name and value kind while the shards are written, made a ``SplitStatistics``
of the inferred schema at publish (``to_split``), the same as those of records written with that schema.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from beam_tfrecord.core import proto
from beam_tfrecord.core.record_schema import RAW_FEATURE
from beam_tfrecord.core.schema import DType, Schema
from beam_tfrecord.statistics.accumulator import FeatureStats, Kind, SplitStatistics

_KINDS = {"int64_list": (Kind.NUMBER, np.int64), "float_list": (Kind.NUMBER, np.float32),
          "bytes_list": (Kind.BYTES, None), None: (Kind.BYTES, None)}  # None: a Feature with no value
_KIND_OF = {DType.INT64: "int64_list", DType.FLOAT32: "float_list"}


def _context(record: bytes) -> Any:
    """The record's features (an Example's, a SequenceExample's context), or None for a raw payload: what
    ``record_schema.record_shape`` decides, from one parse."""
    message = proto.SequenceExample()
    try:
        message.ParseFromString(record)
    except DecodeError:
        return None
    size = message.ByteSize()
    message.DiscardUnknownFields()
    if message.ByteSize() != size or not (message.context.feature or message.feature_lists.feature_list):
        return None
    return message.context.feature


class InferredStatistics:
    """One split's records, by feature name and value kind (an Example's features, a SequenceExample's context;
    a record that is neither is a raw payload: ``RAW_FEATURE``)."""

    def __init__(self, split: str) -> None:
        self.split = split
        self.num_examples = 0
        self.features: dict[tuple[str, str | None], FeatureStats] = {}

    def add_records(self, records: Iterable[bytes]) -> None:
        """Adds a block of serialized records."""
        columns: dict[tuple[str, str | None], tuple[list[int], list[Any]]] = {}
        for record in records:
            self.num_examples += 1
            context = _context(record)
            if context is None:
                counts, values = columns.setdefault((RAW_FEATURE, "bytes_list"), ([], []))
                counts.append(1)
                values.append(record)
                continue
            for name, feature in context.items():
                kind = feature.WhichOneof("kind")
                counts, values = columns.setdefault((name, kind), ([], []))
                stored = getattr(feature, kind).value if kind else ()
                counts.append(len(stored))
                values.extend(stored)
        for key, (counts, values) in columns.items():
            kind, dtype = _KINDS[key[1]]
            if key not in self.features:
                self.features[key] = FeatureStats(kind, integer=key[1] == "int64_list")
            self.features[key].add_lists(np.array(counts, np.int64), values if dtype is None else
                                         np.array(values, dtype))

    def merge(self, other: "InferredStatistics") -> None:
        self.num_examples += other.num_examples
        for key, stats in other.features.items():
            if key in self.features:
                self.features[key].merge(stats)
            else:
                self.features[key] = stats

    def to_split(self, schema: Schema) -> SplitStatistics:
        """The statistics as ``schema``'s (the one inferred from every record); a record without a feature
        counts as missing it."""
        out = SplitStatistics(self.split, schema)
        out.num_examples = self.num_examples
        for name, feature in schema.features.items():
            target = out.features[name]
            dtype = getattr(feature, "dtype", None)
            wanted = _KIND_OF.get(dtype, "bytes_list") if isinstance(dtype, DType) else "bytes_list"
            for kind in (wanted, None):  # an empty Feature holds no value: present, of no kind
                if (name, kind) in self.features:
                    target.merge(self.features[name, kind])
            target.missing = self.num_examples - target.present
        return out
