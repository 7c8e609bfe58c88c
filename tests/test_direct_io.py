"""Page-cache-bypassing file I/O: the same bytes as ordinary I/O, whatever the sizes and offsets."""

import concurrent.futures
import os
import random

import pytest

from beam_tfrecord import direct_io
from beam_tfrecord.direct_io import ALIGN_BYTES, BUFFER_BYTES, DirectWriter

SIZES = [0, 1, ALIGN_BYTES - 1, ALIGN_BYTES, ALIGN_BYTES + 1, BUFFER_BYTES - 1, BUFFER_BYTES, 2 * BUFFER_BYTES + 7]
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
