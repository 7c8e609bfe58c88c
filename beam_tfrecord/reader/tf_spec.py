"""tf.data parse specs built from the schema: nobody writes a feature_description by hand."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow's first import: keep logs quiet

import tensorflow as tf  # noqa: E402

from beam_tfrecord.core.schema import (ClassLabel, DType, Feature, FixedList, Image, Scalar, Schema,  # noqa: E402
                                       Tensor, VarList)

TF_DTYPES = {DType.INT64: tf.int64, DType.FLOAT32: tf.float32, DType.BYTES: tf.string, DType.STRING: tf.string}


def parse_feature(feature: Feature) -> tf.io.FixedLenFeature | tf.io.RaggedFeature:
    """The parse spec of one context feature."""
    if isinstance(feature, Scalar):
        return tf.io.FixedLenFeature([], TF_DTYPES[feature.dtype], default_value=feature.default)
    if isinstance(feature, FixedList):
        default = list(feature.default) if feature.default is not None else None
        return tf.io.FixedLenFeature([feature.length], TF_DTYPES[feature.dtype], default_value=default)
    if isinstance(feature, VarList):
        return tf.io.RaggedFeature(TF_DTYPES[feature.dtype], row_splits_dtype=tf.int64)
    if isinstance(feature, (Tensor, Image)):
        return tf.io.FixedLenFeature([], tf.string)
    if isinstance(feature, ClassLabel):
        return tf.io.FixedLenFeature([], tf.int64)
    raise TypeError(f"no parse spec for {feature!r}")


def parse_sequence_feature(feature: Feature) -> tf.io.FixedLenSequenceFeature | tf.io.RaggedFeature:
    """The parse spec of one per-step feature of a SequenceExample."""
    if isinstance(feature, Scalar):
        return tf.io.RaggedFeature(TF_DTYPES[feature.dtype], row_splits_dtype=tf.int64)
    if isinstance(feature, FixedList):
        return tf.io.RaggedFeature(TF_DTYPES[feature.dtype], row_splits_dtype=tf.int64)
    if isinstance(feature, VarList):
        return tf.io.RaggedFeature(TF_DTYPES[feature.dtype], row_splits_dtype=tf.int64)
    raise TypeError(f"no sequence parse spec for {feature!r}")


def feature_description(schema: Schema) -> dict[str, tf.io.FixedLenFeature | tf.io.RaggedFeature]:
    """The ``tf.io.parse_example`` spec of a schema's (context) features."""
    return {name: parse_feature(feature) for name, feature in schema.features.items()}


def restore_tensors(schema: Schema, parsed: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """Decodes raw-bytes tensors back to their dtype and N-d shape (batch dimension first)."""
    out = dict(parsed)
    for name, feature in schema.features.items():
        if isinstance(feature, Tensor):
            flat = tf.io.decode_raw(parsed[name], tf.as_dtype(feature.dtype.value), little_endian=True)
            out[name] = tf.reshape(flat, [-1, *feature.shape])
    return out
