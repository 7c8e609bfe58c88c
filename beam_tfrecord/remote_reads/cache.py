"""A local cache of remote shards with a byte limit, shared by the processes of one machine.

An entry is keyed by path, CRC32C and size, so it is never stale; entries are renamed in whole.
Limits: docs/reading.md, "Reading from a bucket: parallel ranged reads and a local cache".
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import os
import time
import uuid
from collections.abc import Iterator

LOCK_NAME = ".beam-tfrecord-cache.lock"
PARTIAL_PREFIX = ".partial-"
STALE_PARTIAL_SECONDS = 3600.0


@dataclasses.dataclass(frozen=True)
class CacheKey:
    """What names a cached shard.

    Attributes:
        path: the shard's remote path.
        crc32c: its CRC32C as the manifest lists it (8 hex digits).
        num_bytes: its size as the manifest lists it.
    """

    path: str
    crc32c: str
    num_bytes: int

    @property
    def filename(self) -> str:
        """The entry's file name: unique per (path, CRC32C, size), ending in the shard's own name."""
        digest = hashlib.sha1(self.path.encode("utf-8")).hexdigest()[:16]
        return f"{digest}-{self.crc32c}-{self.num_bytes}-{os.path.basename(self.path)}"


class ShardCache:
    """A directory of whole remote shards, at most ``limit_bytes`` of them (least recently used leave first).

    Args:
        directory: the cache directory (created if missing).
        limit_bytes: the most bytes of entries it keeps; None: no limit.
    """

    def __init__(self, directory: str, *, limit_bytes: int | None) -> None:
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self.limit_bytes = limit_bytes
        self.evicted = 0  # entries this object removed to make room

    def entry_path(self, key: CacheKey) -> str:
        return os.path.join(self.directory, key.filename)

    def lookup(self, key: CacheKey) -> str | None:
        """The entry's path, marked as just used, or None when it is not cached."""
        path = self.entry_path(key)
        try:
            os.utime(path)
        except FileNotFoundError:
            return None
        return path

    def open_entry(self, key: CacheKey) -> int | None:
        """A read-only descriptor of the entry, marked as just used, or None when it is not cached. Its bytes stay
        readable through it when the entry is evicted or replaced later (their disk space is freed at its close)."""
        try:
            descriptor = os.open(self.entry_path(key), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        os.utime(descriptor)
        return descriptor

    def partial_path(self, key: CacheKey) -> str:
        """A fresh temporary name in the directory to write an entry under before ``commit``."""
        return os.path.join(self.directory, f"{PARTIAL_PREFIX}{uuid.uuid4().hex[:12]}-{key.filename}")

    def commit(self, partial: str, key: CacheKey) -> str | None:
        """Renames a fully written ``partial`` into place, first removing least recently used entries to make room.

        Returns the entry's path, or None when the shard is larger than the limit (``partial`` is then removed).
        """
        size = os.path.getsize(partial)
        if self.limit_bytes is not None and size > self.limit_bytes:
            os.remove(partial)
            return None
        final = self.entry_path(key)
        with self._locked():
            if self.limit_bytes is not None:
                self._make_room(size, self.limit_bytes, keep=final)
            os.replace(partial, final)
        return final

    def _make_room(self, incoming: int, limit_bytes: int, *, keep: str) -> None:
        """Removes least recently used entries until ``incoming`` more bytes fit in ``limit_bytes`` (under the lock)."""
        entries = []
        now = time.time()
        for entry in os.scandir(self.directory):
            if not entry.is_file() or entry.name == LOCK_NAME:
                continue
            with contextlib.suppress(FileNotFoundError):
                stat = entry.stat()
                if entry.name.startswith(PARTIAL_PREFIX):
                    if now - stat.st_mtime > STALE_PARTIAL_SECONDS:
                        os.remove(entry.path)  # left by a killed process
                elif entry.path != keep:  # the same shard renamed in by another process: replaced, not added
                    entries.append((stat.st_mtime, stat.st_size, entry.path))
        used = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if used + incoming <= limit_bytes:
                break
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
                self.evicted += 1
            used -= size

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(os.path.join(self.directory, LOCK_NAME), "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def entries(self) -> dict[str, int]:
        """File name -> size of every entry (not the lock, not partial files)."""
        return {entry.name: entry.stat().st_size for entry in os.scandir(self.directory)
                if entry.is_file() and entry.name != LOCK_NAME and not entry.name.startswith(PARTIAL_PREFIX)}
