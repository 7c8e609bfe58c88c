"""glibc's ``malloc`` and Python's collector in worker processes: what a worker does with the memory it
frees, and which of its objects a full collection visits.

The runner's local workers keep it, to reuse without faulting pages in again (``keep_freed_memory``);
a Dask worker near its memory limit gives it back (``give_back_freed_memory``), or Dask's pause at
80% never lifts. Only worker processes call these, never a user's process. Measured:
``docs/performance.md`` ("memory touched once") and ``docs/operations.md`` ("Dask workers' memory").
"""

from __future__ import annotations

import ctypes
import gc

MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's most: larger blocks are mapped and unmapped each time
TRIM_THRESHOLD_BYTES = 64 << 20
_M_TRIM_THRESHOLD = -1  # mallopt's parameters (malloc.h)
_M_MMAP_THRESHOLD = -3


def keep_freed_memory() -> bool:
    """Raises this process's ``malloc`` limits (above); False where its C library has no ``mallopt``.

    glibc serves a large block (above ~128 KiB, a limit it raises up to 32 MiB as it sees such blocks
    freed) with a fresh ``mmap``, unmaps it when freed, and gives a heap's top back once more than
    twice that limit is free there. A local worker's blocks are big and short-lived (a chunk of 1,000
    samples, a spill run's joins, a file's bytes), so it kept faulting fresh pages in: ~0.2 ms per
    200 KB file here (2,500 files read: 0.14-0.21 s and 38,000 page faults; with these limits
    0.086 s and none). The peak stays what the work needs; what was freed is kept until the worker
    ends (at most ``TRIM_THRESHOLD_BYTES`` free at a heap's top).
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):  # not glibc (macOS, or another allocator preloaded without it)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD,
                                                                                      TRIM_THRESHOLD_BYTES))


def give_back_freed_memory() -> bool:
    """Returns the free pages of every ``malloc`` arena to the system (``malloc_trim(0)``); False without glibc.

    Freed memory inside an arena stays in the process's RSS (only a heap's free top is ever given
    back on its own): a Dask worker paused at 825 MiB held 514 MiB free in its arenas, 50 MiB in
    use, and dropped to 313 MiB with this call (``docs/operations.md``, "Dask workers' memory").
    """
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):  # not glibc
        return False
    malloc_trim.argtypes = [ctypes.c_size_t]
    malloc_trim.restype = ctypes.c_int
    malloc_trim(0)
    return True


def freeze_start_heap() -> int:
    """Moves every object this worker holds before its first bundle into the collector's permanent
    generation (``gc.freeze``); returns how many there are.

    Those are the modules it imported, or the ones it inherited from the process that forked it (~240,000
    objects with Beam and this library). None of them is garbage, yet each full collection visited them all:
    on 1M small records a worker ran three, 0.52-0.57 s of its CPU in the collector; frozen, 0.12-0.14 s
    (docs/performance.md, "The collector in the workers"). A forked worker also keeps the pages it shares
    with its parent unwritten (a collection writes to every object it visits).
    """
    gc.freeze()
    return gc.get_freeze_count()
