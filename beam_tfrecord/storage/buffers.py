"""Reused page-aligned buffers: memory touched once per process, not once per read.

The direct reads and the ``O_DIRECT`` writers' staging take their memory here. A buffer is handed out
again only once no view of it is left, so a caller never sees bytes it holds change. Why (page faults
measured): docs/performance.md, "Write benchmark, 2026-11-26, later: memory touched once".
"""

from __future__ import annotations

import collections
import mmap
import os
import threading


class BufferPool:
    """Page-aligned buffers, each handed out again once no view of it is left. Thread-safe.

    Buffers are kept per power-of-two size, at most ``max_bytes`` in all; beyond that, or for a
    size over a quarter of it, a request gets a buffer of its own, freed with its last view. The
    buffers are private mappings (a forked child's writes never reach its parent's pages).

    Args:
        max_bytes: the most memory the pool keeps.
    """

    MIN_BYTES = 64 << 10
    PROBES = 8  # kept buffers looked at per request, oldest first (views tend to be dropped in order)

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._kept_bytes = 0
        self._rings: dict[int, collections.deque[mmap.mmap]] = {}
        self._lock = threading.Lock()

    def view(self, size: int) -> memoryview:
        """A writable view of ``size`` bytes at the start of a page-aligned buffer (contents undefined)."""
        capacity = max(self.MIN_BYTES, 1 << (size - 1).bit_length())
        if capacity > self._max_bytes // 4:
            return memoryview(_private_buffer(size))
        with self._lock:
            ring = self._rings.setdefault(capacity, collections.deque())
            for _ in range(min(len(ring), self.PROBES)):
                buffer = ring[0]
                ring.rotate(-1)
                if _unexported(buffer):
                    return memoryview(buffer)[:size]  # exported before the lock is let go: no one else gets it
            if self._kept_bytes + capacity <= self._max_bytes:
                buffer = _private_buffer(capacity)
                ring.append(buffer)
                self._kept_bytes += capacity
                return memoryview(buffer)[:size]
        return memoryview(_private_buffer(size))


def _private_buffer(size: int) -> mmap.mmap:
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def _unexported(buffer: mmap.mmap) -> bool:
    """Whether no view of ``buffer`` is alive. ``mmap`` refuses to resize while a buffer of it is
    exported (any ``memoryview`` of it, or a slice of one), and resizing an anonymous map to its own
    size changes nothing."""
    try:
        buffer.resize(len(buffer))
    except BufferError:
        return False
    except (OSError, SystemError, ValueError):  # a system without mremap (O_DIRECT on BSD): never reused
        return False
    return True


# Two merge groups of every shard writer in a process, with some to spare.
POOL_BYTES = 64 << 20
_POOL = BufferPool(POOL_BYTES)


def view(size: int) -> memoryview:
    """A writable view of ``size`` bytes of a page-aligned buffer from this process's pool."""
    return _POOL.view(size)


def _new_pool_in_child() -> None:
    """A forked child (a Beam worker forked from a process that read) starts with a pool of its own."""
    global _POOL
    _POOL = BufferPool(POOL_BYTES)


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_new_pool_in_child)
