"""The real tensorflow-datasets package loads what this project writes, and agrees with read_dataset."""

from __future__ import annotations

import json
import os

import matplotlib
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from beam_tfrecord import DType, Scalar, Schema, VarList, load_manifest
from beam_tfrecord.core.file_format import FileFormat
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.dataset import resolve_dataset_dir
from beam_tfrecord.describe import describe_manifest
from beam_tfrecord.interop.tfds import DATASET_INFO_FILENAME, FEATURES_FILENAME, unsupported_reason
from beam_tfrecord.reader.tf_data import read_dataset
from interop.conftest import SCHEMA, make_samples, write_dataset

matplotlib.use("Agg")
IMAGES = [name for name, feature in SCHEMA.features.items() if type(feature).__name__ == "Image"]


def _tfds_examples(directory: str, split: str) -> list[dict]:
    builder = tfds.builder_from_directory(directory)
    return list(tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)))


def _our_examples(directory: str, split: str) -> list[dict]:
    """read_dataset's examples, one at a time, images decoded as TFDS decodes them (any size and channels)."""
    out = []
    for batch in read_dataset(directory, split=split, batch_size=1):
        example = {}
        for name, value in batch.items():
            value = value[0]
            if name in IMAGES:
                value = tf.io.decode_image(value, expand_animations=False)
            example[name] = value.numpy()
        out.append(example)
    return out


@pytest.mark.parametrize("split", ["train[:10%]", "train", "test[3:17]", "train[50%:]+test"])
def test_tfds_yields_the_examples_read_dataset_yields(tfrecord_dataset, split):
    theirs, ours = _tfds_examples(tfrecord_dataset, split), _our_examples(tfrecord_dataset, split)
    assert len(theirs) == len(ours) > 0
    for mine, tfds_example in zip(ours, theirs):
        assert set(tfds_example) == set(SCHEMA.features)
        for name in SCHEMA.features:
            expected, got = mine[name], tfds_example[name]
            if name == "ids" or name == "tags":  # ragged in ours, a 1-d array in TFDS
                expected = np.asarray(expected)
            np.testing.assert_array_equal(got, expected, err_msg=name)
            if name not in ("tags", "caption", "blob"):
                assert got.dtype == np.asarray(expected).dtype, name


def test_split_sizes_features_and_labels_are_exact(tfrecord_dataset):
    builder = tfds.builder_from_directory(tfrecord_dataset)
    manifest = load_manifest(tfrecord_dataset)
    for split in manifest.splits:
        assert builder.info.splits[split.name].num_examples == split.num_records
        assert builder.info.splits[split.name].num_shards == len(split.shards)
    features = builder.info.features
    assert features["label"].names == ["cat", "dog", "emu"]
    assert features["mask"].shape == (6, 5, 1) and features["photo"].shape == (None, None, None)
    assert features["pixels"].shape == (2, 3, 2) and features["pixels"].dtype == np.uint8
    assert features["depth"].dtype == np.float64 and features["flags"].dtype == np.bool_
    assert features["ids"].shape == (None,) and features["box"].shape == (4,)
    assert builder.info.file_format.value == "tfrecord"
    assert builder.info.supervised_keys is None  # two images: no (image, label) pair to pick


def test_image_dataset_supports_dataframe_show_examples_and_supervised(tmp_path, sample_images):
    from pipelines.build_image_dataset import run as build_images

    out = str(tmp_path / "images")
    build_images(["--input", sample_images, "--output", out, "--splits", "train=0.9,test=0.1",
                  "--target_shard_bytes", "200000"])
    builder = tfds.builder_from_directory(out)
    train = builder.as_dataset(split="train", shuffle_files=False)
    frame = tfds.as_dataframe(train.take(4), builder.info)
    assert list(frame.columns) == ["image", "label"] and len(frame) == 4
    figure = tfds.show_examples(train, builder.info, rows=2, cols=2)
    assert len(figure.axes) == 4 and all(ax.get_title() in ("circle", "square", "stripes") or
                                         any(n in ax.get_xlabel() for n in ("circle", "square", "stripes"))
                                         for ax in figure.axes)
    image, label = next(iter(builder.as_dataset(split="test", as_supervised=True)))
    assert image.shape == (64, 64, 3) and image.dtype == tf.uint8 and 0 <= int(label) < 3
    assert builder.info.splits["train"].num_examples + builder.info.splits["test"].num_examples == 300


