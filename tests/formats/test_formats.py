"""Each shard format through the registry: write -> read equal, counts, ranges, random access, damage."""

from __future__ import annotations

import dataclasses
import os

import pytest

from beam_tfrecord.core.file_format import Compression, FileFormat
from beam_tfrecord.core.framing import frame, framed_size
from beam_tfrecord.core.manifest import ShardInfo
from beam_tfrecord.errors import CorruptShardError, MissingShardError, ReaderError
from beam_tfrecord.formats import ShardFormat, shard_format
from beam_tfrecord.formats.tfrecord import JOIN_MAX_RECORD_BYTES

RECORDS = [b"", b"a", b"bc" * 50, bytes(range(256)) * 3, b"x" * (JOIN_MAX_RECORD_BYTES + 5), b"last"]
CASES = [pytest.param(FileFormat.TFRECORD, Compression.NONE, id="tfrecord"),
         pytest.param(FileFormat.TFRECORD, Compression.GZIP, id="tfrecord-gzip"),
         pytest.param(FileFormat.ARRAY_RECORD, Compression.NONE, id="array_record")]


def _write(fmt: ShardFormat, path: str, compression: Compression, *, framed: bool) -> ShardInfo:
    writer = fmt.open_writer(path, compression=compression, direct_io=False)
    for record in RECORDS:
        if framed:
            writer.append_framed(frame(record))
        else:
            writer.append(record)
    crc32c, size = writer.close()
    return ShardInfo(filename=os.path.basename(path), split="train", index=0, num_records=len(RECORDS),
                     num_bytes=size, num_record_bytes=sum(framed_size(len(r)) for r in RECORDS), crc32c=crc32c)


def test_every_file_format_is_registered():
    assert {shard_format(f).file_format for f in FileFormat} == set(FileFormat)


@pytest.mark.parametrize(("file_format", "compression"), CASES)
def test_round_trip_counts_and_ranges(tmp_path, file_format, compression):
    fmt = shard_format(file_format)
    path = str(tmp_path / "shard")
    shard = _write(fmt, path, compression, framed=False)
    assert os.path.getsize(path) == shard.num_bytes
    with fmt.open_reader(path, shard, compression=compression) as reader:
        counted = reader.count()
        assert (counted.num_records, counted.num_record_bytes) == (shard.num_records, shard.num_record_bytes)
        assert [r for r, _ in reader.iter_records(0, len(RECORDS))] == RECORDS
        assert [r for r, _ in reader.iter_records(2, 4)] == RECORDS[2:4]
        if fmt.random_access:
            assert reader.read([5, 0, 3]) == [RECORDS[5], RECORDS[0], RECORDS[3]]
        else:
            with pytest.raises(ReaderError, match="no random access"):
                reader.read([0])
    if "ReadTFRecordDataset" in fmt.readers:  # its record ranges, read from where the first one begins
        assert list(fmt.read_range(path, shard, compression=compression, start=2, stop=4)) == [(2, RECORDS[2]),
                                                                                               (3, RECORDS[3])]
    else:
        with pytest.raises(ReaderError, match="not read in record ranges; read them with read_dataset or"):
            fmt.read_range(path, shard, compression=compression, start=0, stop=1)


@pytest.mark.parametrize(("file_format", "compression"), CASES)
def test_framed_and_plain_appends_store_the_same_bytes(tmp_path, file_format, compression):
    fmt = shard_format(file_format)
    plain = _write(fmt, str(tmp_path / "plain"), compression, framed=False)
    framed = _write(fmt, str(tmp_path / "framed"), compression, framed=True)
    assert (plain.crc32c, plain.num_bytes) == (framed.crc32c, framed.num_bytes)


def test_an_uncompressed_tfrecord_shard_is_its_framed_records(tmp_path):
    path = str(tmp_path / "shard")
    _write(shard_format(FileFormat.TFRECORD), path, Compression.NONE, framed=False)
    with open(path, "rb") as handle:
        assert handle.read() == b"".join(frame(r) for r in RECORDS)


@pytest.mark.parametrize(("file_format", "compression"), CASES)
def test_a_missing_shard_is_a_missing_shard_error(tmp_path, file_format, compression):
    shard = ShardInfo(filename="gone", split="train", index=0, num_records=1, num_bytes=17, num_record_bytes=17,
                      crc32c="00000000")
    with pytest.raises(MissingShardError):
        shard_format(file_format).open_reader(str(tmp_path / "gone"), shard, compression=compression)


@pytest.mark.parametrize(("file_format", "compression"), CASES)
def test_a_shard_with_fewer_records_than_listed_is_corrupt(tmp_path, file_format, compression):
    fmt = shard_format(file_format)
    path = str(tmp_path / "shard")
    shard = _write(fmt, path, compression, framed=False)
    listed = dataclasses.replace(shard, num_records=len(RECORDS) + 1)
    with pytest.raises(CorruptShardError, match="manifest"):  # opening or reading may notice
        with fmt.open_reader(path, listed, compression=compression) as reader:
            list(reader.iter_records(0, len(RECORDS) + 1))


@pytest.mark.parametrize("cuts", [[], [10], [3, 4, 40], [1, 2, 3, 60, 61]])
def test_windows_of_fetched_ranges_are_the_stream_bytes_whatever_the_cuts(cuts):
    import itertools

    from beam_tfrecord.formats.tfrecord import _ChunkWindows

    data = bytes(range(64))
    bounds = [0, *cuts, len(data)]
    windows = _ChunkWindows(iter([memoryview(data[a:b]).toreadonly() for a, b in itertools.pairwise(bounds)]))
    got, offset = [], 0
    for size, used in [(8, 8), (8, 5), (16, 0), (32, 30), (8, 8), (20, 0)]:  # used 0: a widened window
        view = windows.window(offset, size)
        got.append(bytes(view))
        offset += used
    assert got == [data[0:8], data[8:16], data[13:29], data[13:45], data[43:51], data[51:64]]
