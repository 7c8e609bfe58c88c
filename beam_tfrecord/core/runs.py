"""Spill runs: temporary files of framed records sorted by key hash.

The encoding stage writes each worker's records into runs of bounded size, sorted by hash.
A shard is a hash range, so its records form one contiguous byte range in every run, and the
shard writer merges those ranges in hash order: each run is read sequentially, memory stays
bounded, and the output order does not depend on how the runner bundled the input.

Entry layout: uint64 LE key hash, then the record exactly as it will appear in a TFRecord file
(framing included), so shard writers copy bytes without re-framing.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator
from typing import BinaryIO

import numpy as np

from beam_tfrecord.core.framing import FRAMING_BYTES
from beam_tfrecord.errors import CorruptShardError

HASH_BYTES = 8
_HEAD = struct.Struct("<QQ")  # key hash, record length (the first 8 bytes of the framing)


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

    def byte_range(self, hash_lo: int, hash_hi: int) -> tuple[int, int, int]:
        """(start byte, end byte, number of entries) of the entries with hash in [hash_lo, hash_hi)."""
        a = int(np.searchsorted(self.hashes, np.uint64(hash_lo), side="left"))
        b = (len(self.hashes) if hash_hi >= 2**64
             else int(np.searchsorted(self.hashes, np.uint64(hash_hi), side="left")))
        entry_bytes = self.framed_sizes[:b].astype(np.int64) + HASH_BYTES
        start = int(entry_bytes[:a].sum())
        return start, int(start + entry_bytes[a:b].sum()), b - a


@dataclasses.dataclass(frozen=True)
class RunSlice:
    """The part of one run that belongs to one shard."""

    path: str
    start: int
    end: int
    num_entries: int


def encode_run(entries: list[tuple[int, bytes]]) -> bytes:
    """Serializes (hash, framed record) entries, which must already be sorted."""
    parts: list[bytes] = []
    for key_hash, framed in entries:
        parts.append(key_hash.to_bytes(HASH_BYTES, "little"))
        parts.append(framed)
    return b"".join(parts)


def iter_run(stream: BinaryIO, num_bytes: int, *, name: str) -> Iterator[tuple[int, bytes]]:
    """Yields (hash, framed record) from ``num_bytes`` of a run stream positioned at an entry."""
    remaining = num_bytes
    while remaining > 0:
        head = stream.read(_HEAD.size)
        if len(head) < _HEAD.size:
            raise CorruptShardError(name, "truncated spill run entry", num_bytes - remaining)
        key_hash, length = _HEAD.unpack(head)
        rest = stream.read(length + FRAMING_BYTES - 8)
        if len(rest) < length + FRAMING_BYTES - 8:
            raise CorruptShardError(name, "truncated spill run record", num_bytes - remaining)
        yield key_hash, head[HASH_BYTES:] + rest
        remaining -= HASH_BYTES + length + FRAMING_BYTES
