"""Digest files: records' content hashes, key hashes and keys, in sections of the content hash.

An encoder writes one per buffer of records; the task that finds duplicates among content hashes in
sections [first, end) reads that part of every file (three ranged reads), so equal hashes meet there
and no worker holds every hash. Layout: a header, the rows, the keys' end offsets, the keys' bytes.
"""

from __future__ import annotations

import dataclasses
import operator
import pickle
import struct
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from beam_tfrecord import storage
from beam_tfrecord.core.runs import ENTRY_HEADER_BYTES, HASH_BYTES, RECORD, entry_reference
from beam_tfrecord.core.side_files import EncodedChunk
from beam_tfrecord.errors import PipelineInvariantError
from beam_tfrecord.quality.content import ContentHasher, DuplicatesCheck
from beam_tfrecord.quality.side_buffer import SideFileBuffer

SECTIONS = 1024  # sections by the content hash's top 10 bits: the finest split of the finding work
_SECTION_SHIFT = 64 - 10
_MAGIC = b"BTFRDIG1"
_HEADER = struct.Struct("<8sQ")
_ROW = np.dtype([("hi", "<u8"), ("lo", "<u8"), ("key_hash", "<u8")])
_STARTS_BYTES = (SECTIONS + 1) * 8
# Digests an encoder buffers before writing a file (~40 MB with short keys): a finding task reads about one
# file's worth of rows, as tasks are as many as files (up to ``SECTIONS``).
BUFFER_DIGESTS = 1 << 20
# Entries hashed together (records that arrive one at a time wait for others: one hashing call for many).
_HASHED_TOGETHER, _HASHED_TOGETHER_BYTES = 4096, 16 << 20
_FRAME_HEADER, _FRAME_FOOTER = 12, 4  # a framed record: length (8) and its CRC (4), data, the data's CRC (4)
_RECORD_AT = ENTRY_HEADER_BYTES + _FRAME_HEADER
_KIND, _KEY_HASH = operator.itemgetter(HASH_BYTES), operator.itemgetter(slice(0, HASH_BYTES))
_RECORD = operator.itemgetter(slice(_RECORD_AT, -_FRAME_FOOTER))  # of an entry's memoryview: its record


@dataclasses.dataclass(frozen=True)
class DigestFile:
    """A digest file an encoder announced (on storage once its bundle has finished)."""

    path: str


_GATHER_ROWS = 1 << 16  # keys reordered per numpy gather (bounds its index arrays to ~8 MB with short keys)


class KeyColumn(Sequence[str]):
    """Keys as one UTF-8 blob and each key's end offset: no Python object per key until one is read."""

    def __init__(self, blob: bytes, ends: np.ndarray) -> None:
        self.blob = blob
        self.ends = np.asarray(ends, np.int64)

    @classmethod
    def of(cls, keys: Sequence[str]) -> "KeyColumn":
        if isinstance(keys, KeyColumn):
            return keys
        blob = "".join(keys).encode("utf-8", "surrogatepass")
        lengths = np.fromiter(map(len, keys), np.int64, len(keys))
        if len(blob) != int(lengths.sum()):  # not all ASCII: lengths in bytes, key by key
            lengths = np.fromiter((len(k.encode("utf-8", "surrogatepass")) for k in keys), np.int64, len(keys))
        return cls(blob, np.cumsum(lengths))

    @classmethod
    def concatenate(cls, parts: Sequence["KeyColumn"]) -> "KeyColumn":
        offsets = np.cumsum([0, *(len(p.blob) for p in parts)])
        return cls(b"".join(p.blob for p in parts),
                   np.concatenate([p.ends + offset for p, offset in zip(parts, offsets.tolist())] or [[]]))

    def __len__(self) -> int:
        return len(self.ends)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        start = int(self.ends[index - 1]) if index > 0 else 0
        return self.blob[start:int(self.ends[index])].decode("utf-8", "surrogatepass")

    def take(self, rows: np.ndarray) -> "KeyColumn":
        """The keys of ``rows``, in that order (a numpy gather per block of rows; one, when all are as long)."""
        lengths = np.diff(self.ends, prepend=0)
        if len(lengths) and (width := int(lengths[0])) > 0 and bool((lengths == width).all()):  # numbered keys
            fixed = np.frombuffer(self.blob, f"V{width}")  # each key one fixed-width item
            return KeyColumn(fixed[rows].tobytes(), np.arange(1, len(rows) + 1, dtype=np.int64) * width)
        starts = self.ends - lengths
        data, parts = np.frombuffer(self.blob, np.uint8), []
        for first in range(0, len(rows), _GATHER_ROWS):
            block = rows[first:first + _GATHER_ROWS]
            lengths = self.ends[block] - starts[block]
            out_starts = np.cumsum(lengths) - lengths
            index = np.repeat(starts[block] - out_starts, lengths) + np.arange(int(lengths.sum()))
            parts.append(data[index].tobytes())
        return KeyColumn(b"".join(parts), np.cumsum(self.ends[rows] - starts[rows]))


