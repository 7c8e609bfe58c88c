"""Statistics of records that arrive serialized (``WriteBalancedTFRecord``), whose schema is inferred only at
publish: accumulated per feature name and value kind while the shards are written, made a ``SplitStatistics``
of the inferred schema at publish (``to_split``), the same as those of records written with that schema.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from beam_tfrecord.core import proto
from beam_tfrecord.core.record_schema import RAW_FEATURE, record_shape
from beam_tfrecord.core.schema import DType, Schema
from beam_tfrecord.statistics.accumulator import FeatureStats, Kind, SplitStatistics

_KINDS = {"int64_list": (Kind.NUMBER, np.int64), "float_list": (Kind.NUMBER, np.float32),
          "bytes_list": (Kind.BYTES, object), None: (Kind.BYTES, object)}  # None: a Feature with no value
_KIND_OF = {DType.INT64: "int64_list", DType.FLOAT32: "float_list"}


def _values(kind: str | None, values: Any) -> np.ndarray:
    if kind is None or kind == "bytes_list":
        out = np.empty(len(values), object)
        out[:] = list(values)
        return out
    return np.array(values, _KINDS[kind][1])


class InferredStatistics:
    """One split's records, by feature name and value kind (an Example's features, a SequenceExample's context;
    a record that is neither is a raw payload: ``RAW_FEATURE``)."""

    def __init__(self, split: str) -> None:
        self.split = split
        self.num_examples = 0
        self.features: dict[tuple[str, str | None], FeatureStats] = {}

    def add_records(self, records: Iterable[bytes]) -> None:
        """Adds a block of serialized records."""
        columns: dict[tuple[str, str | None], list[np.ndarray]] = {}
        for record in records:
            self.num_examples += 1
            if record_shape(record) is None:
                columns.setdefault((RAW_FEATURE, "bytes_list"), []).append(_values("bytes_list", [record]))
                continue
            for name, feature in proto.SequenceExample.FromString(record).context.feature.items():
                kind = feature.WhichOneof("kind")
                columns.setdefault((name, kind), []).append(_values(kind, getattr(feature, kind).value if kind
                                                                    else ()))
        for key, column in columns.items():
            if key not in self.features:
                self.features[key] = FeatureStats(_KINDS[key[1]][0], integer=key[1] == "int64_list")
            self.features[key].add(column)

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
