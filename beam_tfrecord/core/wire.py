"""Protobuf wire-format pieces of ``tf.train.Example``: varints and the bytes around a feature's values.

The bytes equal the protobuf library's ``SerializeToString(deterministic=True)`` (hypothesis-tested); only what
an ``Example`` needs, not a general encoder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

_UINT64_MASK = (1 << 64) - 1
_SMALL = 1 << 14  # lengths below this take one or two varint bytes: tabled
# Field tags (field number << 3 | wire type 2, length-delimited), all field number 1 or 2 or 3.
TAG_1 = b"\x0a"  # Example.features, Features.feature (a map entry), *List.value, map key
TAG_2 = b"\x12"  # map value
INT64_LIST = b"\x1a"  # Feature.int64_list (field 3)
FLOAT_LIST = b"\x12"  # Feature.float_list (field 2)
BYTES_LIST = b"\x0a"  # Feature.bytes_list (field 1)


def varint(number: int) -> bytes:
    """The base-128 varint of ``number``; a negative int64 is written as its two's complement (10 bytes)."""
    number &= _UINT64_MASK
    out = bytearray()
    while number > 0x7F:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


def read_varint(data: bytes, position: int) -> tuple[int, int]:
    """(the varint at ``position``, the position after it)."""
    number = shift = 0
    while True:
        byte = data[position]
        position += 1
        number |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return number, position


_VARINTS = [varint(n) for n in range(_SMALL)]


def length_prefix(length: int) -> bytes:
    """The varint of a length (tabled for lengths below 16 KiB, the common case)."""
    return _VARINTS[length] if length < _SMALL else varint(length)


def delimited_header(tag: bytes, length: int) -> bytes:
    """The tag and length that go before a length-delimited field of ``length`` bytes."""
    return tag + length_prefix(length)


class DelimitedHeaders(dict[int, bytes]):
    """``delimited_header(tag, length)`` by length, computed once per length (``__missing__``)."""

    def __init__(self, tag: bytes) -> None:
        super().__init__()
        self._tag = tag

    def __missing__(self, length: int) -> bytes:
        header = self[length] = delimited_header(self._tag, length)
        return header


class EntryHeaders(dict[int, bytes]):
    """The bytes before a feature's list payload in a ``Features`` message, by payload length.

    A ``Features.feature`` map entry is ``0a len {0a len name} {12 len Feature}`` and a Feature is
    ``kind len List``; a packed list (int64, float) is ``0a len values`` when it has values and
    empty otherwise, a bytes list is its items as they are. Everything before the payload depends
    on the name and the payload's length only: computed once per length (``__missing__``), then a
    dict lookup.

    Args:
        name: the feature's name.
        kind: the Feature field tag (``INT64_LIST``, ``FLOAT_LIST`` or ``BYTES_LIST``).
        packed: the payload is a packed field's values (int64, float), not bytes-list items.
    """

    def __init__(self, name: str, kind: bytes, *, packed: bool) -> None:
        super().__init__()
        self._key = delimited_header(TAG_1, len(name.encode("utf-8"))) + name.encode("utf-8")
        self._kind = kind
        self._packed = packed

    def __missing__(self, payload_bytes: int) -> bytes:
        inner = delimited_header(TAG_1, payload_bytes) if self._packed and payload_bytes else b""
        feature = delimited_header(self._kind, len(inner) + payload_bytes) + inner
        value_bytes = len(feature) + payload_bytes
        entry = self._key + delimited_header(TAG_2, value_bytes) + feature
        header = delimited_header(TAG_1, len(entry) + payload_bytes) + entry
        self[payload_bytes] = header
        return header


