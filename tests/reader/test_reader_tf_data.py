"""read_dataset: every schema type round-trips, workers get equal counts, slicing, resume, options."""

import io
import os
import re

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image as PILImage

from beam_tfrecord import Image, ImageFormat, read_dataset
from beam_tfrecord.core.file_format import Compression, FileFormat
from beam_tfrecord.core.framing import FRAMING_BYTES, frame
from beam_tfrecord.dataset import load_manifest, shard_paths
from beam_tfrecord.errors import DatasetNotFoundError, ReaderError, UnknownSplitError
from beam_tfrecord.formats import TFDataFiles, shard_format
from beam_tfrecord.reader.options import ImageDecoding, PixelType, VarLen
from beam_tfrecord.reader.order.mixing import num_examples


def _examples(dataset: tf.data.Dataset) -> list[dict]:
    """Unbatches a dataset of feature-dict batches into per-example dicts of NumPy values."""
    out = []
    for batch in dataset:
        size = int(batch["key"].shape[0])
        for j in range(size):
            example = {}
            for name, value in batch.items():
                item = value[j]
                if isinstance(item, tf.RaggedTensor):
                    example[name] = item.to_list()
                else:
                    example[name] = item.numpy()
            out.append(example)
    return out


def _keys(dataset: tf.data.Dataset) -> list[bytes]:
    return [key for batch in dataset for key in batch["key"].numpy().tolist()]


@pytest.mark.parametrize("split", ["train", "test"])
def test_all_types_round_trip(all_types, expected_all_types, assert_example, split):
    examples = _examples(read_dataset(all_types.path, split=split, batch_size=7))
    assert len(examples) == len(_keys(read_dataset(all_types.path, split=split)))
    for example in examples:
        assert_example(example, expected_all_types(all_types.samples[example["key"].decode()]))


def test_split_parts_cover_every_sample_once(all_types):
    keys = _keys(read_dataset(all_types.path, split="train+test", batch_size=64))
    assert sorted(keys) == sorted(k.encode() for k in all_types.samples)


def test_padded_var_len_pads_to_longest_in_batch(all_types):
    batch = next(iter(read_dataset(all_types.path, batch_size=16, var_len=VarLen.PADDED)))
    assert isinstance(batch["var"], tf.Tensor)
    for key, row in zip(batch["key"].numpy(), batch["var"].numpy()):
        want = all_types.samples[key.decode()]["var"]
        assert row[:len(want)].tolist() == want and not row[len(want):].any()


@pytest.mark.parametrize("decoding, dtype, shape", [
    pytest.param(ImageDecoding(), tf.uint8, (6, 5, 3), id="schema-shape-uint8"),
    pytest.param(ImageDecoding(pixel_type=PixelType.FLOAT32), tf.float32, (6, 5, 3), id="float32"),
    pytest.param(ImageDecoding(size=(12, 10), channels=1), tf.uint8, (12, 10, 1), id="resized-grey"),
])
def test_images_decode_to_pixels(all_types, decoding, dtype, shape):
    batch = next(iter(read_dataset(all_types.path, batch_size=4, image_decoding=decoding)))
    images = batch["img"]
    assert images.dtype == dtype and tuple(images.shape[1:]) == shape
    if decoding.size is None:
        for key, pixels in zip(batch["key"].numpy(), images.numpy()):
            png = all_types.samples[key.decode()]["img"]
            want = np.asarray(PILImage.open(io.BytesIO(png)))
            np.testing.assert_allclose(pixels, want / 255.0 if dtype == tf.float32 else want, rtol=1e-6)


def test_sequence_examples_round_trip_as_ragged_steps(sequences, expected_sequence, assert_example):
    examples = _examples(read_dataset(sequences.path, batch_size=6))
    assert len(examples) == len(sequences.samples)
    for example in examples:
        want = expected_sequence(sequences.samples[example["key"].decode()])
        example["tok"] = np.asarray(example["tok"], np.int64)
        example["xy"] = np.asarray(example["xy"], np.float32).reshape(-1, 2)
        assert_example(example, want)


