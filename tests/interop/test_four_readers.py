"""Four independent readers read one dataset and agree, record for record.

1. tf.data ``TFRecordDataset`` + ``tf.io.parse_example`` with a spec made from the manifest's schema;
2. TFDS ``builder_from_directory`` (its own parser, from dataset_info.json and features.json);
3. Beam's ``ReadFromTFRecord`` over the shard files, records parsed with protobuf;
4. the ``tfrecord`` package's PyTorch dataset, which uses neither TensorFlow nor this project. It
   registers its own copy of TensorFlow's ``tensorflow.Example`` protos in protobuf's default pool,
   which clashes with TensorFlow's, so it runs in a fresh interpreter without TensorFlow.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import apache_beam as beam
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
from apache_beam.testing.util import assert_that, equal_to

from beam_tfrecord import load_manifest
from beam_tfrecord.core.proto import Example
from beam_tfrecord.core.schema import ClassLabel, DType, FixedList, Scalar, VarList

# (caption, count, label, score, box, ids, photo bytes, pixel bytes): one comparable row per record.
Row = tuple


def _row(caption, count, label, score, box, ids, photo, pixels) -> Row:
    return (bytes(caption), int(count), int(label), float(np.float32(score)),
            tuple(float(np.float32(v)) for v in box), tuple(int(v) for v in ids), bytes(photo), bytes(pixels))


def _paths(directory: str) -> list[str]:
    return [os.path.join(directory, s.filename) for s in load_manifest(directory).split("train").shards]


def _tf_parse_rows(directory: str) -> list[Row]:
    spec = {}
    for name, feature in load_manifest(directory).schema.features.items():
        dtype = tf.int64 if isinstance(feature, ClassLabel) or getattr(feature, "dtype", None) is DType.INT64 else (
            tf.float32 if getattr(feature, "dtype", None) is DType.FLOAT32 else tf.string)
        if isinstance(feature, VarList):
            spec[name] = tf.io.VarLenFeature(dtype)
        elif isinstance(feature, FixedList):
            spec[name] = tf.io.FixedLenFeature([feature.length], dtype)
        elif isinstance(feature, (Scalar, ClassLabel)):
            spec[name] = tf.io.FixedLenFeature([], dtype)
        else:  # Image, Tensor: the bytes
            spec[name] = tf.io.FixedLenFeature([], tf.string)
    rows = []
    for batch in tf.data.TFRecordDataset(_paths(directory)).batch(16).map(lambda r: tf.io.parse_example(r, spec)):
        ids = tf.sparse.to_dense(batch["ids"]).numpy()  # padded with 0: cut to each row's count
        counts = tf.math.bincount(tf.cast(batch["ids"].indices[:, 0], tf.int32), minlength=len(ids)).numpy()
        for i in range(len(ids)):
            rows.append(_row(batch["caption"][i].numpy(), batch["count"][i], batch["label"][i], batch["score"][i],
                             batch["box"][i].numpy(), ids[i][:counts[i]], batch["photo"][i].numpy(),
                             batch["pixels"][i].numpy()))
    return rows


def _tfds_rows(directory: str) -> list[Row]:
    builder = tfds.builder_from_directory(directory)
    skip = {"photo": tfds.decode.SkipDecoding(), "pixels": tfds.decode.SkipDecoding()}
    dataset = builder.as_dataset(split="train", shuffle_files=False, decoders=skip)
    return [_row(e["caption"], e["count"], e["label"], e["score"], e["box"], e["ids"], e["photo"], e["pixels"])
            for e in tfds.as_numpy(dataset)]


def _proto_row(record: bytes) -> Row:
    feature = Example.FromString(record).features.feature
    return _row(feature["caption"].bytes_list.value[0], feature["count"].int64_list.value[0],
                feature["label"].int64_list.value[0], feature["score"].float_list.value[0],
                feature["box"].float_list.value, feature["ids"].int64_list.value,
                feature["photo"].bytes_list.value[0], feature["pixels"].bytes_list.value[0])


_TORCH_SCRIPT = """
import pickle, sys
import torch.utils.data
from tfrecord.torch.dataset import TFRecordDataset
description = {"caption": "byte", "count": "int", "label": "int", "score": "float", "box": "float", "ids": "int",
               "photo": "byte", "pixels": "byte"}
chained = torch.utils.data.ChainDataset([TFRecordDataset(p, None, description) for p in sys.argv[2:]])
rows = [(e["caption"], e["count"][0], e["label"][0], e["score"][0], e["box"], e["ids"], e["photo"], e["pixels"])
        for e in chained]
assert "tensorflow" not in sys.modules
with open(sys.argv[1], "wb") as out:
    pickle.dump(rows, out)
"""


def _torch_rows(directory: str, tmp_path) -> list[Row]:
    out = tmp_path / "rows.pickle"
    done = subprocess.run([sys.executable, "-c", _TORCH_SCRIPT, str(out), *_paths(directory)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [_row(*values) for values in pickle.loads(out.read_bytes())]


def test_four_independent_readers_agree(tfrecord_dataset, tmp_path):
    expected = _tf_parse_rows(tfrecord_dataset)
    assert len(expected) == load_manifest(tfrecord_dataset).split("train").num_records
    assert len({row[0] for row in expected}) == len(expected)  # every caption is distinct: rows identify records
    assert _tfds_rows(tfrecord_dataset) == expected
    assert _torch_rows(tfrecord_dataset, tmp_path) == expected
    with beam.Pipeline() as pipeline:  # Beam reads files in parallel: agreement as a multiset
        rows = (pipeline
                | beam.Create(_paths(tfrecord_dataset))
                | beam.io.ReadAllFromTFRecord(coder=beam.coders.BytesCoder())
                | beam.Map(_proto_row))
        assert_that(rows, equal_to(expected))
