"""TFRecord framing: one small codec that works on any binary file handle.

Each record is: uint64 little-endian length, masked CRC32C of those 8 bytes (uint32 LE),
the data, masked CRC32C of the data (uint32 LE). Mask: rotate right by 15 bits, add
0xa282ead8. CRC32C comes from google-crc32c (hardware accelerated), never pure Python.
"""

from __future__ import annotations

import functools
import itertools
import struct
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO

import google_crc32c
import numpy as np

from beam_tfrecord.errors import CorruptShardError

FRAMING_BYTES = 16  # 8 (length) + 4 (length CRC) + 4 (data CRC) per record
HEADER_BYTES = 12  # the length and its CRC, before the data
FOOTER_BYTES = FRAMING_BYTES - HEADER_BYTES  # the data's CRC, after it
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
MASK_DELTA = 0xA282EAD8  # added to the rotated CRC (TFRecord's mask)


def masked_crc(data: bytes) -> int:
    """The masked CRC32C that TFRecord stores for ``data``."""
    return _mask(google_crc32c.value(data))


def _mask(crc: int) -> int:
    """TFRecord's mask of a CRC32C: rotate right by 15 bits, add ``MASK_DELTA``."""
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF


def frame_parts(data: bytes, _crc32c=google_crc32c.value,
                _pack_header=struct.Struct("<QI").pack) -> tuple[bytes, bytes]:  # noqa: B008  (bound once, on purpose)
    """The 12 bytes that go before ``data`` and the 4 after it in a TFRecord.

    The hot path of every writer: the mask is inlined (it is ``masked_crc``) to save two calls.
    Large records are written as header, data, footer, without copying ``data``.
    """
    crc = _crc32c(_LENGTH.pack(len(data)))
    header = _pack_header(len(data), (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF)
    crc = _crc32c(data)
    return header, _CRC.pack((((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF)


def frame_parts_of_parts(parts: Sequence[bytes], length: int) -> tuple[bytes, bytes]:
    """``frame_parts`` of the record that ``parts`` make joined (``length`` bytes), not joining them."""
    return _header_of_length(length), _CRC.pack(_mask(functools.reduce(google_crc32c.extend, parts, 0)))


def frame_parts_of_chunk(records: Sequence[Sequence[Any]], nbytes: Sequence[int]
                         ) -> tuple[list[bytes], list[bytes]]:
    """``frame_parts`` of every record of a chunk: (headers, footers), one of each per record.

    The batch encoder's path. Each record is given as the parts that, joined, are the record
    (bytes-like: bytes, C-contiguous arrays), with its length: the CRC runs over the parts, so the
    record is never joined on its own, only into its run entry. The masks are computed all at once
    with NumPy, and a header once per distinct length in the chunk.
    """
    # reduce(extend, parts, 0) is the CRC32C of the joined parts; map() keeps it in C.
    crcs = map(functools.reduce, itertools.repeat(google_crc32c.extend), records, itertools.repeat(0))
    footers = mask_crcs(np.fromiter(crcs, np.uint64, len(records))).astype("<u4").tobytes()
    headers = {length: _header_of_length(length) for length in set(nbytes)}
    return ([headers[length] for length in nbytes],
            [footers[i:i + FOOTER_BYTES] for i in range(0, len(footers), FOOTER_BYTES)])


def mask_crcs(crcs: np.ndarray) -> np.ndarray:
    """``masked_crc``'s mask (rotate right by 15, add a constant) over an array of raw CRC32C values."""
    crcs = crcs.astype(np.uint64)
    return ((((crcs >> 15) | (crcs << 17)) + MASK_DELTA) & 0xFFFFFFFF).astype(np.uint32)


def _header_of_length(length: int) -> bytes:
    return _LENGTH.pack(length) + _CRC.pack(masked_crc(_LENGTH.pack(length)))


def frame(data: bytes, prefix: bytes = b"") -> bytes:
    """``data`` as one framed TFRecord, after ``prefix`` (e.g. a sort key) if one is given, in one copy."""
    header, footer = frame_parts(data)
    return b"".join((prefix, header, data, footer))


def framed_size(data_bytes: int) -> int:
    """Bytes a record of ``data_bytes`` occupies in an uncompressed TFRecord file."""
    return data_bytes + FRAMING_BYTES


def unframed(framed: bytes | memoryview) -> bytes | memoryview:
    """The data of one framed record (its CRCs are not checked: the caller framed it)."""
    return framed[HEADER_BYTES:len(framed) - FOOTER_BYTES]


def iter_records(stream: BinaryIO, *, name: str, verify: bool = True) -> Iterator[bytes]:
    """Yields each record's data from an uncompressed TFRecord stream.

    Args:
        stream: a binary file handle positioned at a record boundary.
        name: what to call the stream in errors (the shard's path).
        verify: check both CRCs of every record.

    Raises:
        CorruptShardError: on a truncated record or a CRC mismatch, with its offset.
    """
    offset = 0
    while True:
        header = stream.read(HEADER_BYTES)
        if not header:
            return
        if len(header) < HEADER_BYTES:
            raise CorruptShardError(name, f"truncated record header ({len(header)} of {HEADER_BYTES} bytes)", offset)
        length_bytes = header[:8]
        if verify and _CRC.unpack(header[8:])[0] != masked_crc(length_bytes):
            raise CorruptShardError(name, "length CRC mismatch", offset)
        (length,) = _LENGTH.unpack(length_bytes)
        body = stream.read(length + FOOTER_BYTES)
        if len(body) < length + FOOTER_BYTES:
            raise CorruptShardError(name, f"truncated record (expected {length + FOOTER_BYTES} bytes after the header, "
                                          f"got {len(body)})", offset)
        data = body[:length]
        if verify and _CRC.unpack(body[length:])[0] != masked_crc(data):
            raise CorruptShardError(name, "data CRC mismatch", offset)
        yield data
        offset += length + FRAMING_BYTES


_FIRST_WINDOW = 64  # records whose lengths ``record_spans`` compares at once, doubled while they all match


def record_spans(buffer: bytes | np.ndarray, *, name: str, num_records: int) -> tuple[np.ndarray, np.ndarray]:
    """The start and length of each record's data in a whole uncompressed TFRecord file (int64 arrays): its bytes, or
    a uint8 array over a mapping of it.

    For a file already checked whole (its size and CRC32C against the manifest's), so the records' own CRCs are
    not read again. Vectorised for runs of records of one length (the rows of a fixed-size column; a deleted
    record's empty row starts a new run): the lengths a run would have are compared at once, in windows that
    double while they match, so the cost is one Python step per run, not per record.

    Raises:
        CorruptShardError: when the framing runs past the end, or the file holds other than ``num_records``.
    """
    size = len(buffer)
    data = buffer if isinstance(buffer, bytes) else buffer.data  # an array's memory, not a copy
    runs: list[tuple[np.ndarray, int]] = []  # each run's starts, and its records' length
    position = found = 0
    window = _FIRST_WINDOW
    while position < size:
        if position + HEADER_BYTES > size:
            raise CorruptShardError(name, "truncated record header", position)
        (length,) = _LENGTH.unpack_from(data, position)
        stride = length + FRAMING_BYTES
        count = min(window, (size - position) // stride)
        if count == 0:
            raise CorruptShardError(name, f"truncated record ({length} bytes past the file's end)", position)
        lengths = np.ndarray((count,), dtype="<u8", buffer=data, offset=position, strides=(stride,))
        differ = np.flatnonzero(lengths != length)
        run = int(differ[0]) if len(differ) else count
        runs.append((position + HEADER_BYTES + stride * np.arange(run, dtype=np.int64), length))
        position += run * stride
        found += run
        window = window * 2 if run == count else _FIRST_WINDOW
    if found != num_records:
        raise CorruptShardError(name, f"{found} records, the manifest says {num_records}")
    return (np.concatenate([s for s, _ in runs]) if runs else np.zeros(0, np.int64),
            np.concatenate([np.full(len(s), n, np.int64) for s, n in runs]) if runs else np.zeros(0, np.int64))
