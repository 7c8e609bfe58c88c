"""``FetchedShard``: one shard of a fetcher as its reader takes it, checked against the manifest and cached."""

from __future__ import annotations

import concurrent.futures
import io
import os
import tempfile
import threading
from collections.abc import Iterator
from typing import Any, Protocol

import google_crc32c
import numpy as np

from beam_tfrecord.errors import CorruptShardError, ReaderError
from beam_tfrecord.remote_reads.cache import ShardCache
from beam_tfrecord.remote_reads.options import COUNTERS, RemoteShard

# In-memory files, read by path through /proc/self/fd (Linux); None where either is missing.
_MEMFD_CREATE = getattr(os, "memfd_create", None) if os.path.isdir("/proc/self/fd") else None


class MemoryFiles:
    """Anonymous in-memory files (``memfd_create``) for private copies: each is given back when its shard is
    closed and written over by a later one, its pages reused rather than freed and allocated again (writing and
    reading 336 MB in 20 MB files took 0.22 CPU-s so, 0.34 with a new file each). ``close()`` frees them."""

    def __init__(self) -> None:
        self._free: list[int] = []
        self._lock = threading.Lock()
        self._closed = False

    def take(self) -> int:
        """A descriptor of an in-memory file, positioned at its start."""
        with self._lock:
            descriptor = self._free.pop() if self._free else None
        if descriptor is None:
            descriptor = _MEMFD_CREATE("beam-tfrecord-shard-copy", os.MFD_CLOEXEC)  # type: ignore[misc]
        os.lseek(descriptor, 0, os.SEEK_SET)
        return descriptor

    def give_back(self, descriptor: int) -> None:
        """The file is no longer read: a later ``take`` writes over it (closed now if these are closed)."""
        with self._lock:
            if not self._closed:
                self._free.append(descriptor)
                return
        os.close(descriptor)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            free, self._free = self._free, []
        for descriptor in free:
            os.close(descriptor)


class RangeSource(Protocol):
    """Where a ``FetchedShard`` takes its bytes from (a ``fetcher.ShardFetcher``)."""

    @property
    def cache(self) -> ShardCache | None: ...

    @property
    def range_bytes(self) -> int: ...

    def take(self, number: int, start: int) -> bytes | memoryview:
        """The range of shard ``number`` at ``start``, waiting for it (bytes or a read-only view)."""

    def give_up(self, number: int, after: int) -> None:
        """The reader stopped reading shard ``number`` at byte ``after``."""

    def private_memory(self, num_bytes: int) -> MemoryFiles | None:
        """In-memory files for a private copy of ``num_bytes``, or None (counted until ``release_memory``)."""

    def release_memory(self, num_bytes: int) -> None:
        """A private copy from ``private_memory`` is closed."""

    def copy_ahead(self, number: int) -> None:
        """The reader took shard ``number`` whole: the shards it reads next may be copied meanwhile."""


