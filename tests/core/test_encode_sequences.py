"""SequenceExample encoding (per-step feature lists) and deterministic bytes, checked with TensorFlow."""

import numpy as np
import pytest
import tensorflow as tf

from beam_tfrecord.core.sample_encoder import SampleEncoder
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.core.schema import DType, FixedList, Scalar, Schema, Tensor, TensorDType, VarList
from beam_tfrecord.errors import SampleError

SCHEMA = Schema({"image_id": Scalar(DType.INT64), "caption": Scalar(DType.STRING, default="")},
                sequence_features={"boxes": FixedList(DType.FLOAT32, 4), "tokens": Scalar(DType.INT64),
                                   "frames": VarList(DType.FLOAT32)})


def _parse(records: list[bytes]) -> dict:
    context, steps, lengths = tf.io.parse_sequence_example(
        tf.constant(records),
        context_features={"image_id": tf.io.FixedLenFeature([], tf.int64),
                          "caption": tf.io.FixedLenFeature([], tf.string)},
        sequence_features={"boxes": tf.io.FixedLenSequenceFeature([4], tf.float32, allow_missing=True),
                           "tokens": tf.io.RaggedFeature(tf.int64), "frames": tf.io.RaggedFeature(tf.float32)})
    return {**{k: v.numpy() for k, v in context.items()},
            **{k: v.to_list() if isinstance(v, tf.RaggedTensor) else v.numpy() for k, v in steps.items()},
            "lengths": {k: v.numpy().tolist() for k, v in lengths.items()}}


def test_sequence_example_round_trip():
    encoder = SampleEncoder(SCHEMA)
    boxes = np.array([[0, 0, 1, 1], [0.25, 0.5, 0.75, 1]], np.float32)
    records = [
        encoder.encode(Sample("a", {"image_id": 1, "boxes": boxes, "tokens": [3, 4, 5],
                                    "frames": [[0.5], [0.25, 0.125]]})),
        encoder.encode(Sample("b", {"image_id": 2, "caption": "two", "boxes": [], "tokens": [7]})),
    ]
    parsed = _parse(records)
    assert parsed["image_id"].tolist() == [1, 2]
    assert parsed["caption"].tolist() == [b"", b"two"]
    np.testing.assert_array_equal(parsed["boxes"][0], boxes)
    assert parsed["lengths"]["boxes"] == [2, 0]
    assert parsed["tokens"] == [[[3], [4], [5]], [[7]]]
    assert parsed["frames"] == [[[0.5], [0.25, 0.125]], []]


@pytest.mark.parametrize("values, message", [
    pytest.param({"image_id": 1, "boxes": [[0, 0, 1]]},
                 "feature 'boxes': expected list of 4 float32 values, got 3 values in sample 's'", id="short-box"),
    pytest.param({"image_id": 1, "tokens": 5},
                 "feature 'tokens': expected a list with one value per step, got int 5 in sample 's'", id="not-steps"),
    pytest.param({"image_id": 1, "boxes": [[0, 0, float("nan"), 1]]},
                 "feature 'boxes': expected list of 4 float32 values, each that is finite (the schema forbids NaN "
                 "and inf), got float nan in sample 's'", id="nan-in-step"),
])
def test_sequence_rejections_name_the_feature(values, message):
    with pytest.raises(SampleError) as info:
        SampleEncoder(SCHEMA).encode(Sample("s", values))
    assert str(info.value) == message


def test_encoding_is_deterministic_whatever_the_key_order():
    schema = Schema({"b": Scalar(DType.FLOAT32), "a": VarList(DType.INT64), "t": Tensor(TensorDType.FLOAT64, (2,))})
    encoder = SampleEncoder(schema)
    one = encoder.encode(Sample("k", {"a": [1, 2], "b": 0.1, "t": np.array([1.5, -0.0])}))
    two = encoder.encode(Sample("k", {"t": [1.5, -0.0], "b": np.float32(0.1), "a": np.array([1, 2])}))
    assert one == two
    assert SampleEncoder(schema).encode(Sample("k", {"b": 0.1, "a": [1, 2], "t": (1.5, -0.0)})) == one
