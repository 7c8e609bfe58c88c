"""Reused page-aligned buffers (``beam_tfrecord.storage.buffers``): a buffer comes back only once no view of
it is left, so bytes a caller holds never change; a forked child never writes into its parent's."""

import concurrent.futures
import os
import subprocess
import sys

import numpy as np
import pytest

from beam_tfrecord.storage.buffers import BufferPool

SIZE = 200_000  # a 256 KiB buffer


def _address(view: memoryview) -> int:
    return np.frombuffer(view, np.uint8).ctypes.data


def test_a_buffer_comes_back_once_its_views_are_gone():
    pool = BufferPool(max_bytes=8 << 20)
    first = pool.view(SIZE)
    address = _address(first)
    assert address % 4096 == 0  # page-aligned, as O_DIRECT needs
    del first
    assert _address(pool.view(SIZE)) == address


@pytest.mark.parametrize("kept", ["the-view", "a-slice", "a-numpy-array"])
def test_a_buffer_is_not_handed_out_while_any_view_of_it_lives(kept):
    pool = BufferPool(max_bytes=8 << 20)
    view = pool.view(SIZE)
    view[:] = b"\x01" * SIZE
    held = {"the-view": view, "a-slice": view[10:20], "a-numpy-array": np.frombuffer(view, np.uint8)}[kept]
    del view
    others = [pool.view(SIZE) for _ in range(BufferPool.PROBES + 2)]
    for other in others:
        other[:] = b"\x02" * SIZE
    assert bytes(held) == b"\x01" * len(bytes(held))
    assert _address(memoryview(held)) not in {_address(other) for other in others}


def test_memory_kept_stays_under_max_bytes_and_larger_requests_get_their_own():
    pool = BufferPool(max_bytes=1 << 20)  # four 256 KiB buffers
    held = [pool.view(SIZE) for _ in range(6)]  # two more than it keeps: their own buffers
    for i, view in enumerate(held):
        view[:] = bytes([i]) * SIZE
    assert [view[0] for view in held] == list(range(6))
    assert len({_address(view) for view in held}) == 6
    big = pool.view(600_000)  # over a quarter of max_bytes: never kept
    assert len(big) == 600_000
    del held
    assert pool.view(SIZE) is not None


def test_threads_never_share_a_buffer():
    pool = BufferPool(max_bytes=4 << 20)

    def fill_and_check(i: int) -> bool:
        ok = True
        for _ in range(200):
            view = pool.view(70_000)
            pattern = bytes([i]) * len(view)
            view[:] = pattern
            ok &= bytes(view) == pattern
        return ok

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as threads:
        assert all(threads.map(fill_and_check, range(8)))


# In a fresh interpreter (this process's pool holds what other tests left): a free buffer of the
# parent's pool, then a fork; the child takes and fills buffers of that size, and the parent's buffer,
# handed out again, still holds its bytes. Prints the parent's check.
FORK_SCRIPT = """
import os
from beam_tfrecord.storage import buffers
view = buffers.view(200_000)
view[:] = b"P" * len(view)
address = id(view.obj)
del view
pid = os.fork()
if pid == 0:
    try:
        for child_view in [buffers.view(200_000) for _ in range(4)]:
            child_view[:] = b"C" * len(child_view)
    finally:
        os._exit(0)
os.waitpid(pid, 0)
again = buffers.view(200_000)
print(id(again.obj) == address, bytes(again) == b"P" * len(again))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_never_writes_into_its_parents_buffers():
    done = subprocess.run([sys.executable, "-c", FORK_SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True"]  # the same buffer again, with the parent's bytes
