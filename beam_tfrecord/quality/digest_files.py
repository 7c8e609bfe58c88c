"""Digest files: records' content hashes, key hashes and keys, sorted by content hash, in sections.

An encoder writes one per buffer of records; the task that finds duplicates among content hashes in
sections [first, end) reads that part of every file (three ranged reads), so equal hashes meet there
and no worker holds every hash. Layout: a header, the rows, the keys' end offsets, the keys' bytes.
"""

from __future__ import annotations

import dataclasses
import itertools
import struct
from collections.abc import Sequence

import numpy as np

from beam_tfrecord import storage
from beam_tfrecord.errors import PipelineInvariantError

SECTIONS = 1024  # sections by the content hash's top 10 bits: the finest split of the finding work
_SECTION_SHIFT = 64 - 10
_MAGIC = b"BTFRDIG1"
_HEADER = struct.Struct("<8sQ")
_ROW = np.dtype([("hi", "<u8"), ("lo", "<u8"), ("key_hash", "<u8")])
_STARTS_BYTES = (SECTIONS + 1) * 8


@dataclasses.dataclass(frozen=True)
class DigestFile:
    """A digest file an encoder announced (on storage once its bundle has finished)."""

    path: str


@dataclasses.dataclass(frozen=True)
class Digests:
    """Content hashes (as two uint64 halves), key hashes and keys of some records, row by row."""

    hi: np.ndarray
    lo: np.ndarray
    key_hashes: np.ndarray
    keys: tuple[str, ...]

    @classmethod
    def of(cls, content: bytes, key_digests: Sequence[bytes], keys: Sequence[str]) -> "Digests":
        """From concatenated 16-byte content hashes and 8-byte big-endian key hashes."""
        halves = np.frombuffer(content, dtype=">u8").astype(np.uint64).reshape(-1, 2)
        key_hashes = np.frombuffer(b"".join(key_digests), dtype=">u8").astype(np.uint64)
        return cls(halves[:, 0].copy(), halves[:, 1].copy(), key_hashes, tuple(keys))

    @classmethod
    def concatenate(cls, parts: Sequence["Digests"]) -> "Digests":
        if not parts:
            return cls(np.zeros(0, np.uint64), np.zeros(0, np.uint64), np.zeros(0, np.uint64), ())
        return cls(np.concatenate([p.hi for p in parts]), np.concatenate([p.lo for p in parts]),
                   np.concatenate([p.key_hashes for p in parts]), tuple(k for p in parts for k in p.keys))

    def __len__(self) -> int:
        return len(self.keys)


def section_of(hi: np.ndarray) -> np.ndarray:
    return (np.asarray(hi, np.uint64) >> np.uint64(_SECTION_SHIFT)).astype(np.int64)


def write_digest_file(path: str, digests: Digests) -> None:
    """Writes ``digests`` sorted by content hash (then key hash, then key), with its section starts."""
    order = np.lexsort((digests.key_hashes, digests.lo, digests.hi))
    rows = np.empty(len(digests), _ROW)
    rows["hi"], rows["lo"], rows["key_hash"] = digests.hi[order], digests.lo[order], digests.key_hashes[order]
    starts = np.searchsorted(section_of(rows["hi"]), np.arange(SECTIONS + 1), side="left").astype("<u8")
    keys = [digests.keys[i].encode("utf-8", "surrogatepass") for i in order.tolist()]
    ends = np.cumsum([len(k) for k in keys], dtype=np.int64).astype("<u8") if keys else np.zeros(0, "<u8")
    with storage.open_write(path) as handle:
        handle.write(_HEADER.pack(_MAGIC, len(rows)))
        handle.write(starts.tobytes())
        handle.write(rows.tobytes())
        handle.write(ends.tobytes())
        handle.write(b"".join(keys))


def read_sections(path: str, first: int, end: int) -> Digests:
    """The rows of sections [first, end) of a digest file (ranged reads)."""
    with storage.open_read(path) as handle:
        magic, count = _HEADER.unpack(handle.read(_HEADER.size))
        if magic != _MAGIC:
            raise PipelineInvariantError(path, f"a digest file (magic {_MAGIC!r}), got magic {magic!r}")
        starts = np.frombuffer(handle.read(_STARTS_BYTES), "<u8").astype(np.int64)
        lo_row, hi_row = int(starts[first]), int(starts[end])
        rows_at = _HEADER.size + _STARTS_BYTES
        handle.seek(rows_at + lo_row * _ROW.itemsize)
        rows = np.frombuffer(handle.read((hi_row - lo_row) * _ROW.itemsize), _ROW)
        ends_at = rows_at + count * _ROW.itemsize
        handle.seek(ends_at + max(lo_row - 1, 0) * 8)
        ends = np.frombuffer(handle.read((hi_row - lo_row + (lo_row > 0)) * 8), "<u8").astype(np.int64)
        key_start = int(ends[0]) if lo_row > 0 else 0
        ends = ends[1:] if lo_row > 0 else ends
        handle.seek(ends_at + count * 8 + key_start)
        blob = handle.read(int(ends[-1]) - key_start if len(ends) else 0)
    bounds = [0, *(ends - key_start).tolist()]
    keys = tuple(blob[a:b].decode("utf-8", "surrogatepass") for a, b in itertools.pairwise(bounds))
    return Digests(rows["hi"].astype(np.uint64), rows["lo"].astype(np.uint64), rows["key_hash"].astype(np.uint64),
                   keys)
