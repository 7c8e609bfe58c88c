"""Blocks of records: many records of one shard in one buffer, for decoders that work a block at a time.

Per-record Python costs more than the work itself on small records (a 3 KB record's CRC takes
about 0.2 us; a Python loop step, a slice and a call take several times that). So readers hand
decoders a ``RecordBlock``: one buffer and the start and length of each record in it, as NumPy
arrays. ``split_frames`` walks the TFRecord framing of a buffer into such a block: the walk is one
short loop over the lengths, the length CRCs are checked once per distinct length, and the data
CRCs (google-crc32c, one call per record) are compared with the stored ones in one vector step.
"""

from __future__ import annotations

import dataclasses
import struct

import google_crc32c
import numpy as np

from beam_tfrecord.core.framing import FOOTER_BYTES, FRAMING_BYTES, HEADER_BYTES, masked_crc
from beam_tfrecord.errors import CorruptShardError

_LENGTH = struct.Struct("<Q")
_MASK_DELTA = 0xA282EAD8


@dataclasses.dataclass(frozen=True)
class RecordBlock:
    """Consecutive records of one shard, held in one buffer.

    Attributes:
        path: the shard (named in errors).
        buffer: the bytes holding the records.
        starts: where each record's data starts in ``buffer`` (int64).
        lengths: each record's data length (int64).
        offsets: where each record is in the shard, for errors: a byte offset for TFRecord, the
            record's index for a random-access format (int64).
        paths: each record's shard, when a block gathers records of several (a global shuffle's).
    """

    path: str
    buffer: bytes
    starts: np.ndarray
    lengths: np.ndarray
    offsets: np.ndarray
    paths: tuple[str, ...] = ()

    def path_of(self, index: int) -> str:
        """The shard of record ``index`` of the block."""
        return self.paths[index] if self.paths else self.path

    def __len__(self) -> int:
        return len(self.starts)

    def record(self, index: int) -> bytes:
        """The data of record ``index`` of the block."""
        start = int(self.starts[index])
        return self.buffer[start:start + int(self.lengths[index])]

    def slice(self, start: int, stop: int) -> "RecordBlock":
        """Records ``[start, stop)`` of the block (the same buffer, no copy)."""
        return RecordBlock(self.path, self.buffer, self.starts[start:stop], self.lengths[start:stop],
                           self.offsets[start:stop], self.paths[start:stop])

    @classmethod
    def of_records(cls, path: str, records: list[bytes], offsets: np.ndarray | list[int], *,
                   paths: list[str] | None = None) -> "RecordBlock":
        """A block holding ``records`` (one copy into one buffer); ``paths`` when they come from several shards."""
        lengths = np.fromiter((len(r) for r in records), dtype=np.int64, count=len(records))
        starts = np.zeros(len(records), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        return cls(path, b"".join(records), starts, lengths, np.asarray(offsets, dtype=np.int64),
                   tuple(paths or ()))


def _mask(crcs: np.ndarray) -> np.ndarray:
    """TFRecord's CRC mask (rotate right by 15, add a constant), on an array of raw CRC32C values."""
    crcs = crcs.astype(np.uint64)
    return ((((crcs >> 15) | (crcs << 17)) + _MASK_DELTA) & 0xFFFFFFFF).astype(np.uint32)


def _stored_u32(view: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The little-endian uint32 at each position of ``at`` in ``view``."""
    return view[at[:, None] + np.arange(4)].view("<u4").reshape(-1)


def split_frames(buffer: bytes, *, name: str, base_offset: int = 0, verify: bool = True) -> tuple[RecordBlock, int]:
    """Walks the TFRecord framing of ``buffer`` from its start: the whole records in it, and the bytes they use.

    A record cut by the buffer's end is not returned (its bytes are left for the next buffer).

    Args:
        buffer: bytes of a record stream starting at a record boundary.
        name: the stream's name (the shard's path) for errors.
        base_offset: the stream offset of ``buffer[0]`` (for errors and ``offsets``).
        verify: check the length and data CRCs of the records returned.

    Returns:
        The block of records, and the bytes of ``buffer`` its whole records take (where the next read resumes).

    Raises:
        CorruptShardError: on a CRC mismatch, with the record's offset.
    """
    starts: list[int] = []
    size = len(buffer)
    position = 0
    unpack = _LENGTH.unpack_from
    cut_header_bad = False  # the header of a record cut by the buffer's end fails its CRC
    while position + HEADER_BYTES <= size:
        (length,) = unpack(buffer, position)
        if position + HEADER_BYTES + length + FOOTER_BYTES > size:
            cut_header_bad = verify and masked_crc(buffer[position:position + 8]) != struct.unpack_from(
                "<I", buffer, position + 8)[0]
            break
        starts.append(position)
        position += HEADER_BYTES + length + FOOTER_BYTES
    headers = np.array(starts, dtype=np.int64)
    view = np.frombuffer(buffer, dtype=np.uint8)
    lengths = view[headers[:, None] + np.arange(8)].view("<u8").reshape(-1).astype(np.int64) \
        if len(headers) else np.zeros(0, dtype=np.int64)
    data = headers + HEADER_BYTES
    if verify and len(headers):  # a walk led astray by a bad length is caught here, at that record
        _check_crcs(view, headers, data, lengths, name=name, base_offset=base_offset)
    if cut_header_bad:
        raise CorruptShardError(name, "length CRC mismatch", base_offset + position)
    return RecordBlock(name, buffer, data, lengths, headers + base_offset), position


def _check_crcs(view: np.ndarray, headers: np.ndarray, data: np.ndarray, lengths: np.ndarray, *,
                name: str, base_offset: int) -> None:
    """Checks every record's length CRC (once per distinct length) and data CRC, naming the first bad one."""
    distinct, which = np.unique(lengths, return_inverse=True)
    expected = np.array([masked_crc(_LENGTH.pack(int(n))) for n in distinct], dtype=np.uint32)[which]
    bad_length = np.flatnonzero(_stored_u32(view, headers + 8) != expected)
    crc = google_crc32c.value  # takes read-only NumPy slices (no copy), not memoryviews
    found = np.fromiter((crc(view[s:s + n]) for s, n in zip(data.tolist(), lengths.tolist())),
                        dtype=np.uint64, count=len(data))
    bad_data = np.flatnonzero(_stored_u32(view, data + lengths) != _mask(found))
    # The first bad record, and its length's CRC first (a front-to-back read checks it before the data's).
    first_length = bad_length[0] if len(bad_length) else len(headers)
    first_data = bad_data[0] if len(bad_data) else len(headers)
    if first_length <= first_data and first_length < len(headers):
        raise CorruptShardError(name, "length CRC mismatch", base_offset + int(headers[first_length]))
    if first_data < len(headers):
        raise CorruptShardError(name, "data CRC mismatch", base_offset + int(headers[first_data]))


def framed_bytes(block: RecordBlock) -> int:
    """The block's records' size in TFRecord framing (data + 16 bytes each)."""
    return int(block.lengths.sum()) + FRAMING_BYTES * len(block)