def test_len_is_exact_cardinality(counted):
    total = num_examples(counted.path, split="train")
    assert len(read_dataset(counted.path, batch_size=32)) == -(-total // 32)
    assert len(read_dataset(counted.path, batch_size=32, drop_remainder=True)) == total // 32
    assert read_dataset(counted.path, batch_size=32, repeat=True).cardinality() == tf.data.INFINITE_CARDINALITY


@pytest.mark.parametrize("num_workers", [1, 2, 3, 5, 8, 13])
def test_workers_get_equal_disjoint_shares(counted, num_workers):
    shares = [_keys(read_dataset(counted.path, split="validation", batch_size=16, num_workers=num_workers,
                                 worker_index=i)) for i in range(num_workers)]
    total = num_examples(counted.path, split="validation")
    assert {len(share) for share in shares} == {total // num_workers}
    everything = [key for share in shares for key in share]
    assert len(set(everything)) == len(everything)
    assert all(len(read_dataset(counted.path, split="validation", batch_size=16, num_workers=num_workers,
                                worker_index=i)) == -(-(total // num_workers) // 16) for i in range(num_workers))


def test_more_workers_than_shards_still_equal(counted, counted_manifest):
    num_shards = len(counted_manifest.split("test").shards)
    workers = num_shards * 3
    shares = [_keys(read_dataset(counted.path, split="test", num_workers=workers, worker_index=i))
              for i in range(workers)]
    assert len({len(share) for share in shares}) == 1 and shares[0]


def test_input_context_matches_explicit_workers(counted):
    context = tf.distribute.InputContext(num_input_pipelines=3, input_pipeline_id=1, num_replicas_in_sync=3)
    assert (_keys(read_dataset(counted.path, input_context=context))
            == _keys(read_dataset(counted.path, num_workers=3, worker_index=1)))


def _keys_in_manifest_order(path: str, split: str) -> list[bytes]:
    """The split's keys shard by shard, record by record: the order slices are defined on."""
    manifest = load_manifest(path)
    files = [str(p) for p in shard_paths(path, manifest, split)]
    spec = {"key": tf.io.FixedLenFeature([], tf.string)}
    return [tf.io.parse_single_example(r, spec)["key"].numpy() for r in tf.data.TFRecordDataset(files)]


@pytest.mark.parametrize("split, bounds", [
    pytest.param("train[:10%]", lambda n: (0, round(n / 10)), id="first-10pct"),
    pytest.param("train[100:250]", lambda n: (100, 250), id="records"),
    pytest.param("train[-30:]", lambda n: (n - 30, n), id="last-30"),
    pytest.param("train[25%:75%]", lambda n: (round(n / 4), round(3 * n / 4)), id="middle-half"),
])
def test_slicing_selects_the_expected_records(counted, split, bounds):
    ordered = _keys_in_manifest_order(counted.path, "train")
    start, stop = bounds(len(ordered))
    assert sorted(_keys(read_dataset(counted.path, split=split, batch_size=64))) == sorted(ordered[start:stop])


def test_slices_add_up(counted):
    parts = [_keys(read_dataset(counted.path, split=s)) for s in ("train[:40%]", "train[40%:]+validation")]
    both = _keys(read_dataset(counted.path, split="train+validation"))
    assert sorted(parts[0] + parts[1]) == sorted(both) and not set(parts[0]) & set(parts[1])


def test_shuffle_is_seeded_reproducible_and_complete(counted):
    def keys(seed):
        return _keys(read_dataset(counted.path, batch_size=50, shuffle=True, seed=seed, shuffle_buffer=100))

    first, again, other = keys(1), keys(1), keys(2)
    plain = _keys(read_dataset(counted.path, batch_size=50))
    assert first == again and first != other and first != plain and sorted(first) == sorted(plain)


def test_label_key_gives_keras_pairs_and_cache_repeat(counted):
    dataset = read_dataset(counted.path, split="test", batch_size=10, label_key="i", cache=True, repeat=True)
    features, label = next(iter(dataset))
    assert "i" not in features and label.dtype == tf.int64 and label.shape == (10,)
    assert [int(k.decode()[1:]) for k in features["key"].numpy()] == label.numpy().tolist()


def test_resume_from_checkpoint_continues_at_the_same_example(counted, tmp_path):
    def make():
        return read_dataset(counted.path, batch_size=20, shuffle=True, seed=7, shuffle_buffer=64)

    full = [batch["key"].numpy().tolist() for batch in make()]
    iterator = iter(make())
    for _ in range(9):
        next(iterator)
    saved = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / "ckpt"))
    next(iterator)  # the saved state must not move with the live iterator

    restored = iter(make())
    tf.train.Checkpoint(iterator=restored).restore(saved).assert_consumed()
    rest = [batch["key"].numpy().tolist() for batch in restored]
    assert rest == full[9:]


@pytest.mark.parametrize("kwargs, error, message", [
    pytest.param({"split": "train[x:]"}, ReaderError, "boundary 'x'", id="bad-slice"),
    pytest.param({"split": "dev"}, UnknownSplitError, "split 'dev' is not in this dataset", id="unknown-split"),
    pytest.param({"batch_size": 0}, ReaderError, "batch_size must be a positive int, got 0", id="batch"),
    pytest.param({"num_workers": 2}, ReaderError, "pass num_workers and worker_index together", id="half-workers"),
    pytest.param({"num_workers": 2, "worker_index": 5}, ReaderError, r"worker_index must be in \[0, 2\), got 5",
                 id="worker-index"),
    pytest.param({"label_key": "y"}, ReaderError, "label_key 'y' is not a feature of this dataset", id="label"),
    pytest.param({"num_workers": 1, "worker_index": 0,
                  "input_context": tf.distribute.InputContext()}, ReaderError,
                 "pass either input_context or num_workers/worker_index", id="both-worker-forms"),
])
def test_bad_options_raise_typed_errors(counted, kwargs, error, message):
    with pytest.raises(error, match=message):
        read_dataset(counted.path, **kwargs)


def test_missing_dataset_is_a_typed_error(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="manifest.json is missing"):
        read_dataset(str(tmp_path / "nothing"))


def test_images_without_fixed_size_need_a_size():
    with pytest.raises(ReaderError, match="image feature 'photo' has no fixed shape in the schema: pass "
                                          r"ImageDecoding\(size=\(height, width\)\)"):
        ImageDecoding().output_shape("photo", Image(ImageFormat.JPEG))
    assert ImageDecoding(size=(4, 8)).output_shape("photo", Image(ImageFormat.JPEG)) == (4, 8, 3)


@pytest.mark.parametrize("batch_size", [1, 7, 32, 1000, 1500])
@pytest.mark.parametrize("drop_remainder", [False, True])
def test_batch_sizes_and_cardinality(counted, batch_size, drop_remainder):
    dataset = read_dataset(counted.path, split="train+validation", batch_size=batch_size,
                           drop_remainder=drop_remainder)
    sizes = [int(batch["key"].shape[0]) for batch in dataset]
    total = num_examples(counted.path, split="train+validation")
    assert len(dataset) == len(sizes)
    assert sizes[:-1] == [batch_size] * (len(sizes) - 1) if sizes else True
    assert sum(sizes) == (total // batch_size * batch_size if drop_remainder else total)
    if drop_remainder:
        assert dataset.element_spec["key"].shape[0] == batch_size


def test_parallel_reads_read_the_same_records(counted):
    sequential = _keys(read_dataset(counted.path, num_workers=2, worker_index=1))
    parallel = _keys(read_dataset(counted.path, num_workers=2, worker_index=1, num_parallel_reads=4))
    assert sorted(sequential) == sorted(parallel) and sequential != parallel


def _read_all(root: str) -> None:
    for _ in read_dataset(root, split="test"):
        pass


def test_tf_data_bad_crc_is_data_loss(damaged_copy):
    root, path, data = damaged_copy
    with open(path, "wb") as handle:
        handle.write(data[:20] + bytes([data[20] ^ 0xFF]) + data[21:])
    with pytest.raises(tf.errors.DataLossError, match="corrupted record at 12"):
        _read_all(root)


def _change_count(path: str, data: bytes, change: str) -> None:
    """Rewrites a shard with one record more (a copy of the first) or one fewer (the last dropped)."""
    if change == "extra":
        data += frame(data[12:12 + int.from_bytes(data[:8], "little")])
    else:
        offset, last = 0, 0
        while offset < len(data):
            last = offset
            offset += int.from_bytes(data[offset:offset + 8], "little") + FRAMING_BYTES
        data = data[:last]
    with open(path, "wb") as handle:
        handle.write(data)


@pytest.mark.parametrize("change", ["extra", "missing-last"])
def test_tf_data_count_different_from_manifest_fails(damaged_copy, change):
    root, path, data = damaged_copy
    _change_count(path, data, change)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=f"the shards at {re.escape(root)} hold a different number of records than the "
                             r"manifest lists \(\d+ planned for split test, worker 0\)"):
        _read_all(root)


@pytest.mark.parametrize("change, message", [
    pytest.param("extra", "expected to contain .* elements but contained at least", id="more-records"),
    pytest.param("missing-last", "expected to contain .* elements but contained only", id="fewer-records"),
])
def test_tf_data_count_checked_per_record_with_repeat(damaged_copy, change, message):
    root, path, data = damaged_copy
    _change_count(path, data, change)
    with pytest.raises(tf.errors.FailedPreconditionError, match=message):
        for _ in read_dataset(root, split="test", repeat=True).take(100):
            pass


def test_tf_data_count_check_can_be_turned_off(damaged_copy):
    root, path, data = damaged_copy
    _change_count(path, data, "extra")
    dataset = read_dataset(root, split="test", batch_size=1000, verify_count=False)
    assert sum(int(batch["key"].shape[0]) for batch in dataset) == num_examples(root, split="test") + 1


def test_tf_data_missing_shard_is_not_found(damaged_copy):
    root, path, _ = damaged_copy
    os.remove(path)
    with pytest.raises(tf.errors.NotFoundError, match=os.path.basename(path)):
        _read_all(root)


def test_padded_sequences_pad_steps_and_values(sequences):
    batch = next(iter(read_dataset(sequences.path, batch_size=40, var_len=VarLen.PADDED)))
    lengths = batch["length"].numpy()
    assert batch["tok"].shape == (40, lengths.max()) and batch["xy"].shape == (40, lengths.max(), 2)
    assert batch["tags"].shape[:2] == (40, lengths.max()) and batch["tags"].dtype == tf.string
    for key, length, tok in zip(batch["key"].numpy(), lengths, batch["tok"].numpy()):
        assert tok[:length].tolist() == sequences.samples[key.decode()]["tok"] and not tok[length:].any()


def test_each_format_says_how_tf_data_reads_its_files():
    # read_dataset reads files with the dataset a format names, and the format's own reader otherwise.
    assert shard_format(FileFormat.TFRECORD).tf_data_files(Compression.GZIP) == TFDataFiles("TFRecordDataset", "GZIP")
    assert shard_format(FileFormat.TFRECORD).tf_data_files(Compression.NONE) == TFDataFiles("TFRecordDataset", "")
    assert shard_format(FileFormat.ARRAY_RECORD).tf_data_files(Compression.NONE) is None
