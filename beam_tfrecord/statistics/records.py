"""The statistics of serialized Examples, without Beam or TensorFlow: what a build computes, from records.

For a dataset written before builds wrote ``statistics.pb`` (one pass over its records), and as the reference
the build's statistics are tested against. Records are parsed one by one (``core.proto``): slower than the
build's block decoding, the same statistics.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from beam_tfrecord.core import proto
from beam_tfrecord.core.schema import ClassLabel, DType, Feature, FixedList, Image, Scalar, Schema, Tensor
from beam_tfrecord.statistics.accumulator import SplitStatistics
from beam_tfrecord.statistics.tfmd import statistics_proto

RECORDS_PER_PARSE = 4096
_NUMPY = {DType.INT64: np.int64, DType.FLOAT32: np.float32}


def _stored(example: Any, feature: Feature) -> list[Any]:
    """A stored feature's values (a list; empty when absent)."""
    if isinstance(feature, (Tensor, Image)):
        return list(example.bytes_list.value)
    dtype = DType.INT64 if isinstance(feature, ClassLabel) else feature.dtype
    if dtype is DType.INT64:
        return list(example.int64_list.value)
    if dtype is DType.FLOAT32:
        return list(example.float_list.value)
    return list(example.bytes_list.value)


def column_of(feature: Feature, stored: list[list[Any]]) -> Any:
    """The column (as ``reader.decode.block_decode`` gives it) of present records' stored values."""
    if isinstance(feature, Tensor):
        layout = np.dtype(feature.dtype.value).newbyteorder("<")
        return np.stack([np.frombuffer(v[0], layout).reshape(feature.shape) for v in stored]) if stored \
            else np.zeros((0, *feature.shape), layout)
    if isinstance(feature, Image):
        return [v[0] for v in stored]
    numeric = _NUMPY.get(DType.INT64 if isinstance(feature, ClassLabel) else feature.dtype)
    if isinstance(feature, (Scalar, ClassLabel)):
        return np.array([v[0] for v in stored], numeric) if numeric else [v[0] for v in stored]
    if isinstance(feature, FixedList) and numeric:
        return np.array(stored, numeric).reshape(len(stored), feature.length)
    return [np.array(v, numeric or object) for v in stored]


def _add_block(stats: SplitStatistics, schema: Schema, records: list[bytes]) -> None:
    features = [proto.Example.FromString(record).features.feature for record in records]
    stats.num_examples += len(records)
    for name, feature in schema.features.items():
        stored = [_stored(f[name], feature) for f in features if name in f]
        if stored:
            stats.features[name].add(column_of(feature, stored))
        stats.features[name].missing += len(records) - len(stored)


def statistics_of_records(schema: Schema, records: Iterable[tuple[str, bytes]]) -> Any:
    """The ``DatasetFeatureStatisticsList`` of ``(split, serialized Example)`` pairs, one dataset per split in
    the order splits first appear."""
    splits: dict[str, SplitStatistics] = {}
    pending: dict[str, list[bytes]] = {}
    for split, record in records:
        if split not in splits:
            splits[split], pending[split] = SplitStatistics(split, schema), []
        pending[split].append(record)
        if len(pending[split]) >= RECORDS_PER_PARSE:
            _add_block(splits[split], schema, pending[split])
            pending[split] = []
    for split, block in pending.items():
        _add_block(splits[split], schema, block)
    return statistics_proto(list(splits.values()))
