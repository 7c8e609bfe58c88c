"""Spill runs: temporary files of entries sorted by key hash.

The encoding stage writes each worker's entries into runs of bounded size, sorted by hash. A
shard is a hash range, so its entries form one contiguous byte range in every run, and the shard
writer merges those ranges in hash order: each run is read sequentially, memory stays bounded,
and the output order does not depend on how the runner bundled the input.

Entry layout: the key hash as 8 big-endian bytes (so a plain bytes sort of entries orders them by
hash, then by content), one kind byte, then
  RECORD:    the record exactly as it will appear in a TFRecord file (framing included), so shard
             writers copy bytes without re-framing;
  REFERENCE: the record's framed size (uint64 LE), then a pickled file-backed Sample. Large
             records whose payload comes from files are not spilled: the shard writer reads the
             file again and rebuilds the identical record, so the payload is written once.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterator, Sequence
from typing import BinaryIO

import numpy as np

from beam_tfrecord.core.framing import frame
from beam_tfrecord.errors import CorruptShardError

HASH_BYTES = 8
HEADER_BYTES = HASH_BYTES + 1  # hash + kind
HASH_SPACE = 2**64
RECORD = 0
REFERENCE = 1
_RECORD_KIND = bytes([RECORD])
_REFERENCE_KIND = bytes([REFERENCE])


def make_record_entry(key_hash: int, record: bytes) -> bytes:
    """A RECORD entry: hash, kind and the framed record, built in a single copy."""
    return frame(record, key_hash.to_bytes(HASH_BYTES, "big") + _RECORD_KIND)


def make_reference_entry(key_hash: int, framed_size: int, sample_pickle: bytes) -> bytes:
    """A REFERENCE entry: the record is rebuilt from the pickled sample when its shard is written."""
    return b"".join((key_hash.to_bytes(HASH_BYTES, "big"), _REFERENCE_KIND, framed_size.to_bytes(8, "little"),
                     sample_pickle))


def entry_kind(entry: bytes | memoryview) -> int:
    return entry[HASH_BYTES]


def entry_record(entry: bytes | memoryview) -> memoryview:
    """The framed record of a RECORD entry (no copy)."""
    return memoryview(entry)[HEADER_BYTES:]


def entry_reference(entry: bytes | memoryview) -> tuple[int, bytes]:
    """(framed size the plan expects, pickled sample) of a REFERENCE entry."""
    view = memoryview(entry)
    return int.from_bytes(view[HEADER_BYTES:HEADER_BYTES + 8], "little"), bytes(view[HEADER_BYTES + 8:])


def _framed_size(entry: bytes) -> int:
    if entry[HASH_BYTES] == RECORD:
        return len(entry) - HEADER_BYTES
    return int.from_bytes(entry[HEADER_BYTES:HEADER_BYTES + 8], "little")


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
    def of_entries(cls, path: str, entries: Sequence[bytes]) -> "RunIndex":
        """The index of sorted entries (as written by ``encode_run``)."""
        prefixes = b"".join(entry[:HASH_BYTES] for entry in entries)
        count = len(entries)
        return cls(path=path, hashes=np.frombuffer(prefixes, dtype=">u8").astype(np.uint64),
                   framed_sizes=np.fromiter(map(_framed_size, entries), dtype=np.int64, count=count),
                   entry_sizes=np.fromiter(map(len, entries), dtype=np.int64, count=count))

    def slice(self, hash_lo: int, hash_hi: int) -> RunSlice:
        """The entries with hash in [hash_lo, hash_hi)."""
        a = int(np.searchsorted(self.hashes, np.uint64(hash_lo), side="left"))
        b = (len(self.hashes) if hash_hi >= HASH_SPACE
             else int(np.searchsorted(self.hashes, np.uint64(hash_hi), side="left")))
        start = int(self.entry_sizes[:a].sum())
        return RunSlice(self.path, start, start + int(self.entry_sizes[a:b].sum()), self.hashes[a:b],
                        self.entry_sizes[a:b])


def write_run(handle: BinaryIO, entries: Sequence[bytes]) -> None:
    """Writes sorted entries as one run, entry by entry (a buffered handle batches the writes; no
    run-sized joined copy)."""
    for entry in entries:
        handle.write(entry)


def _iter_slice(stream: BinaryIO, run: RunSlice) -> Iterator[bytes]:
    """Yields the entries of a slice from a stream positioned at its start."""
    for size in run.entry_sizes.tolist():
        entry = stream.read(size)
        if len(entry) < size:
            raise CorruptShardError(run.path, f"truncated spill run entry (expected {size} bytes)")
        yield entry


def merge_slices(streams: Sequence[BinaryIO], slices: Sequence[RunSlice]) -> Iterator[bytes]:
    """Yields the entries of all slices in (hash, content) order.

    The order is computed from the slices' hashes with NumPy; only when two entries share a
    hash (a duplicated key) does it fall back to comparing entries, so ties are broken by content
    and the output never depends on which run held which entry.
    """
    if not slices:
        return
    hashes = np.concatenate([s.hashes for s in slices])
    which = np.concatenate([np.full(s.num_entries, i, np.int32) for i, s in enumerate(slices)])
    order = np.argsort(hashes, kind="stable")
    iterators = [_iter_slice(stream, s) for stream, s in zip(streams, slices)]
    if len(hashes) > 1 and bool((np.diff(hashes[order]) == 0).any()):
        yield from heapq.merge(*iterators)
        return
    for index in which[order].tolist():
        yield next(iterators[index])
