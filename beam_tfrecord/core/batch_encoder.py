"""Chunk of samples -> serialized ``tf.train.Example`` records, column by column.

Records are byte-identical to ``SampleEncoder``'s; a chunk it does not cover, or any failed check, returns None
and is encoded sample by sample. Coverage and figures: docs/performance.md, "Writing" (encoding a chunk at a time).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from beam_tfrecord.core import proto, wire
from beam_tfrecord.core.sample_encoder import image_format_of, make_filler
from beam_tfrecord.core.schema import (
    ClassLabel,
    DType,
    Feature,
    FixedList,
    Image,
    ImageFormat,
    Scalar,
    Schema,
    Tensor,
    VarList,
)

_FLOAT32_MAX = float(np.finfo(np.float32).max)
_MAX_TABLED_CLASSES = 1 << 16
# Records larger than this on average are left to the reference: their per-record Python calls
# cost little beside copying them, and a chunk of them held at once costs memory (measured: a
# chunk of 100 x 200 KB records took more CPU at once than one by one, in page faults).
LARGE_RECORD_BYTES = 64 << 10
_DTYPE, _SHAPE = operator.attrgetter("dtype"), operator.attrgetter("shape")
_C_CONTIGUOUS = operator.attrgetter("flags.c_contiguous")
_KIND = {DType.INT64: wire.INT64_LIST, DType.FLOAT32: wire.FLOAT_LIST, DType.BYTES: wire.BYTES_LIST,
         DType.STRING: wire.BYTES_LIST}


class _NotCovered(Exception):
    """A column the fast checks do not cover: encode it value by value with the reference."""


class _Encoded(NamedTuple):
    """One feature's map entries for a chunk, as parts that the record's join puts end to end.

    Attributes:
        parts: columns of bytes-like parts, one item per record in each (a C-contiguous array is
            joined without a copy of its own).
        nbytes: bytes of each record's entry: one int when every record's is the same.
    """

    parts: tuple[Iterable[Any], ...]
    nbytes: int | list[int]


def _entries(entries: list[bytes]) -> _Encoded:
    return _Encoded((entries,), list(map(len, entries)))


# (values of one feature, one per sample, defaults applied; None = absent VarList) -> map entries.
_ColumnEncoder = Callable[[list[Any]], _Encoded]


def _as_list(value: Any) -> list[Any]:
    """A list-like value as a list, as ``encode._values_list`` reads it (strings are not lists)."""
    if value.__class__ is list:
        return value
    if value.__class__ is tuple:
        return list(value)
    if value.__class__ is np.ndarray and value.ndim == 1 and value.dtype.kind in "iuf":
        return value.tolist()
    raise _NotCovered


def _int64_payloads(lists: list[list[Any]]) -> list[bytes]:
    flat = list(itertools.chain.from_iterable(lists))
    if not {*map(type, flat)} <= {int}:
        raise _NotCovered  # bool, NumPy integers, floats...: the reference decides
    try:
        values = np.array(flat, dtype=np.int64)
    except OverflowError as err:
        raise _NotCovered from err
    return wire.packed_varints(values, np.fromiter(map(len, lists), np.int64, len(lists)))


def _float32_payloads(lists: list[list[Any]], allow_non_finite: bool) -> list[bytes]:
    flat = list(itertools.chain.from_iterable(lists))
    if not {*map(type, flat)} <= {int, float}:
        raise _NotCovered
    try:
        values = np.array(flat, dtype=np.float64)
    except OverflowError as err:
        raise _NotCovered from err
    finite = np.isfinite(values)
    if (not allow_non_finite and not finite.all()) or (np.abs(values[finite]) > _FLOAT32_MAX).any():
        raise _NotCovered
    data = values.astype("<f4").tobytes()
    ends = (np.cumsum(np.fromiter(map(len, lists), np.int64, len(lists))) * 4).tolist()
    return [data[start:end] for start, end in zip([0, *ends[:-1]], ends)]


def _utf8(values: list[Any]) -> list[bytes]:
    """str values encoded, bytes values checked; anything else (or invalid text) is not covered."""
    try:
        out = [v.encode("utf-8") if v.__class__ is str else v for v in values]
        for data in out:
            if data.__class__ is not bytes:
                raise _NotCovered
            data.decode("utf-8")
    except UnicodeError as err:
        raise _NotCovered from err
    return out


def _bytes_items(values: list[bytes]) -> bytes:
    """A bytes list's payload: each item as a length-delimited field 1."""
    prefix = wire.length_prefix
    return b"".join([b"\x0a" + prefix(len(v)) + v for v in values])