def varint_bytes(number: int) -> int:
    """The length of ``varint(number)`` for a number >= 0."""
    return max(1, (number.bit_length() + 6) // 7)


def bytes_value_entry_bytes(name_bytes: int, size: int) -> int:
    """The bytes of a ``Features`` map entry (``EntryHeaders``' layout, header included) holding one
    bytes value of ``size`` bytes, for a feature name of ``name_bytes`` bytes (UTF-8). Arithmetic
    only: sizes one by one, nothing kept per size."""
    items = 1 + varint_bytes(size) + size  # the BytesList: 0a len value
    feature = 1 + varint_bytes(items) + items  # the Feature: 0a len BytesList
    entry = 1 + varint_bytes(name_bytes) + name_bytes + 1 + varint_bytes(feature) + feature  # key, then value
    return 1 + varint_bytes(entry) + entry


def example_bytes_with_values(features_bytes: Sequence[int], value_bytes: Mapping[str, Sequence[int]]) -> list[int]:
    """The length of each ``Example`` whose ``Features`` message is ``features_bytes[i]`` long with each
    named bytes scalar empty, once that scalar holds ``value_bytes[name][i]`` bytes: a chunk of
    file-backed samples planned from their files' listed sizes, by arithmetic
    (``bytes_value_entry_bytes``)."""
    grown = list(features_bytes)
    for name, sizes in value_bytes.items():
        name_bytes = len(name.encode("utf-8"))
        empty = bytes_value_entry_bytes(name_bytes, 0)
        grown = [n + bytes_value_entry_bytes(name_bytes, size) - empty for n, size in zip(grown, sizes)]
    return [1 + varint_bytes(n) + n if n else 0 for n in grown]  # an Example without features is empty


def _spliced(record: bytes, value_bytes: Mapping[str, int]) -> tuple[list[bytes | str], int]:
    """``record`` with each named bytes scalar, empty in it, grown to ``value_bytes[name]`` bytes.

    Returns the new record's parts, in order: wire bytes, and in place of each value its name (the
    value's bytes go there); and the new record's length. ``record`` is an ``Example`` or
    ``SequenceExample`` serialized deterministically: its first field is the (context) ``Features``
    message, which holds each named feature as a bytes list of one empty item. Only that entry and
    the lengths around it change: the entry is ``EntryHeaders``' layout, the map's order is by name.
    """
    if record[:1] != TAG_1:
        raise ValueError(f"not a record that starts with its features (first byte {record[:1]!r})")
    features_bytes, start = read_varint(record, 1)
    end = start + features_bytes
    wanted = {name.encode("utf-8"): name for name in value_bytes}
    parts: list[bytes | str] = []
    copied = position = start
    grown = features_bytes
    while position < end:
        entry_bytes, body = read_varint(record, position + 1)
        name_bytes, name_start = read_varint(record, body + 1)
        name = wanted.pop(record[name_start:name_start + name_bytes], None)
        entry_end = body + entry_bytes
        if name is not None:
            headers = EntryHeaders(name, BYTES_LIST, packed=False)
            if record[position:entry_end] != headers[2] + b"\x0a\x00":
                raise ValueError(f"feature {name!r} is not one empty bytes value in the record")
            size = value_bytes[name]
            item = TAG_1 + length_prefix(size)
            header = headers[len(item) + size] + item
            parts += [record[copied:position], header, name]
            grown += len(header) + size - (entry_end - position)
            copied = entry_end
        position = entry_end
    if wanted:
        raise ValueError(f"features {sorted(wanted.values())} are not in the record")
    parts.append(record[copied:])  # the features after the last value, and what follows them
    head = delimited_header(TAG_1, grown)
    return [head, *parts], len(head) + grown + len(record) - end


def record_bytes_with_values(record: bytes, value_bytes: Mapping[str, int]) -> int:
    """The length ``record`` would have if each named bytes scalar, empty in it, held that many bytes.

    Plans a file-backed record from its files' listed sizes without reading them: the record is
    encoded (by the protobuf library) with each file's value empty, then grown here (``_spliced``).
    """
    return _spliced(record, value_bytes)[1]


def record_parts_with_values(record: bytes, values: Mapping[str, bytes]) -> tuple[list[bytes], int]:
    """The parts of ``record`` with each named bytes scalar, empty in it, holding ``values[name]``,
    and the length of the record they make; the values themselves are parts, not copied.

    Rebuilds a file-backed record from its files' bytes: the protobuf library encodes the rest of
    the sample, and no copy of the files' bytes is made before they are written to their shard.
    """
    parts, length = _spliced(record, {name: len(value) for name, value in values.items()})
    return [values[part] if isinstance(part, str) else part for part in parts], length


def packed_varints(values: np.ndarray, counts: np.ndarray) -> list[bytes]:
    """Each group's int64 values as a packed varint payload, computed for all groups at once.

    Args:
        values: int64 values of every group, end to end.
        counts: how many values each group has (sums to ``len(values)``).
    """
    unsigned = values.astype(np.int64, copy=False).view(np.uint64)
    groups = [(unsigned >> np.uint64(7 * k)) for k in range(10)]
    num_bytes = np.ones(len(unsigned), np.int64)
    for shifted in groups[1:]:
        num_bytes += shifted != 0
    grid = np.empty((len(unsigned), 10), np.uint8)
    for k, shifted in enumerate(groups):
        more = np.where(num_bytes > k + 1, 0x80, 0).astype(np.uint8)  # the continuation bit
        grid[:, k] = (shifted & np.uint64(0x7F)).astype(np.uint8) | more
    flat = grid[np.arange(10) < num_bytes[:, None]].tobytes()
    byte_ends = np.concatenate(([0], np.cumsum(num_bytes)))
    value_ends = np.cumsum(counts)
    ends = byte_ends[value_ends].tolist()
    starts = byte_ends[value_ends - counts].tolist()
    return [flat[start:end] for start, end in zip(starts, ends)]
