"""The local worker processes keep the memory they free, instead of giving it back and faulting it in again.

glibc's ``malloc`` serves a large block (above ~128 KiB, a limit it raises up to 32 MiB as it
sees such blocks freed) with a fresh ``mmap`` and unmaps it when freed, and it gives the top of its
heap back to the system once more than twice that limit is free there. A worker's blocks are big
and short-lived (a chunk of 1,000 samples, a spill run's joins, a file's bytes read for its shard),
so it kept unmapping memory and faulting fresh pages in again: each costs a trap and a zeroed page,
~0.2 ms per 200 KB file on these VMs (2,500 files read with ``readall``: 0.14-0.21 s, 38,000 page
faults; with the limits below: 0.086 s and none). ``keep_freed_memory`` raises both limits in a
worker process, so freed memory is reused: the process's peak stays what its work needs, but what
it freed is not returned until the worker ends (at most ``TRIM_THRESHOLD_BYTES`` free at the top of
a heap). Only the runner's own worker processes call it, never a user's process.
Measured: ``docs/performance.md`` ("Write benchmark, 2026-11-26, later: memory touched once").
"""

from __future__ import annotations

import ctypes

MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's most: larger blocks are mapped and unmapped each time
TRIM_THRESHOLD_BYTES = 64 << 20
_M_TRIM_THRESHOLD = -1  # mallopt's parameters (malloc.h)
_M_MMAP_THRESHOLD = -3


def keep_freed_memory() -> bool:
    """Raises this process's ``malloc`` limits (above); False where its C library has no ``mallopt``."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):  # not glibc (macOS, or another allocator preloaded without it)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD,
                                                                                      TRIM_THRESHOLD_BYTES))
