"""Page-cache-bypassing file I/O: the same bytes as ordinary I/O, whatever the sizes and offsets."""

import concurrent.futures
import ctypes
import mmap
import os
import random

import pytest

from beam_tfrecord.storage import direct_io
from beam_tfrecord.storage.direct_io import ALIGN_BYTES, BUFFER_BYTES, DirectWriter

SIZES = [0, 1, ALIGN_BYTES - 1, ALIGN_BYTES, ALIGN_BYTES + 1, BUFFER_BYTES - 1, BUFFER_BYTES, 2 * BUFFER_BYTES + 7,
         (direct_io.WRITE_BUFFERS + 1) * BUFFER_BYTES + 13]  # the last: round the ring of buffers and on
needs_o_direct = pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="this system has no O_DIRECT")


@needs_o_direct
@pytest.mark.parametrize("size", SIZES, ids=[f"{s}-bytes" for s in SIZES])
def test_write_then_read_back_any_size_in_any_pieces(tmp_path, size):
    rng = random.Random(size)
    data = rng.randbytes(size)
    path = str(tmp_path / "sub" / "file.bin")  # parent folders are created
    with direct_io.open_write(path) as handle:
        assert isinstance(handle, DirectWriter)
        position = 0
        while position < size:
            piece = rng.choice([1, 100, 3_000, 70_000, BUFFER_BYTES + 3])
            handle.write(memoryview(data)[position:position + piece])
            position += piece
    assert (tmp_path / "sub" / "file.bin").read_bytes() == data
    with direct_io.open_read(path, buffer_bytes=64 * 1024) as stream:
        assert stream.read() == data
        for _ in range(30):
            start = rng.randrange(size + 1)
            stream.seek(start)
            length = rng.choice([1, 5_000, 200_000])
            assert stream.read(length) == data[start:start + length]


def test_buffered_fallback_writes_the_same_bytes(tmp_path):
    data = random.Random(0).randbytes(3 * ALIGN_BYTES + 11)
    with direct_io.open_write(str(tmp_path / "buffered.bin"), direct=False) as handle:
        assert not isinstance(handle, DirectWriter)
        handle.write(data)
    with direct_io.open_read(str(tmp_path / "buffered.bin"), direct=False) as stream:
        assert stream.read() == data



@needs_o_direct
def test_a_failed_background_write_is_raised_not_lost(tmp_path):
    path = tmp_path / "read-only.bin"
    path.write_bytes(b"")
    writer = DirectWriter(os.open(path, os.O_RDONLY | os.O_DIRECT), buffer_bytes=ALIGN_BYTES)
    with pytest.raises(OSError) as raised:
        for _ in range(4):  # the first full buffer goes to the thread; a later call reports its error
            writer.write(b"x" * ALIGN_BYTES)
        writer.close()
    assert raised.value.errno == 9  # EBADF: the descriptor is not open for writing
    writer.close()  # closing after the error releases everything and does not raise again


@pytest.mark.parametrize("direct", [True, False], ids=["o-direct", "buffered"])
def test_range_reader_reads_any_range_of_many_files_from_several_threads(tmp_path, direct):
    rng = random.Random(7)
    files = {}
    for i, size in enumerate([0, 1, ALIGN_BYTES + 3, 10_000, 3 * 8192 + 5]):
        path = tmp_path / f"run-{i}.bin"
        path.write_bytes(rng.randbytes(size))
        files[str(path)] = path.read_bytes()
    cases = []
    for _ in range(300):
        path, data = rng.choice(sorted(files.items()))
        offset = rng.randrange(len(data) + 1)
        cases.append((path, offset, rng.choice([0, 1, 100, ALIGN_BYTES, 9_000, 40_000])))
    reader = direct_io.RangeReader(direct=direct)
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as threads:  # as a shard writer's merge reads
        got = list(threads.map(lambda case: bytes(reader.read(*case)), cases))
    for (path, offset, length), read in zip(cases, got):
        assert read == files[path][offset:offset + length]  # short only at the end


def resident_fraction(path: str) -> float:
    """The share of ``path``'s pages in the page cache (``mincore`` of a private mapping of it)."""
    size = os.path.getsize(path)
    pages = -(-size // mmap.PAGESIZE)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_COPY) as mapped:
        start = ctypes.c_char.from_buffer(mapped)  # the mapping's address (nothing is written through it)
        vector = (ctypes.c_ubyte * pages)()
        if libc.mincore(ctypes.addressof(start), size, vector) != 0:
            raise OSError(ctypes.get_errno(), "mincore failed")
        del start
    return sum(byte & 1 for byte in vector) / pages


@needs_o_direct
@pytest.mark.parametrize("direct, resident", [(True, 0.0), (False, 1.0)], ids=["o-direct", "buffered"])
def test_a_direct_write_leaves_nothing_in_the_page_cache_and_a_buffered_one_all(tmp_path, direct, resident):
    path = str(tmp_path / "file.bin")
    with direct_io.open_write(path, direct=direct) as handle:
        handle.write(random.Random(1).randbytes(3 * BUFFER_BYTES))  # whole blocks: no buffered tail
    assert resident_fraction(path) == resident


@pytest.mark.parametrize("num_bytes, dirty, level, takes", [
    (100, 0, 1000, True),
    (500, 0, 1000, True),  # exactly half the level
    (501, 0, 1000, False),
    (100, 400, 1000, True),
    (101, 400, 1000, False),  # what others left dirty counts too
    (0, 600, 1000, False),
], ids=["small", "half", "over-half", "with-others", "others-push-over", "already-over"])
def test_the_page_cache_takes_what_stays_under_half_the_writeback_level(num_bytes, dirty, level, takes):
    assert direct_io.fits_before_writeback(num_bytes, dirty, level) is takes


@pytest.mark.skipif(not os.path.exists("/proc/meminfo"), reason="no /proc")
def test_the_dirty_state_is_read_from_proc_and_the_memory_is_never_taken_whole():
    dirty_bytes, level_bytes = direct_io.dirty_state()
    assert dirty_bytes >= 0 and 0 < level_bytes < os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert not direct_io.page_cache_takes(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


@pytest.mark.parametrize("settings, available, ratio", [
    ({"dirty_background_bytes": 0, "dirty_background_ratio": 10, "dirty_bytes": 0, "dirty_ratio": 20}, 10_000, 1.5),
    ({"dirty_background_bytes": 100, "dirty_background_ratio": 10, "dirty_bytes": 400, "dirty_ratio": 20}, 10_000, 2.5),
    ({"dirty_background_bytes": 0, "dirty_background_ratio": 10, "dirty_bytes": 3_000, "dirty_ratio": 20}, 10_000, 2.0),
    ({"dirty_background_bytes": 0, "dirty_background_ratio": 20, "dirty_bytes": 0, "dirty_ratio": 20}, 10_000, 1.0),
    ({"dirty_background_bytes": 0, "dirty_background_ratio": 0, "dirty_bytes": 0, "dirty_ratio": 20}, 10_000, 1.0),
], ids=["default-ratios", "bytes", "bytes-over-a-ratio", "limit-at-the-level", "no-background-level"])
def test_writers_are_slowed_halfway_from_the_background_level_to_the_limit(settings, available, ratio):
    assert direct_io.throttle_ratio_of(settings, available) == pytest.approx(ratio)


@pytest.mark.skipif(not os.path.exists("/proc/sys/vm/dirty_ratio"), reason="no /proc")
def test_the_throttle_is_read_from_proc():
    assert direct_io.throttle_ratio() >= 1.0