class FetchedShard:
    """One shard of a ``ShardFetcher``, for a format's reader: a stream of its bytes, or a whole local file.

    ``stream()`` reads it front to back (checking the CRC32C at the end, and writing the cache entry
    as it goes); ``local_file()`` gives a local path of the whole shard (the cache entry, or a
    private copy removed by ``close()``: a temporary file, or with ``memory`` an anonymous
    in-memory file of ``MemoryFiles``, named by its ``/proc/self/fd`` path). A cache hit is a local
    file from the start.
    """

    def __init__(self, fetcher: RangeSource, number: int, shard: RemoteShard, *, cached: str | None) -> None:
        self._fetcher = fetcher
        self._number = number
        self.shard = shard
        self.cached = cached  # a local path of the whole shard, once there is one
        self._position = 0  # bytes of the shard taken from the fetcher
        self._digest = google_crc32c.Checksum()
        self._partial: Any = None  # the cache entry (or private copy) being written
        self._partial_path: str | None = None
        self._private: str | None = None  # a private temporary copy to remove on close
        self._memory_fd: int | None = None  # the in-memory file of a private copy held in memory
        self._memory: MemoryFiles | None = None  # where it came from
        self._reserved = 0  # bytes of the fetcher's in-memory copies counted for this shard (``memory_file``)
        self._copying: concurrent.futures.Future[str] | None = None  # the copy made ahead (``copy_on``)

    @property
    def path(self) -> str:
        return self.shard.path

    def chunks(self) -> Iterator[bytes | memoryview]:
        """The shard's bytes front to back, a range at a time (checked against the CRC32C at the end); a range
        may be a read-only view (``storage.backend.RangedView``)."""
        if self.cached is not None:
            with open(self.cached, "rb") as handle:
                while cached := handle.read(self._fetcher.range_bytes):
                    yield cached
            return
        self._begin_copy(private=False)
        while self._position < self.shard.num_bytes:
            chunk = self._fetcher.take(self._number, self._position)
            self._position += len(chunk)
            # google_crc32c takes no memoryview ("y#" refuses buffers with a release slot); a read-only array
            # over the same bytes it takes, without a copy.
            self._digest.update(chunk if isinstance(chunk, bytes) else np.frombuffer(chunk, dtype=np.uint8))
            if self._partial is not None:
                self._partial.write(chunk)
            yield chunk
        self._finish_copy()

    def stream(self) -> io.RawIOBase:
        """A readable file object over ``chunks()``."""
        return _ChunkStream(self.chunks())

    def local_file(self, *, memory: MemoryFiles | None = None) -> str:
        """A local path holding the whole shard (fetched now if needed), valid in this process until ``close()``.

        ``memory``: a private copy (no cache) is an in-memory file of it rather than one in the temporary
        directory, where the system has them (Linux): no page of it is allocated by the disk's
        filesystem or written back to the disk (an epoch of 313 MB from gs:// took 0.97 CPU seconds
        with the copies on tmpfs, the memory these files live in, 1.27 s through an ext4 ``/tmp``),
        and nothing is left behind by a killed process. It holds the shard's bytes in memory until
        ``close()``: the caller bounds how many are open.
        """
        if self.cached is None:
            self._begin_copy(private=True, memory=memory)
            for _ in self.chunks():
                pass
            if self.cached is None:
                raise ReaderError(f"{self.path}: no local copy was made")  # unreachable: chunks() made one
        return self.cached

    def memory_file(self) -> str:
        """``local_file`` for a reader that takes whole shards (ArrayRecord, tf.data's files): a private copy in
        the fetcher's in-memory files while the copies it gave out fit in its ``bytes_in_flight``, else on disk.
        An epoch of 320 MB from gs:// behind 40 ms took 1.58-1.98 s so, 1.96-2.11 s through an ext4 ``/tmp``.
        The shards after it are copied meanwhile (``ShardFetcher.copy_ahead``)."""
        if self._copying is not None:
            path = self._copying.result()
        else:
            memory = None
            if self.cached is None and self._fetcher.cache is None and not self._reserved:
                memory = self._fetcher.private_memory(self.shard.num_bytes)
                self._reserved = self.shard.num_bytes if memory is not None else 0
            path = self.local_file(memory=memory)
        self._fetcher.copy_ahead(self._number)
        return path

    def copy_on(self, executor: concurrent.futures.Executor, memory: MemoryFiles | None) -> None:
        """Makes the local file on ``executor`` (in ``memory``, counted in the fetcher's ``private_memory``, when
        given); ``memory_file`` waits for it."""
        self._reserved = self.shard.num_bytes if memory is not None else 0
        self._copying = executor.submit(self.local_file, memory=memory)

    def _begin_copy(self, *, private: bool, memory: MemoryFiles | None = None) -> None:
        if self._partial is not None:
            return
        cache = self._fetcher.cache
        if cache is not None:
            self._partial_path = cache.partial_path(self.shard.key)
        elif private and memory is not None and _MEMFD_CREATE is not None:
            self._memory, self._memory_fd = memory, memory.take()
            self._partial_path = f"/proc/self/fd/{self._memory_fd}"
            self._partial = open(self._memory_fd, "wb", closefd=False)  # noqa: SIM115  (closed as below)
            return
        elif private:
            handle, self._partial_path = tempfile.mkstemp(prefix="beam-tfrecord-shard-",
                                                          suffix=f"-{os.path.basename(self.path)}")
            os.close(handle)
        else:
            return
        self._partial = open(self._partial_path, "wb")  # noqa: SIM115  (closed in _finish_copy or close)

    def _finish_copy(self) -> None:
        found = self._digest.hexdigest().decode("ascii")
        if self._partial is not None:
            self._partial.close()
            self._partial = None
        if self._memory_fd is not None:  # written over an earlier copy: its end goes
            os.ftruncate(self._memory_fd, self._position)
        if found != self.shard.crc32c:
            self._drop_partial()
            raise CorruptShardError(self.path, f"file CRC32C {found} differs from the manifest's {self.shard.crc32c}")
        if self._partial_path is None:
            return
        cache = self._fetcher.cache
        partial, self._partial_path = self._partial_path, None
        if cache is not None:
            self.cached = cache.commit(partial, self.shard.key) if os.path.exists(partial) else None
            if self.cached is not None:
                COUNTERS.add("cached_shards")
                return
            if os.path.exists(partial):
                os.remove(partial)
            return
        self.cached = self._private = partial

    def _drop_partial(self) -> None:
        if self._partial is not None:
            self._partial.close()
            self._partial = None
        if self._memory_fd is not None:  # the in-memory file: back to its MemoryFiles
            if self._memory is not None:
                self._memory.give_back(self._memory_fd)
            self._memory_fd = self._memory = None
            self._partial_path = self._private = None
            return
        if self._partial_path is not None:
            if os.path.exists(self._partial_path):
                os.remove(self._partial_path)
            self._partial_path = None

    def close(self) -> None:
        """Gives up what was not read, removes a private copy and an unfinished cache entry."""
        if self._copying is not None and not self._copying.cancel():
            concurrent.futures.wait([self._copying])  # a copy under way ends (at the latest at the closed fetcher)
        if self.cached is None and self._position < self.shard.num_bytes:
            self._fetcher.give_up(self._number, self._position)
        self._drop_partial()
        if self._private is not None:  # a temporary file (an in-memory one went in _drop_partial)
            if os.path.exists(self._private):
                os.remove(self._private)
            self._private = None
        if self._reserved:
            self._fetcher.release_memory(self._reserved)
            self._reserved = 0


class _ChunkStream(io.RawIOBase):
    """A readable stream over an iterator of byte chunks."""

    def __init__(self, chunks: Iterator[bytes | memoryview]) -> None:
        self._chunks = chunks
        self._held = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._held:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._held = memoryview(chunk)
        count = min(len(buffer), len(self._held))
        buffer[:count] = self._held[:count]
        self._held = self._held[count:]
        return count

    def read(self, size: int | None = -1) -> bytes:
        """``size`` bytes (fewer only at the end), as a buffered file gives them."""
        if size is None or size < 0:
            return b"".join([bytes(self._held), *self._chunks])
        parts: list[memoryview] = []
        while size > 0:
            if not self._held:
                chunk = next(self._chunks, None)
                if chunk is None:
                    break
                self._held = memoryview(chunk)
            part = self._held[:size]
            parts.append(part)
            self._held = self._held[len(part):]
            size -= len(part)
        return b"".join(parts)

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()
        super().close()
