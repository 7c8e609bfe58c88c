"""Spill runs: temporary files of framed records sorted by key hash.

The encoding stage writes each worker's records into runs of bounded size, sorted by hash.
A shard is a hash range, so its records form one contiguous byte range in every run, and the
shard writer merges those ranges in hash order: each run is read sequentially, memory stays
bounded, and the output order does not depend on how the runner bundled the input.

Entry layout: the key hash as 8 big-endian bytes, then the record exactly as it will appear in
a TFRecord file (framing included), so shard writers copy bytes without re-framing. Big-endian
makes a plain bytes sort of entries order them by hash (then by content, for equal hashes).
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterator, Sequence
from typing import BinaryIO

import numpy as np

from beam_tfrecord.core.framing import FRAMING_BYTES, frame
from beam_tfrecord.errors import CorruptShardError

HASH_BYTES = 8
HASH_SPACE = 2**64


def make_entry(key_hash: int, record: bytes) -> bytes:
    """One run entry: the hash prefix and the framed record, built in a single copy."""
    return frame(record, key_hash.to_bytes(HASH_BYTES, "big"))


@dataclasses.dataclass(frozen=True)
class RunSlice:
    """The part of one run that belongs to one shard: a byte range and its entries' hashes and sizes.

    Attributes:
        path: the run file.
        start: first byte of the slice.
        end: one past its last byte.
        hashes: uint64 key hash of each entry, ascending.
        framed_sizes: framed record size of each entry (the entry is 8 bytes longer).
    """

    path: str
    start: int
    end: int
    hashes: np.ndarray
    framed_sizes: np.ndarray

    @property
    def num_entries(self) -> int:
        return len(self.hashes)


@dataclasses.dataclass(frozen=True)
class RunIndex:
    """What the planner needs to know about one run: its path and, per entry, hash and framed size.

    Attributes:
        path: the run file.
        hashes: uint64 key hashes, sorted ascending.
        framed_sizes: int64 framed TFRecord sizes, aligned with hashes.
    """

    path: str
    hashes: np.ndarray
    framed_sizes: np.ndarray

    @classmethod
    def of_entries(cls, path: str, entries: Sequence[bytes]) -> "RunIndex":
        """The index of sorted entries (as written by ``encode_run``)."""
        prefixes = b"".join(entry[:HASH_BYTES] for entry in entries)
        return cls(path=path, hashes=np.frombuffer(prefixes, dtype=">u8").astype(np.uint64),
                   framed_sizes=np.fromiter((len(e) - HASH_BYTES for e in entries), dtype=np.int64,
                                            count=len(entries)))

    def slice(self, hash_lo: int, hash_hi: int) -> RunSlice:
        """The entries with hash in [hash_lo, hash_hi)."""
        a = int(np.searchsorted(self.hashes, np.uint64(hash_lo), side="left"))
        b = (len(self.hashes) if hash_hi >= HASH_SPACE
             else int(np.searchsorted(self.hashes, np.uint64(hash_hi), side="left")))
        entry_bytes = self.framed_sizes[:b] + HASH_BYTES
        start = int(entry_bytes[:a].sum())
        return RunSlice(self.path, start, start + int(entry_bytes[a:b].sum()), self.hashes[a:b],
                        self.framed_sizes[a:b])


def encode_run(entries: Sequence[bytes]) -> bytes:
    """Serializes entries, which must already be sorted."""
    return b"".join(entries)


def _iter_slice(stream: BinaryIO, run: RunSlice) -> Iterator[bytes]:
    """Yields the entries of a slice from a stream positioned at its start."""
    for size in (run.framed_sizes + HASH_BYTES).tolist():
        entry = stream.read(size)
        if len(entry) < size:
            raise CorruptShardError(run.path, f"truncated spill run entry (expected {size} bytes)")
        yield entry


def merge_slices(streams: Sequence[BinaryIO], slices: Sequence[RunSlice]) -> Iterator[memoryview]:
    """Yields the framed records of all slices in (hash, content) order.

    The order is computed from the slices' hashes with NumPy; only when two entries share a
    hash (a duplicated key) does it fall back to comparing entries, so ties are broken by content
    and the output never depends on which run held which record.
    """
    hashes = np.concatenate([s.hashes for s in slices]) if slices else np.zeros(0, np.uint64)
    which = np.concatenate([np.full(s.num_entries, i, np.int32) for i, s in enumerate(slices)]) if slices \
        else np.zeros(0, np.int32)
    order = np.argsort(hashes, kind="stable")
    iterators = [_iter_slice(stream, s) for stream, s in zip(streams, slices)]
    if len(hashes) > 1 and bool((np.diff(hashes[order]) == 0).any()):
        for entry in heapq.merge(*iterators):
            yield memoryview(entry)[HASH_BYTES:]
        return
    for index in which[order].tolist():
        yield memoryview(next(iterators[index]))[HASH_BYTES:]
