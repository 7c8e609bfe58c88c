"""``StorageBackend``: what one store (a path scheme) does; every backend gives the same answers.

Invariant: a backend touches only paths of its own scheme; crossing stores is the facade's work
(``beam_tfrecord.storage``). See docs/operations.md#storage.
"""

from __future__ import annotations

import abc
import dataclasses
import shutil
from collections.abc import Callable
from typing import BinaryIO

from beam_tfrecord.storage.deadlines import StoreDeadlines

COPY_CHUNK_BYTES = 8 << 20  # moved at a time by a streamed copy (to, from or between object stores)

RangedRead = Callable[[str, int, int], bytes]  # (path, start, stop) -> bytes [start, stop) as stored
# A ``RangedRead`` that may give a read-only view of its client's buffer rather than a copy (``ranged_reader``).
RangedView = Callable[[str, int, int], bytes | memoryview]


@dataclasses.dataclass(frozen=True)
class StoredFile:
    """One file as its store lists it.

    Attributes:
        path: its full path.
        size_bytes: its size as stored.
        updated_seconds: last modification (local: mtime; object stores: last update), seconds since the epoch.
        token: a content token that changes when the content may have (None: the store gives none).
    """

    path: str
    size_bytes: int
    updated_seconds: float
    token: str | None


@dataclasses.dataclass(frozen=True)
class VersionedBytes:
    """A file's bytes and the version they were read at (a GCS generation, an S3 or Azure ETag; None where
    the store has no versions)."""

    data: bytes
    version: int | str | None


class StorageBackend(abc.ABC):
    """One store. Paths are full paths of this store. A missing file: ``FileNotFoundError`` from ``read_range``
    and ``ranged_reader``; the store's own not-found error (as before) from the other reads.

    Attributes:
        is_local: paths are this machine's files (no scheme).
        fetched_in_ranges: the readers fetch its shards with parallel ranged reads (``remote_reads``).
        lists_tokens: ``list_details`` gives a content token per file (incremental refresh needs it).
    """

    is_local = False
    fetched_in_ranges = False
    lists_tokens = True

    @abc.abstractmethod
    def exists(self, path: str) -> bool: ...

    @abc.abstractmethod
    def open_read(self, path: str) -> BinaryIO:
        """A raw (undecoded) readable stream of the stored bytes."""

    @abc.abstractmethod
    def read_bytes(self, path: str) -> bytes: ...

    def read_bytes_or_none(self, path: str) -> bytes | None:
        """A whole file's bytes, or None if there is none: one request where ``exists`` then ``read_bytes`` are two."""
        try:
            return self.read_bytes(path)
        except FileNotFoundError:
            return None

    def read_range(self, path: str, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` as stored (fewer past the end)."""
        with self.open_read(path) as handle:
            handle.seek(start)
            return handle.read(max(0, stop - start))

    def ranged_reader(self, connections: int, *, deadlines: StoreDeadlines | None = None) -> RangedView:
        """A ``read_range`` for ``connections`` threads at once (a store may keep that many connections open),
        each request within ``deadlines`` (default: the process's, ``deadlines.current_deadlines``)."""
        del connections, deadlines
        return self.read_range

    @abc.abstractmethod
    def open_write(self, path: str) -> BinaryIO:
        """A writable stream; the file appears (or is replaced) whole when it is closed without an error."""

    def write_new(self, path: str, data: bytes) -> None:
        """Writes ``data`` to ``path``, a fresh name nobody else writes (a temporary name)."""
        with self.open_write(path) as handle:
            handle.write(data)

    @abc.abstractmethod
    def list_files(self, pattern: str, *, include_broken: bool = False) -> list[tuple[str, int]]:
        """(path, size) of every file matching the glob (``paths.glob_regex``), sorted by path."""

    @abc.abstractmethod
    def list_details(self, pattern: str, *, include_broken: bool = False) -> list[StoredFile]:
        """Every file matching the glob, with its update time and content token; with ``include_broken``,
        also the entries that cannot be sized (``list_files``'), with size -1 and no token."""

    @abc.abstractmethod
    def stat(self, path: str) -> StoredFile | None:
        """The file at ``path`` as ``list_details`` gives it; None if there is none."""

    @abc.abstractmethod
    def delete(self, path: str) -> None:
        """Deletes ``path``; a missing file is fine."""

    def delete_tree(self, directory: str) -> None:
        """Deletes ``directory`` and everything under it; a missing one is fine."""
        for path, _ in self.list_files(directory + "/**"):
            self.delete(path)

    def make_dirs(self, path: str) -> None:
        """Creates a directory and its parents (object stores have none: nothing to do)."""
        del path

    @abc.abstractmethod
    def rename(self, source: str, destination: str) -> bool:
        """Moves ``source`` over ``destination`` in one replacement; False when it cannot in place (another disk)."""

    def copy(self, source: str, destination: str) -> None:
        """Copies a file's bytes over ``destination`` (streamed; a store may do it on its side)."""
        with self.open_read(source) as reader, self.open_write(destination) as writer:
            shutil.copyfileobj(reader, writer, COPY_CHUNK_BYTES)

    @abc.abstractmethod
    def create_if_absent(self, path: str, data: bytes) -> bool:
        """Creates ``path`` holding ``data`` only if nothing is there, atomically; whether this call created it."""

    @abc.abstractmethod
    def read_versioned(self, path: str) -> VersionedBytes | None:
        """The bytes at ``path`` and their version; None if there is none."""

    def raise_if_bucket_missing(self, path: str) -> None:
        """Raises ``BucketNotFoundError`` when the bucket of ``path`` is not there. For a store whose "not found"
        does not say whether the object or the bucket is missing (``gs://`` on its emulator), so that a read whose
        "not found" is an answer (``read_bytes_or_none``) costs no second request; asked once nothing was found."""
        del path

    @abc.abstractmethod
    def delete_if_unchanged(self, path: str, read: VersionedBytes) -> None:
        """Deletes ``path`` only if it still holds what ``read_versioned`` gave; else (or if gone) leaves it."""
