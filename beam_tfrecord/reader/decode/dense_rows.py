"""A column file's rows as dense arrays, without an Example parse per row, when every row read has the fixed layout.

For tf.data's joined reads (``reader.tf_columns``): a column part whose features are all numbers of fixed count
(``dense_specs``) is decoded by ``FixedLayout``, which accounts for every byte of every row (tags, lengths, names,
packed values), so a row it takes decodes to what ``tf.io.parse_example`` gives; any row it does not take (another
layout, a missing feature, an empty row at a live position) makes ``dense_rows`` None: the caller parses Examples.
See docs/columns.md, "Reading".
"""

from __future__ import annotations

import math

import numpy as np

from beam_tfrecord.core.blocks import RecordBlock
from beam_tfrecord.core.example_parts import entry_spans
from beam_tfrecord.core.framing import FRAMING_BYTES, HEADER_BYTES
from beam_tfrecord.core.schema import ClassLabel, DType, FixedList, Scalar, Schema, Tensor
from beam_tfrecord.reader.decode.block_decode import FixedLayout

DenseSpecs = dict[str, tuple[np.dtype, tuple[int, ...]]]  # feature -> (dtype, shape of one row's value)
_NUMBERS: dict[DType, np.dtype] = {DType.INT64: np.dtype(np.int64), DType.FLOAT32: np.dtype(np.float32)}


def dense_specs(schema: Schema) -> DenseSpecs | None:
    """Each feature's dtype and per-row shape when every feature of ``schema`` is a fixed count of numbers (int64
    and float32 scalars and fixed lists, class labels, tensors), as ``tf.io.parse_example`` (and ``decode_raw``)
    returns them; else None (strings, images, variable lists and sequences are parsed as Examples)."""
    specs: DenseSpecs = {}
    for name, feature in schema.features.items():
        if isinstance(feature, ClassLabel):
            specs[name] = (_NUMBERS[DType.INT64], ())
        elif isinstance(feature, (Scalar, FixedList)) and feature.dtype in _NUMBERS:
            specs[name] = (_NUMBERS[feature.dtype], (feature.length,) if isinstance(feature, FixedList) else ())
        elif isinstance(feature, Tensor):
            specs[name] = (np.dtype(feature.dtype.value), tuple(feature.shape))
        else:
            return None
    return specs if specs and not schema.sequence_features else None


def aliased_rows(starts: np.ndarray, lengths: np.ndarray, live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows (``starts``, ``lengths``) with each deleted one (not ``live``: an empty row, never handed out) read
    as the first live row instead, so that every row parses; unchanged when all are live or none is."""
    if live.all() or not live.any():
        return starts, lengths
    first = int(np.argmax(live))
    return np.where(live, starts, starts[first]), np.where(live, lengths, lengths[first])


def dense_rows(buffer: np.ndarray, starts: np.ndarray, lengths: np.ndarray, live: np.ndarray, schema: Schema,
               specs: DenseSpecs, *, path: str) -> dict[str, np.ndarray] | None:
    """The rows of a column file held whole in ``buffer`` (uint8), at ``starts`` with ``lengths`` (int64), as one
    array per feature of ``schema`` (``specs``: its ``dense_specs``), row ``i`` of each at index ``i``; None when a
    live row does not have the fixed layout. Deleted rows (not ``live``: never handed out) are not read: zeros."""
    out = {name: np.zeros((len(starts), *shape), dtype) for name, (dtype, shape) in specs.items()}
    if not live.any():  # no row to read
        return out
    if live.all():
        return _live_rows(buffer, starts, lengths, schema, specs, path=path)
    found = _live_rows(buffer, starts[live], lengths[live], schema, specs, path=path)
    if found is None:
        return None
    for name, values in found.items():
        out[name][live] = values
    return out


def _live_rows(buffer: np.ndarray, starts: np.ndarray, lengths: np.ndarray, schema: Schema, specs: DenseSpecs,
               *, path: str) -> dict[str, np.ndarray] | None:
    """``dense_rows`` of rows that are all live: cut out at once (``_uniform_rows``), or decoded by ``FixedLayout``."""
    found = _uniform_rows(buffer, starts, lengths, schema, specs, path=path)
    if found is not None:
        return found
    columns = FixedLayout(schema).parse(RecordBlock(path, buffer, starts, lengths, starts - HEADER_BYTES))
    if columns is None:
        return None
    return {name: np.ascontiguousarray(columns[name], dtype=dtype).reshape(len(starts), *shape)
            for name, (dtype, shape) in specs.items()}


_MIN_RUN_ROWS = 16  # rows per run of consecutive rows on average, else FixedLayout (a Python step per run)


def _uniform_rows(buffer: np.ndarray, starts: np.ndarray, lengths: np.ndarray, schema: Schema, specs: DenseSpecs,
                  *, path: str) -> dict[str, np.ndarray] | None:
    """``_live_rows`` of rows of one length whose values are all of fixed width (float32, tensors), in runs of
    consecutive rows (a deleted row between two runs): the first row decoded (``FixedLayout``: every byte accounted
    for), every other byte of every row compared with its (tags, lengths, names: then each row is an Example of the
    same layout), each feature's values cut out of a run's rows at once (a strided view: one copy, no step per row).
    None when they are not such rows, or a row's bytes other than values differ from the first's."""
    length, count = int(lengths[0]), len(starts)
    stride = length + FRAMING_BYTES
    breaks = np.flatnonzero(np.diff(starts) != stride) + 1
    if (not all(isinstance(f, Tensor) or (isinstance(f, (Scalar, FixedList)) and f.dtype is DType.FLOAT32)
                for f in schema.features.values())
            or (lengths != length).any() or (len(breaks) + 1) * _MIN_RUN_ROWS > count
            or FixedLayout(schema).parse(RecordBlock(path, buffer, starts[:1], lengths[:1], starts[:1] - HEADER_BYTES))
            is None):
        return None
    first = buffer[int(starts[0]):int(starts[0]) + length]
    ends = {name: stop for name, _, stop in entry_spans(first.tobytes(), where=path)}  # Feature ends: values last
    values = sorted((ends[name] - dtype.itemsize * math.prod(shape), ends[name], name)
                    for name, (dtype, shape) in specs.items())
    others = [(begin, end) for begin, end in zip([0, *(stop for _, stop, _ in values)],
                                                 [*(start for start, _, _ in values), length]) if end > begin]
    out = {name: np.empty((count, stop - start), np.uint8) for start, stop, name in values}
    for run_start, run_stop in zip([0, *breaks.tolist()], [*breaks.tolist(), count]):
        rows = np.ndarray((run_stop - run_start, length), np.uint8, buffer=buffer, offset=int(starts[run_start]),
                          strides=(stride, 1))
        if not all((rows[:, begin:end] == first[begin:end]).all() for begin, end in others):
            return None
        for start, stop, name in values:
            out[name][run_start:run_stop] = rows[:, start:stop]
    return {name: out[name].view(dtype.newbyteorder("<")).astype(dtype, copy=False).reshape(count, *shape)
            for name, (dtype, shape) in specs.items()}