def _list_column(name: str, dtype: DType, allow_non_finite: bool, length: int | None) -> _ColumnEncoder:
    headers = wire.EntryHeaders(name, _KIND[dtype], packed=dtype in (DType.INT64, DType.FLOAT32))

    def encode(column: list[Any]) -> _Encoded:
        present = [i for i, value in enumerate(column) if value is not None]
        lists = [_as_list(column[i]) for i in present]
        if length is not None and any(len(values) != length for values in lists):
            raise _NotCovered
        if dtype is DType.INT64:
            payloads = _int64_payloads(lists)
        elif dtype is DType.FLOAT32:
            payloads = _float32_payloads(lists, allow_non_finite)
        else:
            flat = list(itertools.chain.from_iterable(lists))
            if dtype is DType.STRING:
                flat = _utf8(flat)
            elif not {*map(type, flat)} <= {bytes}:
                raise _NotCovered
            it = iter(flat)
            payloads = [_bytes_items(list(itertools.islice(it, len(values)))) for values in lists]
        if len(present) == len(column):
            return _entries([headers[len(payload)] + payload for payload in payloads])
        entries = [b""] * len(column)
        for i, payload in zip(present, payloads):
            entries[i] = headers[len(payload)] + payload
        return _entries(entries)

    return encode


def _bytes_column(name: str, check: Callable[[bytes], bool] | None, utf8: bool) -> _ColumnEncoder:
    """One bytes value per sample (a bytes or string scalar, an image): header by length, then the bytes."""
    headers = wire.EntryHeaders(name, wire.BYTES_LIST, packed=False)
    items: dict[int, bytes] = {}

    def encode(column: list[Any]) -> _Encoded:
        values = _utf8(column) if utf8 else column
        if not {*map(type, values)} <= {bytes}:
            raise _NotCovered
        if check is not None and not all(map(check, values)):
            raise _NotCovered
        lengths = list(map(len, values))
        for n in set(lengths).difference(items):
            item = b"\x0a" + wire.length_prefix(n)
            items[n] = headers[len(item) + n] + item
        prefixes = [items[n] for n in lengths]
        return _Encoded((prefixes, values), [len(p) + n for p, n in zip(prefixes, lengths)])

    return encode


def _image_column(name: str, feature: Image) -> _ColumnEncoder:
    if feature.shape is not None or feature.check_decode:
        return _reference_column(name, feature)  # reading headers or pixels: Pillow, value by value
    wanted = feature.format

    def check(data: bytes) -> bool:  # the signatures exclude one another: a value has one format or none
        found = image_format_of(data)
        return found is not None and (wanted is ImageFormat.ANY or found is wanted)

    return _bytes_column(name, check, utf8=False)


def _tensor_column(name: str, feature: Tensor) -> _ColumnEncoder:
    target = np.dtype(feature.dtype.value).newbyteorder("<")
    native = np.dtype(feature.dtype.value)
    shape = feature.shape
    check_finite = feature.dtype.is_float and not feature.allow_non_finite
    nbytes = feature.num_elements * target.itemsize
    item = b"\x0a" + wire.length_prefix(nbytes)
    header = wire.EntryHeaders(name, wire.BYTES_LIST, packed=False)[len(item) + nbytes] + item

    def encode(column: list[Any]) -> _Encoded:
        # Checked as sets of classes, dtypes and shapes (one C-level pass each, no Python call per value).
        if ({*map(type, column)} != {np.ndarray} or not {*map(_DTYPE, column)} <= {native, target}
                or {*map(_SHAPE, column)} != {shape}):
            raise _NotCovered
        if check_finite and not all(np.isfinite(value).all() for value in column):
            raise _NotCovered
        # A C-contiguous array's buffer is its ``tobytes()``: the record's join reads it directly.
        data = column if all(map(_C_CONTIGUOUS, column)) else [value.tobytes() for value in column]
        return _Encoded((itertools.repeat(header, len(column)), data), len(header) + nbytes)

    return encode


