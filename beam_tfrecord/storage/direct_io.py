"""Page-cache-bypassing (``O_DIRECT``) reads and writes for the writer's big sequential files.

Data is staged in page-aligned memory and moved in whole blocks; the last partial block is written
buffered. Anything this cannot serve (remote paths, non-Linux, filesystems refusing ``O_DIRECT``) falls
back to the ordinary ``storage`` handles with the same bytes. Why and when: docs/performance.md,
"How a dataset is written" (the page cache is bypassed).
"""

from __future__ import annotations

import concurrent.futures
import errno
import io
import mmap
import os
from typing import BinaryIO, cast

from beam_tfrecord import storage
from beam_tfrecord.storage import buffers

ALIGN_BYTES = 4096  # a multiple of every common logical block size (512, 4096)
BUFFER_BYTES = 4 << 20
WRITE_BUFFERS = 4  # a DirectWriter's ring: up to 3 blocks wait for the device while the 4th fills
_O_DIRECT = getattr(os, "O_DIRECT", 0)


def _is_local(path: str) -> bool:
    return not storage.is_remote(path)


def _open_direct(path: str, flags: int) -> int | None:
    """A descriptor opened with O_DIRECT, or None where this system or filesystem has none."""
    if not _O_DIRECT or not _is_local(path):
        return None
    try:
        return os.open(path, flags | _O_DIRECT, 0o644)
    except OSError as err:
        if err.errno == errno.EINVAL:  # the filesystem does not support O_DIRECT
            return None
        raise


