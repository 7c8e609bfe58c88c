"""Blocks of records: many records of one shard in one buffer, for decoders that work a block at a time.

Framing is walked and CRCs checked per block, not per record in Python (see ``split_frames``).
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator

import crc32c
import numpy as np

from beam_tfrecord.core.framing import FOOTER_BYTES, HEADER_BYTES, mask_crcs, masked_crc
from beam_tfrecord.errors import CorruptShardError

_LENGTH = struct.Struct("<Q")


@dataclasses.dataclass(frozen=True)
class RecordBlock:
    """Consecutive records of one shard, held in one buffer.

    Per-record Python costs more than the work on small records (a 3 KB record's CRC takes ~0.2 us; a loop
    step, a slice and a call several times that), so decoders take a buffer and NumPy arrays of the records'
    starts and lengths.

    Attributes:
        path: the shard (named in errors).
        buffer: the bytes holding the records (a uint8 array: a copy, or a window of a mapped file).
        starts: where each record's data starts in ``buffer`` (int64).
        lengths: each record's data length (int64).
        offsets: where each record is in the shard, for errors: a byte offset for TFRecord, the
            record's index for a random-access format (int64).
        paths: each record's shard, when a block gathers records of several (a global shuffle's).
        parts: the rows of the shard's column files, aligned with the records (a joined block: record ``i`` is its
            own bytes followed by row ``i`` of each part; decoders decode each part on its own, no copy).
    """

    path: str
    buffer: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray
    offsets: np.ndarray
    paths: tuple[str, ...] = ()
    parts: tuple["RecordBlock", ...] = ()

    def __len__(self) -> int:
        return len(self.starts)

    def path_of(self, index: int) -> str:
        """The shard of record ``index`` of the block."""
        return self.paths[index] if self.paths else self.path

    def record(self, index: int) -> bytes:
        """The data of record ``index`` of the block (joined with its row of each part)."""
        start = int(self.starts[index])
        own = self.buffer[start:start + int(self.lengths[index])].tobytes()
        return own + b"".join(part.record(index) for part in self.parts) if self.parts else own

    def slice(self, start: int, stop: int) -> "RecordBlock":
        """Records ``[start, stop)`` of the block (the same buffer, no copy)."""
        return RecordBlock(self.path, self.buffer, self.starts[start:stop], self.lengths[start:stop],
                           self.offsets[start:stop], self.paths[start:stop],
                           tuple(part.slice(start, stop) for part in self.parts))

    def select(self, keep: np.ndarray) -> "RecordBlock":
        """The records where ``keep`` (one bool per record) is True (the same buffer, no copy of their bytes)."""
        paths = tuple(path for path, kept in zip(self.paths, keep.tolist()) if kept)
        return RecordBlock(self.path, self.buffer, self.starts[keep], self.lengths[keep], self.offsets[keep], paths,
                           tuple(part.select(keep) for part in self.parts))

    def own(self) -> "RecordBlock":
        """The block without its parts: each record's own bytes only."""
        return dataclasses.replace(self, parts=()) if self.parts else self

    def joined(self) -> "RecordBlock":
        """The block with each record's parts joined into its bytes (one copy), for a consumer of one buffer."""
        if not self.parts:
            return self
        return RecordBlock.of_records(self.path, [self.record(i) for i in range(len(self))], self.offsets,
                                      paths=list(self.paths) or None)

    @classmethod
    def of_records(cls, path: str, records: list[bytes], offsets: np.ndarray | list[int], *,
                   paths: list[str] | None = None) -> "RecordBlock":
        """A block holding ``records`` (one copy into one buffer); ``paths`` when they come from several shards."""
        lengths = np.fromiter((len(r) for r in records), dtype=np.int64, count=len(records))
        starts = np.zeros(len(records), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        return cls(path, np.frombuffer(b"".join(records), dtype=np.uint8), starts, lengths,
                   np.asarray(offsets, dtype=np.int64), tuple(paths or ()))


def _stored(view: np.ndarray, at: np.ndarray, size: int, dtype: str) -> np.ndarray:
    """The little-endian integer of ``size`` bytes at each position of ``at`` in ``view``."""
    return view[at[:, None] + np.arange(size)].view(dtype).reshape(-1)


def _walk(view: np.ndarray) -> tuple[list[np.ndarray], int, int | None]:
    """The header positions of the whole records in ``view``, where they end, and the header of a
    record cut by the end (None when the view ends at a record boundary or inside a header).

    Records are walked one by one until two in a row have the same length; then a run of records
    of that length (fixed layouts: usually all of them) is found in vector steps: their headers'
    positions are predicted and the lengths stored there compared with it.
    """
    runs: list[np.ndarray] = []
    single: list[int] = []
    size = len(view)
    position = 0
    previous = -1
    unpack = _LENGTH.unpack_from  # takes the array (a buffer)
    while position + HEADER_BYTES <= size:
        (length,) = unpack(view, position)  # type: ignore[arg-type]
        step = HEADER_BYTES + length + FOOTER_BYTES
        if position + step > size:
            runs.append(np.array(single, dtype=np.int64))
            return runs, position, position
        if length != previous:
            single.append(position)
            position += step
            previous = length
            continue
        runs.append(np.array(single, dtype=np.int64))
        single = []
        window = 64
        while True:  # doubling windows of predicted headers, while every one holds the same length
            fit = min(window, (size - position) // step)
            predicted = position + step * np.arange(fit, dtype=np.int64)
            same = _stored(view, predicted, 8, "<u8") == length
            count = fit if same.all() else int(same.argmin())
            runs.append(predicted[:count])
            position += step * count
            if count < window or position + step > size:
                break
            window *= 2
        previous = -1
    runs.append(np.array(single, dtype=np.int64))
    return runs, position, None


def split_frames(view: np.ndarray, *, name: str, base_offset: int = 0, verify: bool = True) -> tuple[RecordBlock, int]:
    """Walks the TFRecord framing of ``view`` from its start: the whole records in it, and the bytes they use.

    A record cut by the view's end is not returned (its bytes are left for the next view). One short loop
    over the lengths; length CRCs are checked once per distinct length, data CRCs compared in one vector step.

    Args:
        view: bytes of a record stream starting at a record boundary, as a read-only uint8 array.
        name: the stream's name (the shard's path) for errors.
        base_offset: the stream offset of ``view[0]`` (for errors and ``offsets``).
        verify: check the length and data CRCs of the records returned.

    Returns:
        The block of records, and the bytes of ``view`` its whole records take (where the next read resumes).

    Raises:
        CorruptShardError: on a CRC mismatch, with the record's offset (the first bad record's).
    """
    runs, position, cut = _walk(view)
    headers = np.concatenate(runs) if runs else np.zeros(0, dtype=np.int64)
    lengths = _stored(view, headers, 8, "<u8").astype(np.int64)
    data = headers + HEADER_BYTES
    if verify and len(headers):  # a walk led astray by a bad length is caught here, at that record
        _check_crcs(view, headers, data, lengths, name=name, base_offset=base_offset)
    if verify and cut is not None and masked_crc(view[cut:cut + 8].tobytes()) != int(
            view[cut + 8:cut + 12].view("<u4")[0]):
        raise CorruptShardError(name, "length CRC mismatch", base_offset + cut)
    return RecordBlock(name, view, data, lengths, headers + base_offset), position


def _check_crcs(view: np.ndarray, headers: np.ndarray, data: np.ndarray, lengths: np.ndarray, *,
                name: str, base_offset: int) -> None:
    """Checks every record's length CRC (from ``_length_crcs``) and data CRC, naming the first bad one."""
    bad_length = np.flatnonzero(_stored(view, headers + 8, 4, "<u4") != _length_crcs(lengths))
    found = np.fromiter(_data_crcs(view, data.tolist(), (data + lengths).tolist()), dtype=np.uint64, count=len(data))
    bad_data = np.flatnonzero(_stored(view, data + lengths, 4, "<u4") != mask_crcs(found))
    # The first bad record, and its length's CRC first (a front-to-back read checks it before the data's).
    first_length = bad_length[0] if len(bad_length) else len(headers)
    first_data = bad_data[0] if len(bad_data) else len(headers)
    if first_length <= first_data and first_length < len(headers):
        raise CorruptShardError(name, "length CRC mismatch", base_offset + int(headers[first_length]))
    if first_data < len(headers):
        raise CorruptShardError(name, "data CRC mismatch", base_offset + int(headers[first_data]))


def _data_crcs(view: np.ndarray, starts: list[int], stops: list[int]) -> Iterator[int]:
    """The CRC32C of each ``view[start:stop]``: one C call per record, the loop kept in C by ``map``.

    ``crc32c`` takes memoryview slices, cheaper than the NumPy slices google-crc32c needs (both compute in
    hardware, as fast per byte): 1.00 against 1.34 CPU us per 7 KB record, 0.52 of them the CRC itself.
    """
    return map(crc32c.crc32c, map(view.data.__getitem__, map(slice, starts, stops)))


_TABLED_LENGTHS = 1 << 16  # lengths whose masked CRC is kept once computed (256 KB)
_length_table = np.zeros(_TABLED_LENGTHS, dtype=np.uint32)
_length_known = np.zeros(_TABLED_LENGTHS, dtype=bool)


def _length_crcs(lengths: np.ndarray) -> np.ndarray:
    """The masked CRC of each record length's 8 bytes, computed once per length below ``_TABLED_LENGTHS`` in the
    process (images' lengths are mostly distinct within a block, but recur across blocks), else once per block."""
    tabled = lengths < _TABLED_LENGTHS  # lengths are at most a view's size: never negative
    small = lengths[tabled]
    missing = np.unique(small[~_length_known[small]]).tolist()
    if missing:  # filled before it is marked known: a concurrent reader sees either nothing or the value
        _length_table[missing] = [masked_crc(_LENGTH.pack(n)) for n in missing]
        _length_known[missing] = True
    if len(small) == len(lengths):
        return _length_table[lengths]
    out = np.empty(len(lengths), dtype=np.uint32)
    out[tabled] = _length_table[small]
    distinct, which = np.unique(lengths[~tabled], return_inverse=True)
    out[~tabled] = np.array([masked_crc(_LENGTH.pack(n)) for n in distinct.tolist()], dtype=np.uint32)[which]
    return out