def _class_label_column(name: str, feature: ClassLabel) -> _ColumnEncoder:
    if feature.num_classes > _MAX_TABLED_CLASSES:
        return _reference_column(name, feature)
    headers = wire.EntryHeaders(name, wire.INT64_LIST, packed=True)
    by_id = [headers[len(v)] + v for v in map(wire.varint, range(feature.num_classes))]
    # int ids and str names never compare equal, so one table serves both (bool, float: not covered).
    table: dict[int | str, bytes] = {**dict(enumerate(by_id)), **dict(zip(feature.names, by_id))}

    def encode(column: list[Any]) -> _Encoded:
        if not {*map(type, column)} <= {int, str}:
            raise _NotCovered
        try:
            return _entries([table[value] for value in column])
        except KeyError as err:
            raise _NotCovered from err

    return encode


def _scalar_column(name: str, feature: Scalar) -> _ColumnEncoder:
    if feature.dtype in (DType.BYTES, DType.STRING):
        return _bytes_column(name, None, utf8=feature.dtype is DType.STRING)
    as_list = _list_column(name, feature.dtype, feature.allow_non_finite, 1)
    return lambda column: as_list([[value] for value in column])


def _reference_column(name: str, feature: Feature) -> _ColumnEncoder:
    """Value by value with the reference's filler: a one-entry ``Features`` message is exactly the
    record's map entry for this feature. Raises what the filler raises (the caller falls back)."""
    fill = make_filler(feature)

    def encode(column: list[Any]) -> _Encoded:
        out = []
        for value in column:
            if value is None:
                out.append(b"")
                continue
            features = proto.Features()
            fill("", name, value, features.feature[name])
            out.append(features.SerializeToString(deterministic=True))
        return _entries(out)

    return encode


def _fast_column(name: str, feature: Feature) -> _ColumnEncoder:
    if isinstance(feature, Scalar):
        return _scalar_column(name, feature)
    if isinstance(feature, FixedList):
        return _list_column(name, feature.dtype, feature.allow_non_finite, feature.length)
    if isinstance(feature, VarList):
        return _list_column(name, feature.dtype, feature.allow_non_finite, None)
    if isinstance(feature, Tensor):
        return _tensor_column(name, feature)
    if isinstance(feature, Image):
        return _image_column(name, feature)
    return _class_label_column(name, feature)


class RecordRows(NamedTuple):
    """A chunk's records, each as the parts that, joined, are the record (nothing copied yet).

    Attributes:
        parts: one tuple of bytes-like parts per record (C-contiguous arrays among them).
        nbytes: the length of each record.
    """

    parts: list[tuple[Any, ...]]
    nbytes: list[int]