@dataclasses.dataclass(frozen=True)
class Digests:
    """Content hashes (as two uint64 halves), key hashes and keys of some records, row by row."""

    hi: np.ndarray
    lo: np.ndarray
    key_hashes: np.ndarray
    keys: KeyColumn

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", KeyColumn.of(self.keys))

    @classmethod
    def of(cls, content: bytes, key_digests: bytes | Sequence[bytes], keys: Sequence[str]) -> "Digests":
        """From concatenated 16-byte content hashes and 8-byte big-endian key hashes."""
        halves = np.frombuffer(content, dtype=">u8").astype(np.uint64).reshape(-1, 2)
        joined = key_digests if isinstance(key_digests, bytes) else b"".join(key_digests)
        key_hashes = np.frombuffer(joined, dtype=">u8").astype(np.uint64)
        return cls(halves[:, 0].copy(), halves[:, 1].copy(), key_hashes, KeyColumn.of(keys))

    @classmethod
    def concatenate(cls, parts: Sequence["Digests"]) -> "Digests":
        if not parts:
            empty = np.zeros(0, np.uint64)
            return cls(empty, empty, empty, KeyColumn(b"", np.zeros(0, np.int64)))
        return cls(np.concatenate([p.hi for p in parts]), np.concatenate([p.lo for p in parts]),
                   np.concatenate([p.key_hashes for p in parts]), KeyColumn.concatenate([p.keys for p in parts]))

    def __len__(self) -> int:
        return len(self.keys)


def section_of(hi: np.ndarray) -> np.ndarray:
    return (np.asarray(hi, np.uint64) >> np.uint64(_SECTION_SHIFT)).astype(np.int64)


def write_digest_file(path: str, digests: Digests) -> None:
    """Writes ``digests`` section after section (in input order within one), with the sections' starts."""
    sections = section_of(digests.hi).astype(np.uint16)
    order = np.argsort(sections, kind="stable")  # a radix sort of 16-bit sections: the finding task sorts
    rows = np.empty(len(digests), _ROW)
    rows["hi"], rows["lo"], rows["key_hash"] = digests.hi[order], digests.lo[order], digests.key_hashes[order]
    starts = np.searchsorted(sections[order], np.arange(SECTIONS + 1), side="left").astype("<u8")
    keys = digests.keys.take(order)
    with storage.open_write(path) as handle:
        handle.write(_HEADER.pack(_MAGIC, len(rows)))
        handle.write(starts.tobytes())
        handle.write(rows.tobytes())
        handle.write(keys.ends.astype("<u8").tobytes())
        handle.write(keys.blob)


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
    return Digests(rows["hi"].astype(np.uint64), rows["lo"].astype(np.uint64), rows["key_hash"].astype(np.uint64),
                   KeyColumn(blob, ends - key_start))


class DigestBuffer(SideFileBuffer):
    """Exact duplicates' side file: each record's content hash, key hash and key, in a ``DigestFile``.

    A REFERENCE entry's record is built again from its sample to be hashed (``rebuild``, the encoder's record
    builder; None where every entry is a RECORD one).
    """

    def __init__(self, check: DuplicatesCheck, digests_dir: str, *,
                 rebuild: Callable[[Any], Any] | None = None) -> None:
        super().__init__(digests_dir, suffix=".dig", limit=BUFFER_DIGESTS)
        self._check = check
        self._rebuild = rebuild
        self._hasher: ContentHasher | None = None  # made at the first hash: the buffer pickles until used
        self._pending: list[bytes] = []  # entries and keys not hashed yet
        self._pending_keys: list[str] = []
        self._pending_bytes = 0
        # content hashes and key hashes as bytes, keys as str: made numpy columns once, when the file is written
        self._content: list[bytes] = []
        self._key_hashes: list[bytes] = []
        self._keys: list[str] = []

    def add(self, chunk: EncodedChunk) -> None:
        if not chunk.entries:
            return
        if len(chunk.entries) != len(chunk.keys):
            raise PipelineInvariantError("digests", f"{len(chunk.entries)} entries but {len(chunk.keys)} keys")
        self._start()
        self._pending.extend(chunk.entries)
        self._pending_keys.extend(chunk.keys)
        self._pending_bytes += sum(map(len, chunk.entries))
        if len(self._pending) >= _HASHED_TOGETHER or self._pending_bytes >= _HASHED_TOGETHER_BYTES:
            self._hash_pending()
            self._written_if_full()

    def _hash_pending(self) -> None:
        entries, keys = self._pending, self._pending_keys
        self._pending, self._pending_keys, self._pending_bytes = [], [], 0
        if not entries:
            return
        if bytes(map(_KIND, entries)).count(RECORD) == len(entries):  # C-level maps: no Python step per record
            records: Iterable[bytes | memoryview] = map(_RECORD, map(memoryview, entries))  # type: ignore[arg-type]
        else:
            records = [memoryview(entry)[_RECORD_AT:-_FRAME_FOOTER] if entry[HASH_BYTES] == RECORD
                       else self._rebuilt(entry) for entry in entries]
        self._hasher = self._hasher or ContentHasher(self._check.excluded)
        self._content.append(self._hasher.digests(records))
        self._key_hashes.append(b"".join(map(_KEY_HASH, entries)))
        self._keys.extend(keys)

    def _rebuilt(self, entry: bytes) -> bytes:
        """A REFERENCE entry's record, built again from its sample (its files read again)."""
        built = None if self._rebuild is None else self._rebuild(pickle.loads(entry_reference(entry)[1]))
        if not isinstance(built, bytes):
            raise PipelineInvariantError("digests", f"a spilled sample no longer encodes: {built}")
        return built

    def _announced(self, path: str) -> DigestFile:
        return DigestFile(path)

    def _rows(self) -> int:
        return len(self._keys)

    def _write(self, path: str) -> None:
        self._hash_pending()
        write_digest_file(path, Digests.of(b"".join(self._content), b"".join(self._key_hashes), self._keys))
        self._content, self._key_hashes, self._keys = [], [], []
