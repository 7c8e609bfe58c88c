"""Spill runs: temporary files of entries sorted by key hash.

A shard is a hash range, so its entries are one contiguous range of every run, merged in (hash, content) order
whatever the runner's bundling. See docs/performance.md, "How a dataset is written".
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import heapq
import operator
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, BinaryIO

import numpy as np

from beam_tfrecord.core.framing import frame, frame_parts_of_chunk
from beam_tfrecord.core.hashing import HASH_SPACE
from beam_tfrecord.errors import CorruptShardError

HASH_BYTES = 8
ENTRY_HEADER_BYTES = HASH_BYTES + 1  # hash + kind
MERGE_GROUP_BYTES = 16 << 20  # bytes of run data a shard writer holds at a time
# Slices of a group read at once: a group takes a few hundred KiB from each of dozens of runs, and
# the device serves such reads 2.2x faster four at a time than one at a time (direct_io.RangeReader).
MERGE_READ_THREADS = 4
INDEX_SUFFIX = ".idx"
RUN_SUFFIX = ".run"  # every run file's name ends so (``spill`` names them)
# A run's index file: one fixed-size item per entry, in run order, so any range of entries is
# one contiguous read; then a trailer (the entry count and a magic), so that an index cut short
# anywhere, even at an item boundary, is an error rather than a run with fewer records.
_INDEX_ITEM = np.dtype([("hash", "<u8"), ("framed_size", "<i8"), ("entry_size", "<i8")])
_INDEX_TRAILER = struct.Struct("<Q8s")
_INDEX_MAGIC = b"BTFRIDX1"
# An entry: the key hash as 8 big-endian bytes (a bytes sort orders entries by hash, then content), one
# kind byte, then for RECORD the record framed as in a TFRecord file (shard writers copy it as it is), for
# REFERENCE the record's framed size (uint64 LE) and a pickled file-backed Sample (its shard writer reads
# the file again and rebuilds the identical record, so a large payload is written once).
RECORD = 0
REFERENCE = 1
_HEADER = operator.itemgetter(slice(0, ENTRY_HEADER_BYTES))
_HEADER_ITEM = np.dtype([("hash", ">u8"), ("kind", "u1")])
_RECORD_KIND = bytes([RECORD])
_REFERENCE_KIND = bytes([REFERENCE])


def make_record_entry(key_hash: int, record: bytes) -> bytes:
    """A RECORD entry: hash, kind and the framed record, built in a single copy."""
    return frame(record, key_hash.to_bytes(HASH_BYTES, "big") + _RECORD_KIND)


def make_record_entries(key_digests: Sequence[bytes], records: Sequence[Sequence[Any]],
                        nbytes: Sequence[int]) -> list[bytes]:
    """``make_record_entry`` for a chunk, each entry built in one join from its record's parts.

    Args:
        key_digests: each record's key hash as 8 big-endian bytes.
        records: each record as the bytes-like parts that, joined, are the record.
        nbytes: each record's length.
    """
    headers, footers = frame_parts_of_chunk(records, nbytes)
    kind = _RECORD_KIND
    return [b"".join((digest, kind, header, *parts, footer))
            for digest, header, parts, footer in zip(key_digests, headers, records, footers)]


def make_reference_entry(key_hash: int, framed_size: int, sample_pickle: bytes) -> bytes:
    """A REFERENCE entry: the record is rebuilt from the pickled sample when its shard is written."""
    return make_reference_entries([key_hash.to_bytes(HASH_BYTES, "big")], [framed_size], [sample_pickle])[0]


def make_reference_entries(key_digests: Iterable[bytes], framed_sizes: Iterable[int],
                           sample_pickles: Iterable[bytes]) -> list[bytes]:
    """``make_reference_entry`` for a chunk, each key hash given as its 8 big-endian bytes."""
    kind = _REFERENCE_KIND
    return [b"".join((digest, kind, size.to_bytes(8, "little"), pickled))
            for digest, size, pickled in zip(key_digests, framed_sizes, sample_pickles)]


def entry_kind(entry: bytes | memoryview) -> int:
    return entry[HASH_BYTES]


def entry_record(entry: bytes | memoryview) -> memoryview:
    """The framed record of a RECORD entry (no copy)."""
    return memoryview(entry)[ENTRY_HEADER_BYTES:]


def entry_reference(entry: bytes | memoryview) -> tuple[int, bytes]:
    """(framed size the plan expects, pickled sample) of a REFERENCE entry."""
    view = memoryview(entry)
    size = int.from_bytes(view[ENTRY_HEADER_BYTES:ENTRY_HEADER_BYTES + 8], "little")
    return size, bytes(view[ENTRY_HEADER_BYTES + 8:])


def _framed_size(entry: bytes) -> int:
    if entry[HASH_BYTES] == RECORD:
        return len(entry) - ENTRY_HEADER_BYTES
    return int.from_bytes(entry[ENTRY_HEADER_BYTES:ENTRY_HEADER_BYTES + 8], "little")


@dataclasses.dataclass(frozen=True)
class RunSlice:
    """The part of one run that belongs to one shard: a byte range and its entries' hashes and sizes.

    Attributes:
        path: the run file.
        start: first byte of the slice.
        end: one past its last byte.
        hashes: uint64 key hash of each entry, ascending.
        entry_sizes: bytes of each entry in the run.
    """

    path: str
    start: int
    end: int
    hashes: np.ndarray
    entry_sizes: np.ndarray

    @property
    def num_entries(self) -> int:
        return len(self.hashes)


@dataclasses.dataclass(frozen=True)
class SpilledRun:
    """A run on storage, as the pipeline passes it around: its path.

    Its index (hash and sizes of every entry, and their count) is in a file beside it,
    ``path + INDEX_SUFFIX``, so no per-record data travels through the runner's shuffle. A run is
    announced when its first entry is buffered; its files are complete once the bundle that
    announced it has finished (see ``beam_tfrecord.spill.run_files``).
    """

    path: str

    @property
    def index_path(self) -> str:
        return self.path + INDEX_SUFFIX


@dataclasses.dataclass(frozen=True)
class RunIndex:
    """What the planner needs to know about one run: its path and, per entry, hash and sizes.

    Attributes:
        path: the run file.
        hashes: uint64 key hashes, sorted ascending.
        framed_sizes: int64 framed TFRecord size of each entry's record (what the planner balances).
        entry_sizes: int64 bytes of each entry in the run (where the next entry starts).
    """

    path: str
    hashes: np.ndarray
    framed_sizes: np.ndarray
    entry_sizes: np.ndarray

    @classmethod
    def of_entries(cls, path: str, entries: Sequence[bytes], entry_sizes: np.ndarray | None = None) -> "RunIndex":
        """The index of sorted entries (as written by ``write_run``); ``entry_sizes``: their lengths,
        when the caller has them already (``entry_sizes_of``)."""
        headers = np.frombuffer(b"".join(map(_HEADER, entries)), dtype=_HEADER_ITEM)
        if entry_sizes is None:
            entry_sizes = entry_sizes_of(entries)
        framed_sizes = entry_sizes - ENTRY_HEADER_BYTES  # a RECORD entry holds its framed record after the header
        for i in np.flatnonzero(headers["kind"] != RECORD).tolist():
            framed_sizes[i] = _framed_size(entries[i])
        return cls(path=path, hashes=headers["hash"].astype(np.uint64), framed_sizes=framed_sizes,
                   entry_sizes=entry_sizes)

    def to_bytes(self) -> bytes:
        """The index file's content: one fixed-size item per entry, in run order."""
        items = np.empty(len(self.hashes), dtype=_INDEX_ITEM)
        items["hash"], items["framed_size"], items["entry_size"] = self.hashes, self.framed_sizes, self.entry_sizes
        return items.tobytes() + _INDEX_TRAILER.pack(len(items), _INDEX_MAGIC)

    @property
    def num_bytes(self) -> int:
        """The run file's size: its entries laid end to end."""
        return int(self.entry_sizes.sum())

    @classmethod
    def from_bytes(cls, path: str, data: bytes) -> "RunIndex":
        """The index of the run at ``path`` from its index file's content.

        Raises:
            CorruptShardError: the content is cut short, not an index, or its count is wrong.
        """
        where = path + INDEX_SUFFIX
        body_bytes = len(data) - _INDEX_TRAILER.size
        if body_bytes < 0 or data[-len(_INDEX_MAGIC):] != _INDEX_MAGIC:
            raise CorruptShardError(where, f"{len(data)} bytes do not end with a run index trailer "
                                           f"({_INDEX_MAGIC!r}): cut short or not an index")
        (count, _) = _INDEX_TRAILER.unpack_from(data, body_bytes)
        if body_bytes != count * _INDEX_ITEM.itemsize:
            raise CorruptShardError(where, f"expected {count} index items, found {body_bytes / _INDEX_ITEM.itemsize:g}")
        items = np.frombuffer(data, dtype=_INDEX_ITEM, count=count)
        return cls(path, items["hash"].astype(np.uint64), items["framed_size"].astype(np.int64),
                   items["entry_size"].astype(np.int64))

    def slice(self, hash_lo: int, hash_hi: int) -> RunSlice:
        """The entries with hash in [hash_lo, hash_hi): their byte range in the run, hashes and sizes."""
        a = int(np.searchsorted(self.hashes, np.uint64(hash_lo), side="left"))
        b = (len(self.hashes) if hash_hi >= HASH_SPACE
             else int(np.searchsorted(self.hashes, np.uint64(hash_hi), side="left")))
        start = int(self.entry_sizes[:a].sum())
        return RunSlice(self.path, start, start + int(self.entry_sizes[a:b].sum()), self.hashes[a:b],
                        self.entry_sizes[a:b])


