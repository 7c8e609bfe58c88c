"""Every schema type: encode with our encoder, parse with TensorFlow, compare.

The parse specs here are written by hand on purpose: they state the storage layout each
feature type promises (an independent oracle for the encoder, not the reader's own spec).
"""

import numpy as np
import pytest
import tensorflow as tf

from beam_tfrecord.core.sample_encoder import SampleEncoder
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.core.schema import (
    ClassLabel,
    DType,
    FixedList,
    Image,
    ImageFormat,
    Scalar,
    Schema,
    Tensor,
    TensorDType,
    VarList,
)

PNG_1x1 = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de0000000c4944415408d7"
                        "63f8cfc000000301010018dd8db00000000049454e44ae426082")


@pytest.mark.parametrize("feature, value, spec, expected", [
    pytest.param(Scalar(DType.INT64), -(2**63), tf.io.FixedLenFeature([], tf.int64), -(2**63), id="int64"),
    pytest.param(Scalar(DType.INT64), np.int32(7), tf.io.FixedLenFeature([], tf.int64), 7, id="numpy-int"),
    pytest.param(Scalar(DType.FLOAT32), 0.25, tf.io.FixedLenFeature([], tf.float32), 0.25, id="float"),
    pytest.param(Scalar(DType.FLOAT32, allow_non_finite=True), float("inf"), tf.io.FixedLenFeature([], tf.float32),
                 float("inf"), id="float-inf-allowed"),
    pytest.param(Scalar(DType.BYTES), b"\x00\xff", tf.io.FixedLenFeature([], tf.string), b"\x00\xff", id="bytes"),
    pytest.param(Scalar(DType.STRING), "héllo ✓", tf.io.FixedLenFeature([], tf.string), "héllo ✓".encode(),
                 id="utf8-string"),
    pytest.param(FixedList(DType.INT64, 3), [1, 2, 3], tf.io.FixedLenFeature([3], tf.int64), [1, 2, 3],
                 id="fixed-int-list"),
    pytest.param(FixedList(DType.FLOAT32, 2), np.array([1.5, 2.5]), tf.io.FixedLenFeature([2], tf.float32),
                 [1.5, 2.5], id="fixed-float-array"),
    pytest.param(FixedList(DType.STRING, 2), ["a", "b"], tf.io.FixedLenFeature([2], tf.string), [b"a", b"b"],
                 id="fixed-string-list"),
    pytest.param(VarList(DType.INT64), [5, 6, 7, 8], tf.io.VarLenFeature(tf.int64), [5, 6, 7, 8], id="var-ints"),
    pytest.param(VarList(DType.FLOAT32), [], tf.io.VarLenFeature(tf.float32), [], id="var-empty"),
    pytest.param(VarList(DType.BYTES), [b"x", b"yy"], tf.io.VarLenFeature(tf.string), [b"x", b"yy"], id="var-bytes"),
    pytest.param(Image(ImageFormat.PNG, shape=(1, 1, 3)), PNG_1x1, tf.io.FixedLenFeature([], tf.string), PNG_1x1,
                 id="image-png"),
    pytest.param(ClassLabel(("cat", "dog")), "dog", tf.io.FixedLenFeature([], tf.int64), 1, id="class-by-name"),
    pytest.param(ClassLabel(("cat", "dog")), 0, tf.io.FixedLenFeature([], tf.int64), 0, id="class-by-id"),
])
def test_value_round_trip(feature, value, spec, expected):
    record = SampleEncoder(Schema({"x": feature})).encode(Sample("s", {"x": value}))
    parsed = tf.io.parse_single_example(record, {"x": spec})["x"]
    if isinstance(parsed, tf.SparseTensor):
        parsed = parsed.values
    np.testing.assert_array_equal(parsed.numpy(), np.array(expected, dtype=parsed.dtype.as_numpy_dtype))


@pytest.mark.parametrize("dtype, shape", [
    (TensorDType.UINT8, (4, 5, 3)), (TensorDType.INT16, (2, 2)), (TensorDType.INT32, (7,)),
    (TensorDType.INT64, (3, 1)), (TensorDType.FLOAT16, (2, 3)), (TensorDType.FLOAT32, (2, 2, 2, 2)),
    (TensorDType.FLOAT64, (5,)), (TensorDType.BOOL, (3, 3)),
])
def test_tensor_round_trip_keeps_dtype_and_shape(dtype, shape):
    rng = np.random.default_rng(0)
    array = (rng.random(shape) * 100).astype(dtype.value)
    record = SampleEncoder(Schema({"t": Tensor(dtype, shape)})).encode(Sample("s", {"t": array}))
    raw = tf.io.parse_single_example(record, {"t": tf.io.FixedLenFeature([], tf.string)})["t"]
    decoded = tf.reshape(tf.io.decode_raw(raw, tf.as_dtype(dtype.value)), shape).numpy()
    np.testing.assert_array_equal(decoded, array)


def test_defaults_fill_absent_optional_features():
    schema = Schema({"a": Scalar(DType.INT64, default=-1), "b": FixedList(DType.FLOAT32, 2, default=(0.0, 1.0)),
                     "c": VarList(DType.INT64), "d": Scalar(DType.INT64)})
    record = SampleEncoder(schema).encode(Sample("s", {"d": 4, "a": None}))
    parsed = tf.io.parse_single_example(record, {
        "a": tf.io.FixedLenFeature([], tf.int64), "b": tf.io.FixedLenFeature([2], tf.float32),
        "c": tf.io.VarLenFeature(tf.int64), "d": tf.io.FixedLenFeature([], tf.int64)})
    assert parsed["a"].numpy() == -1 and parsed["b"].numpy().tolist() == [0.0, 1.0]
    assert parsed["c"].values.numpy().tolist() == [] and parsed["d"].numpy() == 4


def test_sequence_example_round_trip():
    schema = Schema({"id": Scalar(DType.INT64)},
                    {"boxes": FixedList(DType.FLOAT32, 4), "tokens": VarList(DType.INT64)})
    boxes = [[0.0, 0.0, 1.0, 1.0], [0.25, 0.25, 0.5, 0.5], [0.0, 0.5, 0.5, 1.0]]
    tokens = [[1, 2], [], [3]]
    record = SampleEncoder(schema).encode(Sample("s", {"id": 9, "boxes": boxes, "tokens": tokens}))
    context, sequences = tf.io.parse_single_sequence_example(
        record, {"id": tf.io.FixedLenFeature([], tf.int64)},
        {"boxes": tf.io.FixedLenSequenceFeature([4], tf.float32), "tokens": tf.io.RaggedFeature(tf.int64)})
    assert context["id"].numpy() == 9
    np.testing.assert_array_equal(sequences["boxes"].numpy(), np.array(boxes, np.float32))
    assert sequences["tokens"].to_list() == tokens


def test_encoding_is_deterministic_whatever_the_dict_order():
    schema = Schema({name: Scalar(DType.INT64) for name in "abcdef"})
    encoder = SampleEncoder(schema)
    forward = encoder.encode(Sample("s", {n: i for i, n in enumerate("abcdef")}))
    backward = encoder.encode(Sample("s", {n: i for i, n in reversed(list(enumerate("abcdef")))}))
    assert forward == backward