def test_latest_version_of_a_refresh_root_loads_with_tfds(tmp_path, sample_images):
    from pipelines.refresh_image_dataset import run as refresh

    root = str(tmp_path / "root")
    refresh(["--input", sample_images, "--dataset_root", root, "--target_shard_bytes", "400000"])
    latest = resolve_dataset_dir(root)  # the documented way: ROOT/versions/<LATEST>
    assert latest != root and os.path.exists(os.path.join(latest, DATASET_INFO_FILENAME))
    assert tfds.builder_from_directory(latest).info.splits["train"].num_examples == 300


def test_array_record_dataset_loads_with_tfds_and_its_data_source(array_record_dataset, tfrecord_dataset):
    builder = tfds.builder_from_directory(array_record_dataset)
    assert builder.info.file_format.value == "array_record"
    # TFDS 4.9.10's NumPy image decoding fails on a grayscale image when the feature's channels
    # are open (`_reshape_grayscale_image` repeats None times): the any-channel photo stays bytes.
    source = builder.as_data_source(split="train", decoders={"photo": tfds.decode.SkipDecoding()})
    sequential = _tfds_examples(tfrecord_dataset, "train")
    assert len(source) == len(sequential)
    for index in (0, len(source) // 2, len(source) - 1):  # random access by index, same record
        for name in ("pixels", "depth", "mask", "box", "label", "count"):
            np.testing.assert_array_equal(source[index][name], sequential[index][name], err_msg=name)
        assert source[index]["caption"] == sequential[index]["caption"]
        np.testing.assert_array_equal(tf.io.decode_image(source[index]["photo"], expand_animations=False),
                                      sequential[index]["photo"])


@pytest.mark.parametrize("case, schema, compression, reason", [
    ("sequence", Schema({"id": Scalar(DType.INT64)}, {"tokens": VarList(DType.INT64)}), "none",
     "records are tf.train.SequenceExample"),
    ("gzip", Schema({"id": Scalar(DType.INT64)}), "gzip", "TFDS reads uncompressed TFRecord shards only"),
])
def test_datasets_tfds_cannot_read_get_no_tfds_files_and_a_reason(tmp_path, case, schema, compression, reason):
    import apache_beam as beam

    from beam_tfrecord import WriteTFRecordDataset
    from beam_tfrecord.core.file_format import Compression

    out = str(tmp_path / case)
    values = {"id": 1, "tokens": [[1], [2, 3]]} if schema.sequence_features else {"id": 1}
    with beam.Pipeline() as pipeline:
        _ = (pipeline | beam.Create([Sample(f"k{i}", values) for i in range(5)])
             | WriteTFRecordDataset(out, schema=schema, compression=Compression.parse(compression)))
    assert reason in unsupported_reason(load_manifest(out))
    assert f"  no TFDS metadata (dataset_info.json) written: {reason}" in describe_manifest(load_manifest(out), out)
    assert not {DATASET_INFO_FILENAME, FEATURES_FILENAME} & set(os.listdir(out))
    with pytest.raises(Exception, match="dataset_info.json"):
        tfds.builder_from_directory(out)


def test_rebuilding_replaces_tfds_files_and_drops_stale_label_files(tmp_path):
    out = str(tmp_path / "ds")
    write_dataset(out, FileFormat.TFRECORD, make_samples(20))
    assert os.path.exists(os.path.join(out, "label.labels.txt"))
    assert "no TFDS metadata" not in describe_manifest(load_manifest(out), out)
    unlabelled = [Sample(s.key, {k: v for k, v in s.values.items() if k != "label"}) for s in make_samples(20)]
    write_dataset(out, FileFormat.TFRECORD, unlabelled,
                  schema=Schema({k: v for k, v in SCHEMA.features.items() if k != "label"}))
    assert not os.path.exists(os.path.join(out, "label.labels.txt"))
    with open(os.path.join(out, DATASET_INFO_FILENAME)) as handle:
        info = json.load(handle)
    assert sum(int(n) for s in info["splits"] for n in s["shardLengths"]) == 20