def entry_sizes_of(entries: Sequence[bytes | memoryview]) -> np.ndarray:
    """The length of each entry, as int64."""
    return np.fromiter(map(len, entries), dtype=np.int64, count=len(entries))


def write_run(handle: BinaryIO, entries: Sequence[bytes | memoryview], *, chunk_bytes: int = 1 << 20,
              entry_sizes: np.ndarray | None = None) -> None:
    """Writes sorted entries as one run, joined into writes of about ``chunk_bytes`` (few calls, no
    run-sized copy, no Python step per entry). A write ends with the entry that brings it to
    ``chunk_bytes``; ``entry_sizes``: the entries' lengths, when the caller has them already."""
    if entry_sizes is None:
        entry_sizes = entry_sizes_of(entries)
    ends = np.cumsum(entry_sizes)  # where each entry ends in the run
    start, written = 0, 0
    while start < len(entries):
        end = min(int(np.searchsorted(ends, written + chunk_bytes, side="left")) + 1, len(entries))
        handle.write(b"".join(entries[start:end]))
        start, written = end, int(ends[end - 1])


# Reads ``length`` bytes of the run at ``path`` from byte ``offset`` (fewer only at its end).
ReadRange = Callable[[str, int, int], "bytes | bytearray | memoryview"]
_TIE_READ_BYTES = 64 << 10  # bytes of a slice read at a time when entries are merged one by one