def open_write(path: str, *, direct: bool = True) -> BinaryIO:
    """Opens ``path`` for writing (parent folders created), bypassing the page cache when it can."""
    if direct and _is_local(path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fd = _open_direct(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        if fd is not None:
            return cast(BinaryIO, DirectWriter(fd))  # a file-like writer: write, close, context manager
    return storage.open_write(path)


def open_read(path: str, *, direct: bool = True, buffer_bytes: int = 1 << 20) -> BinaryIO:
    """Opens ``path`` for reading (seekable), bypassing the page cache when it can."""
    fd = _open_direct(path, os.O_RDONLY) if direct else None
    if fd is None:
        return storage.open_read(path)
    return io.BufferedReader(DirectReader(fd, buffer_bytes), buffer_size=buffer_bytes)


SHARE_FOR_KEPT_FILES = 0.5  # shards: they reach the device anyway; the rest is room for other writers


def page_cache_takes(num_bytes: int, *, share: float = SHARE_FOR_KEPT_FILES) -> bool:
    """True when ``num_bytes`` more of dirty page cache keep this machine under ``share`` (by
    default half) of the level at which the kernel starts writing dirty pages back
    (``vm.dirty_background_bytes``, else ``vm.dirty_background_ratio`` percent of the available
    memory).

    Below that level a buffered write only copies into memory: the job does not wait for the
    device, the device stays free for the job's own reads and writes (the kernel writes the pages
    back later, after ``vm.dirty_expire_centisecs``), and a shard written so is still cached when it
    is read next (training, ``verify``). Half the level leaves room for the machine's other writers.
    Above it, the kernel would write back while the job reads and writes: ``O_DIRECT`` is faster
    there (measured in docs/performance.md, "Write benchmark, 2026-11-26"). False where ``/proc``
    does not say.
    """
    state = dirty_state()
    return state is not None and fits_before_writeback(num_bytes, *state, share=share)


def fits_before_writeback(num_bytes: int, dirty_bytes: int, writeback_level_bytes: int, *,
                          share: float = SHARE_FOR_KEPT_FILES) -> bool:
    """``page_cache_takes``'s rule: the dirty pages, ``num_bytes`` more, under ``share`` of the level."""
    return dirty_bytes + num_bytes <= int(writeback_level_bytes * share)


def throttle_ratio() -> float:
    """Where the kernel starts slowing writers, as a multiple of the background writeback level
    (``dirty_state``'s): ``balance_dirty_pages`` lets a writer dirty pages freely up to halfway between
    that level and ``vm.dirty_bytes`` (else ``vm.dirty_ratio`` percent of the available memory); 1.5
    with the kernel's default ratios (10 and 20). 1.0 where ``/proc`` does not say."""
    try:
        settings = {}
        for name in ("dirty_background_bytes", "dirty_background_ratio", "dirty_bytes", "dirty_ratio"):
            with open(f"/proc/sys/vm/{name}", "rb") as handle:
                settings[name] = int(handle.read())
        with open("/proc/meminfo", "rb") as handle:
            available = next(int(line.split()[1]) * 1024 for line in handle if line.startswith(b"MemAvailable:"))
    except (OSError, ValueError, StopIteration):
        return 1.0
    return throttle_ratio_of(settings, available)


def throttle_ratio_of(settings: dict[str, int], available_bytes: int) -> float:
    """``throttle_ratio`` from the four ``vm.dirty_*`` settings (a ``*_bytes`` of 0 defers to its ``*_ratio``)."""
    background = settings["dirty_background_bytes"] or available_bytes * settings["dirty_background_ratio"] // 100
    limit = settings["dirty_bytes"] or available_bytes * settings["dirty_ratio"] // 100
    if background <= 0 or limit <= background:  # the kernel then takes half the limit as the level: no room above
        return 1.0
    return (background + limit) / 2 / background


def dirty_state() -> tuple[int, int] | None:
    """(dirty and under-writeback bytes, the background writeback level in bytes), from ``/proc``."""
    try:
        with open("/proc/meminfo", "rb") as handle:
            meminfo = {fields[0].rstrip(b":"): int(fields[1]) * 1024
                       for fields in map(bytes.split, handle) if len(fields) >= 2}
        with open("/proc/sys/vm/dirty_background_bytes", "rb") as handle:
            level = int(handle.read())
        if not level:
            with open("/proc/sys/vm/dirty_background_ratio", "rb") as handle:
                level = meminfo[b"MemAvailable"] * int(handle.read()) // 100
        return meminfo[b"Dirty"] + meminfo[b"Writeback"], level
    except (OSError, ValueError, KeyError):
        return None


class RangeReader:
    """Reads byte ranges of many files, bypassing the page cache when it can. Thread-safe.

    For a shard writer merging its slice of every spill run: memory does not grow with the number
    of runs (a buffered reader per open run cost ~2 MiB each: 400 MB for 200 runs), and no file
    stays open between reads. A local read lands in a page-aligned buffer of its own (O_DIRECT
    needs one; reused once no view of it is left, ``buffers``), and what it returns is a view of
    that buffer: no copy, and several threads may read at once (a device serves concurrent reads
    faster than one at a time: measured here, 340 KiB reads ran at 0.73 GB/s one at a time and
    1.63 GB/s four at a time).

    Args:
        direct: use ``O_DIRECT`` for local files where the filesystem allows it.
    """

    def __init__(self, *, direct: bool = True) -> None:
        self._direct = direct

    def read(self, path: str, offset: int, length: int) -> bytes | memoryview:
        """``length`` bytes of ``path`` from ``offset`` (fewer only where the file ends)."""
        if not _is_local(path):
            with storage.open_read(path) as handle:
                handle.seek(offset)
                return handle.read(length)
        fd = _open_direct(path, os.O_RDONLY) if self._direct else None
        if fd is None:  # through the page cache, into a reused buffer all the same
            fd = os.open(path, os.O_RDONLY)
        try:
            return _read_aligned(fd, offset, length)
        finally:
            os.close(fd)

    def close(self) -> None:
        """Nothing to release (each read's buffer goes with its view); kept for callers' ``finally``."""


def _read_aligned(fd: int, offset: int, length: int) -> memoryview:
    """``length`` bytes from ``offset`` of a descriptor (fewer only at the end of the file), read in
    aligned blocks (as ``O_DIRECT`` needs) into a reused page-aligned buffer (``buffers``), as a
    view of it."""
    start = offset - offset % ALIGN_BYTES
    end = -(-(offset + length) // ALIGN_BYTES) * ALIGN_BYTES
    if end == start:
        return memoryview(b"")
    view = buffers.view(end - start)
    done = 0
    while done < end - start:
        got = os.preadv(fd, [view[done:]], start + done)
        if got <= 0:  # the end of the file
            break
        done += got
    available = max(0, min(length, done - (offset - start)))
    return view[offset - start:offset - start + available]


class DirectWriter(io.RawIOBase):
    """Writes through an O_DIRECT descriptor in aligned blocks; ``close`` writes the unaligned tail.

    ``WRITE_BUFFERS`` page-aligned buffers in a ring: a thread writes the full ones to the device in
    order (``os.write`` releases the GIL) while the caller fills the next, so encoding overlaps the
    device's time, and a slow write holds the caller back only once every buffer waits for the device.
    An error of a background write is raised by the ``write`` that comes round to its buffer again, or by
    ``close``. Not seekable: spill runs and shards are written front to back.
    """

    def __init__(self, fd: int, buffer_bytes: int = BUFFER_BYTES) -> None:
        super().__init__()
        self._fd = fd
        self._views = [buffers.view(buffer_bytes) for _ in range(WRITE_BUFFERS)]  # page-aligned, as O_DIRECT requires
        self._writes: list[concurrent.futures.Future | None] = [None] * len(self._views)  # each buffer's last write
        self._current = 0
        self._used = 0
        self._writer = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="direct-write")
        self._failed = False  # a write failed and was reported: close only releases resources

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        source = memoryview(data).cast("B")  # slicing a view copies nothing
        size = len(source)
        done = 0
        view = self._views[self._current]
        capacity = len(view)
        while done < size:
            take = min(capacity - self._used, size - done)
            view[self._used:self._used + take] = source[done:done + take]
            self._used += take
            done += take
            if self._used == capacity:
                self._writes[self._current] = self._writer.submit(self._write_all, view)
                self._current = (self._current + 1) % len(self._views)
                self._used = 0
                self._wait(self._current)  # the next buffer is free once its last write is done
                view = self._views[self._current]
        return size

    def _wait(self, index: int) -> None:
        pending, self._writes[index] = self._writes[index], None
        if pending is not None:
            try:
                pending.result()
            except OSError:
                self._failed = True
                raise

    def _write_all(self, block: memoryview) -> None:
        written = os.write(self._fd, block)
        if written != len(block):
            # A device that fills up mid-block writes what fits and returns a short count.
            stats = os.fstatvfs(self._fd)
            full = stats.f_bavail * stats.f_frsize < len(block) - written
            raise OSError(errno.ENOSPC if full else errno.EIO, f"short direct write: {written} of {len(block)} bytes")

    def close(self) -> None:
        if self.closed:
            return
        try:
            if not self._failed:  # after a reported error, the other writes only finish (the shutdown below)
                for offset in range(1, len(self._views) + 1):  # the writes in the order they were submitted
                    self._wait((self._current + offset) % len(self._views))
                self._write_tail()
        finally:
            self._writer.shutdown(wait=True)  # every write submitted is done before the descriptor closes
            os.close(self._fd)
            for view in self._views:  # the buffers go back to the pool (once a traceback holds no slice of them)
                view.release()
            super().close()

    def _write_tail(self) -> None:
        view = self._views[self._current]
        aligned = self._used - self._used % ALIGN_BYTES
        if aligned:
            self._write_all(view[:aligned])
        if self._used > aligned:  # the tail is not a whole block: write it buffered
            import fcntl  # POSIX only, as O_DIRECT is

            flags = fcntl.fcntl(self._fd, fcntl.F_GETFL)
            fcntl.fcntl(self._fd, fcntl.F_SETFL, flags & ~_O_DIRECT)
            self._write_all(view[aligned:self._used])


class DirectReader(io.RawIOBase):
    """Reads through an O_DIRECT descriptor: aligned block reads into a bounce buffer, copied out.

    Seekable. Wrap it in ``io.BufferedReader`` (``open_read`` does) for small reads.
    """

    def __init__(self, fd: int, buffer_bytes: int) -> None:
        super().__init__()
        self._fd = fd
        self._size = os.fstat(fd).st_size
        self._buffer = mmap.mmap(-1, buffer_bytes + 2 * ALIGN_BYTES)
        self._view = memoryview(self._buffer)
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise OSError(errno.EINVAL, f"negative seek position {base + offset}")
        self._position = base + offset
        return self._position

    def readinto(self, target: bytearray | memoryview) -> int:  # type: ignore[override]
        out = memoryview(target).cast("B")
        wanted = min(len(out), self._size - self._position, len(self._view) - 2 * ALIGN_BYTES)
        if wanted <= 0:
            return 0
        start = self._position - self._position % ALIGN_BYTES
        end = -(-(self._position + wanted) // ALIGN_BYTES) * ALIGN_BYTES
        got = os.preadv(self._fd, [self._view[:end - start]], start)
        skip = self._position - start
        count = max(0, min(wanted, got - skip))
        out[:count] = self._view[skip:skip + count]
        self._position += count
        return count

    def close(self) -> None:
        if self.closed:
            return
        self._view.release()
        self._buffer.close()
        os.close(self._fd)
        super().close()