class BatchEncoder:
    """Encodes chunks of samples of one schema; byte-identical to ``SampleEncoder``, or None.

    Args:
        schema: the feature spec; ``supports`` is False for SequenceExample schemas.
    """

    def __init__(self, schema: Schema) -> None:
        self.supports = not schema.sequence_features and all(map(_encodable, schema.features))
        self._known = frozenset(schema.features)
        features = schema.features
        self._columns = [(name, _default(features[name]), isinstance(features[name], VarList),
                          _fast_column(name, features[name]), _reference_column(name, features[name]))
                         for name in (_map_order(list(features)) if self.supports else [])]
        # Example.features, by its length; an Example without features serializes to nothing.
        self._record_headers = wire.DelimitedHeaders(wire.TAG_1)
        self._record_headers[0] = b""

    def encode(self, values: Sequence[Mapping[str, Any]]) -> list[bytes] | None:
        """The records of a chunk's samples (their value dicts), or None: one by one (``encode_rows``, joined)."""
        rows = self.encode_rows(values)
        return None if rows is None else list(map(b"".join, rows.parts))

    def encode_rows(self, values: Sequence[Mapping[str, Any]]) -> RecordRows | None:
        """The records of a chunk's samples as parts (see ``RecordRows``), or None: one by one.

        None when any sample is not a plain dict of schema features, when any value is not valid
        (the reference then names it) or when the records are large (``LARGE_RECORD_BYTES``);
        never records that differ from the reference's.
        """
        encoded = self._encode_columns(values)
        if encoded is None:
            return None
        columns, payload_bytes = encoded
        headers = self._record_headers
        header_column = [headers[n] for n in payload_bytes.tolist()]
        parts: list[Iterable[Any]] = [header_column]
        for column in columns:
            parts.extend(column.parts)
        record_bytes = payload_bytes + np.fromiter(map(len, header_column), np.int64, len(header_column))
        return RecordRows(list(zip(*parts)), record_bytes.tolist())

    def listed_record_bytes(self, values: Sequence[Mapping[str, Any]], value_bytes: Mapping[str, Sequence[int]]
                            ) -> list[int] | None:
        """Each record's length once each named bytes scalar, empty in ``values``, holds ``value_bytes[name][i]``
        bytes; or None, as ``encode_rows`` (which checks and encodes the other values the same way)."""
        encoded = self._encode_columns(values)
        return None if encoded is None else wire.example_bytes_with_values(encoded[1].tolist(), value_bytes)

    def _encode_columns(self, values: Sequence[Mapping[str, Any]]) -> tuple[list[_Encoded], np.ndarray] | None:
        """Each column of a chunk encoded (in map order) and each record's payload length, or None."""
        if not self.supports or not values:
            return None
        if {*map(type, values)} != {dict} or not all(map(self._known.issuperset, values)):
            return None
        columns = []
        payload_bytes = np.zeros(len(values), np.int64)
        for name, default, optional, fast, reference in self._columns:
            column = [v.get(name) for v in values]
            if default is not None:
                column = [default if value is None else value for value in column]
            elif not optional and any(map(operator.is_, column, itertools.repeat(None))):
                return None  # a required feature is missing: the reference names it
            try:
                try:
                    columns.append(fast(column))
                except _NotCovered:
                    columns.append(reference(column))
            except Exception:  # an invalid value (SampleError or what a conversion raised): the reference decides
                return None
            payload_bytes += columns[-1].nbytes  # an int or one per record
            if payload_bytes.mean() > LARGE_RECORD_BYTES:
                return None
        return columns, payload_bytes


def _map_order(names: list[str]) -> list[str]:
    """The order in which the protobuf library serializes these keys of a ``Features`` map.

    Read from the library itself rather than assumed: upb (protobuf's default backend) sorts keys
    bytewise, except that a key comes after the longer keys it is a prefix of ("ab" before "a");
    the pure-Python backend sorts them as strings. Either order is a total order, so the keys a
    sample leaves out (absent VarLists) do not change the order of the others.
    """
    features = proto.Features()
    for name in names:
        features.feature[name].int64_list.value.append(0)
    data = features.SerializeToString(deterministic=True)
    order, position = [], 0
    while position < len(data):  # entries: 0a len {0a len key, 12 len value}
        entry_bytes, position = wire.read_varint(data, position + 1)
        key_bytes, key_start = wire.read_varint(data, position + 1)
        order.append(data[key_start:key_start + key_bytes].decode("utf-8"))
        position += entry_bytes
    return order


def _encodable(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False  # the reference raises its own error for such a name
    return True


def _default(feature: Feature) -> Any:
    return getattr(feature, "default", None)