def _read_exactly(read_range: ReadRange, run: RunSlice, offset: int, length: int) -> memoryview:
    data = memoryview(read_range(run.path, offset, length))
    if len(data) < length:
        raise CorruptShardError(run.path, f"truncated spill run (expected {length} bytes at offset {offset}, "
                                          f"got {len(data)})")
    return data


def _iter_slice(read_range: ReadRange, run: RunSlice) -> Iterator[bytes]:
    """Yields the entries of a slice, reading about ``_TIE_READ_BYTES`` at a time."""
    sizes = run.entry_sizes.tolist()
    offset, i = run.start, 0
    while i < len(sizes):
        j, length = i + 1, sizes[i]
        while j < len(sizes) and length + sizes[j] <= _TIE_READ_BYTES:
            length += sizes[j]
            j += 1
        data, at = _read_exactly(read_range, run, offset, length), 0
        for size in sizes[i:j]:
            yield bytes(data[at:at + size])
            at += size
        offset, i = offset + length, j


def merge_slices(slices: Sequence[RunSlice], read_range: ReadRange, *,
                 group_bytes: int = MERGE_GROUP_BYTES) -> Iterator[bytes | memoryview]:
    """Yields the entries of all slices in (hash, content) order.

    The order is computed from the slices' hashes with NumPy. The output is cut into groups of
    about ``group_bytes``; each group reads its part of every slice in one ``read_range`` call (a
    slice's entries are consumed front to back, so that part is contiguous) and yields views into
    those reads. A thread reads the next group while this one is yielded, so memory stays bounded
    by two groups whatever the shard size and however many runs there are (nothing is held open
    or buffered per run). Only when two entries share a hash (a duplicated key) does it fall back
    to comparing entries one by one, so ties are broken by content and the output never depends
    on which run held which entry.
    """
    if not slices or not any(s.num_entries for s in slices):
        return
    hashes = np.concatenate([s.hashes for s in slices])
    which = np.concatenate([np.full(s.num_entries, i, np.int64) for i, s in enumerate(slices)])
    order = np.argsort(hashes, kind="stable")
    if len(hashes) > 1 and bool((np.diff(hashes[order]) == 0).any()):
        yield from heapq.merge(*(_iter_slice(read_range, s) for s in slices))
        return
    sizes = np.concatenate([s.entry_sizes for s in slices]).astype(np.int64)
    counts = [s.num_entries for s in slices]
    starts_all = np.concatenate([[0], np.cumsum(sizes)])  # where each entry starts in all slices laid end to end
    offsets = starts_all[:-1] - np.repeat(starts_all[np.cumsum([0, *counts[:-1]])], counts)  # ... in its own slice
    sources, starts, lengths = which[order], offsets[order], sizes[order]
    cumulative = np.cumsum(lengths)
    cuts = np.searchsorted(cumulative, np.arange(group_bytes, int(cumulative[-1]), group_bytes), side="right")
    groups = [(lo, hi) for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(order)]) if lo < hi]
    wanted = [np.bincount(sources[lo:hi], weights=lengths[lo:hi], minlength=len(slices)).astype(np.int64)
              for lo, hi in groups]  # bytes each group needs from each slice
    consumed = np.zeros(len(slices), np.int64)  # bytes of each slice yielded so far
    read_at = np.zeros(len(slices), np.int64)  # bytes of each slice read so far (by the reading thread)

    def read_group(needed: np.ndarray) -> list[memoryview | None]:
        """One group's part of every slice, read ``MERGE_READ_THREADS`` slices at a time."""
        wanted_slices = np.flatnonzero(needed).tolist()
        parts = slice_reader.map(lambda i: _read_exactly(read_range, slices[i], slices[i].start + int(read_at[i]),
                                                         int(needed[i])), wanted_slices)
        views: list[memoryview | None] = [None] * len(slices)
        for i, part in zip(wanted_slices, parts):
            views[i] = part
            read_at[i] += needed[i]
        return views

    # While one group is being yielded, a thread reads the next (file reads release the GIL).
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="merge-read") as reader, \
            concurrent.futures.ThreadPoolExecutor(max_workers=MERGE_READ_THREADS,
                                                  thread_name_prefix="merge-read-slice") as slice_reader:
        next_read = reader.submit(read_group, wanted[0])
        for number, (lo, hi) in enumerate(groups):
            views = next_read.result()
            if number + 1 < len(groups):
                next_read = reader.submit(read_group, wanted[number + 1])
            group_sources = sources[lo:hi]
            relative = starts[lo:hi] - consumed[group_sources]
            consumed += wanted[number]
            for i, start, end in zip(group_sources.tolist(), relative.tolist(),
                                     (relative + lengths[lo:hi]).tolist()):
                yield views[i][start:end]
