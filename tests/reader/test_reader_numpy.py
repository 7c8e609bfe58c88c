"""read_numpy: round trips without TensorFlow's runtime, equal counts, and typed errors on damaged shards."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from beam_tfrecord.core.framing import FRAMING_BYTES, frame
from beam_tfrecord.errors import CorruptShardError, MissingShardError, ReaderError
from beam_tfrecord.reader.numpy_reader import read_numpy
from beam_tfrecord.reader.options import ImageDecoding, PixelType
from beam_tfrecord.reader.order.mixing import num_examples


@pytest.mark.parametrize("split", ["train", "test"])
def test_all_types_round_trip(all_types, expected_all_types, assert_example, split):
    examples = list(read_numpy(all_types.path, split=split))
    assert len(examples) == num_examples(all_types.path, split=split)
    for example in examples:
        assert_example(example, expected_all_types(all_types.samples[example["key"].decode()]))


def test_sequences_round_trip(sequences, expected_sequence, assert_example):
    examples = list(read_numpy(sequences.path))
    assert sorted(e["key"] for e in examples) == sorted(k.encode() for k in sequences.samples)
    for example in examples:
        assert_example(example, expected_sequence(sequences.samples[example["key"].decode()]))


def test_numpy_reads_what_tf_data_reads(counted):
    from beam_tfrecord import read_dataset

    for index in range(3):
        tf_keys = [k for b in read_dataset(counted.path, split="train[5%:]", num_workers=3, worker_index=index)
                   for k in b["key"].numpy().tolist()]
        np_keys = [e["key"] for e in read_numpy(counted.path, split="train[5%:]", num_workers=3, worker_index=index)]
        assert sorted(tf_keys) == sorted(np_keys)


def test_images_decode_with_pillow(all_types):
    example = next(read_numpy(all_types.path, image_decoding=ImageDecoding(pixel_type=PixelType.FLOAT32)))
    assert example["img"].shape == (6, 5, 3) and example["img"].dtype == np.float32
    resized = next(read_numpy(all_types.path, image_decoding=ImageDecoding(size=(3, 4), channels=4)))
    assert resized["img"].shape == (3, 4, 4) and resized["img"].dtype == np.uint8


@pytest.mark.parametrize("num_workers", [1, 2, 4, 7, 30])
def test_workers_get_equal_disjoint_shares(counted, num_workers):
    shares = [[e["key"] for e in read_numpy(counted.path, split="test", num_workers=num_workers, worker_index=i)]
              for i in range(num_workers)]
    assert {len(s) for s in shares} == {num_examples(counted.path, split="test") // num_workers}
    flat = [k for s in shares for k in s]
    assert len(flat) == len(set(flat))


def test_shuffle_is_seeded_by_seed_and_epoch(counted):
    def keys(seed, epoch):
        return [e["key"] for e in read_numpy(counted.path, shuffle=True, seed=seed, epoch=epoch, shuffle_buffer=50)]

    first = keys(3, 0)
    assert first == keys(3, 0) and first != keys(3, 1) and first != keys(4, 0)
    assert sorted(first) == sorted(e["key"] for e in read_numpy(counted.path))


def test_bad_shuffle_buffer_is_rejected(counted):
    with pytest.raises(ReaderError, match="shuffle_buffer must be a positive int, got 0"):
        next(read_numpy(counted.path, shuffle=True, shuffle_buffer=0))


@pytest.fixture
def damaged(damaged_copy):
    """``damaged_copy`` plus the record offsets of its first test shard."""
    root, path, data = damaged_copy
    offsets = [0]
    while offsets[-1] < len(data):
        length = int.from_bytes(data[offsets[-1]:offsets[-1] + 8], "little")
        offsets.append(offsets[-1] + length + FRAMING_BYTES)
    return root, path, data, offsets[:-1]


def _failure(root: str, error: type = CorruptShardError) -> CorruptShardError:
    """The error reading the test split raises; it must be exactly of type ``error``."""
    with pytest.raises(error) as caught:
        for _ in read_numpy(root, split="test"):
            pass
    assert type(caught.value) is error
    return caught.value


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)


def test_bad_crc_names_shard_and_offset(damaged):
    root, path, data, offsets = damaged
    broken = bytearray(data)
    broken[offsets[2] + 12] ^= 0xFF  # first data byte of the third record
    _write(path, bytes(broken))
    err = _failure(root)
    assert (err.shard, err.offset, err.reason) == (path, offsets[2], "data CRC mismatch")
    assert str(err) == f"shard {path!r} at offset {offsets[2]}: data CRC mismatch"


def test_truncated_shard_names_shard_and_offset(damaged):
    root, path, data, offsets = damaged
    _write(path, data[:-3])
    err = _failure(root)
    assert (err.shard, err.offset) == (path, offsets[-1])
    assert err.reason.startswith("truncated record (expected")


def test_missing_shard_is_named(damaged):
    root, path, _, _ = damaged
    os.remove(path)
    err = _failure(root, MissingShardError)
    assert str(err) == f"shard {path!r}: listed in the manifest but missing from storage"
    assert isinstance(err, FileNotFoundError)


def test_fewer_records_than_manifest(damaged):
    root, path, data, offsets = damaged
    _write(path, data[:offsets[-1]])
    err = _failure(root)
    listed = len(offsets)
    assert (err.shard, err.offset) == (path, offsets[-1])
    assert err.reason == f"ended after {listed - 1} records; the manifest lists {listed}"


def test_more_records_than_manifest(damaged):
    root, path, data, offsets = damaged
    _write(path, data + frame(b"extra"))
    err = _failure(root)
    assert (err.shard, err.offset) == (path, len(data))
    assert err.reason == f"more records than the {len(offsets)} the manifest lists"


def test_record_that_is_not_an_example(damaged):
    root, path, data, offsets = damaged
    _write(path, frame(b"\xff\xff\xff") + data[offsets[1]:])
    err = _failure(root)
    assert (err.shard, err.offset) == (path, 0)
    assert err.reason.startswith("record does not match the schema: DecodeError")


def test_numpy_and_torch_readers_do_not_import_tensorflow(counted):
    code = ("import sys; from beam_tfrecord.reader.numpy_reader import read_numpy; "
            "import beam_tfrecord.reader.torch_dataset; "
            f"n = sum(1 for _ in read_numpy({counted.path!r})); "
            "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'; print(n)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) == num_examples(counted.path)


def test_versioned_root_reads_the_latest_version(counted, tmp_path):
    from beam_tfrecord import read_dataset

    root = tmp_path / "root"
    shutil.copytree(counted.path, root / "versions" / "20260101T000000Z-abcdef")
    (root / "LATEST").write_text("20260101T000000Z-abcdef\n")
    tf_keys = sorted(k for b in read_dataset(str(root), split="test") for k in b["key"].numpy().tolist())
    np_keys = sorted(e["key"] for e in read_numpy(str(root), split="test"))
    assert tf_keys == np_keys and len(np_keys) == num_examples(counted.path, split="test")
