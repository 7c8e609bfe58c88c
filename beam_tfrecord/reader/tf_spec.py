"""tf.data parse specs and batch decoding built from the schema: nobody writes a feature_description.

``make_batch_parser`` returns one function that turns a batch of serialized records (a 1-d string
tensor) into a dict of batched tensors: one ``parse_example`` / ``parse_sequence_example`` call per
batch, then raw-bytes tensors restored to dtype and N-d shape and images decoded if asked.
Variable-length features stay ragged; ``pad_var_len`` pads them.
"""

from __future__ import annotations

import os
from collections.abc import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow's first import: keep logs quiet

import tensorflow as tf

from beam_tfrecord.core.record_schema import RAW_FEATURE
from beam_tfrecord.core.schema import ClassLabel, DType, Feature, FixedList, Image, Scalar, Schema, Tensor, VarList
from beam_tfrecord.reader.options import ImageDecoding, PixelType

TF_DTYPES = {DType.INT64: tf.int64, DType.FLOAT32: tf.float32, DType.BYTES: tf.string, DType.STRING: tf.string}
ParsedBatch = dict[str, "tf.Tensor | tf.RaggedTensor"]


def parse_feature(feature: Feature) -> tf.io.FixedLenFeature | tf.io.RaggedFeature:
    """The parse spec of one (context) feature."""
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


def feature_description(schema: Schema) -> dict[str, tf.io.FixedLenFeature | tf.io.RaggedFeature]:
    """The ``tf.io.parse_example`` spec of a schema's (context) features."""
    return {name: parse_feature(feature) for name, feature in schema.features.items()}


def sequence_description(schema: Schema) -> dict[str, tf.io.RaggedFeature]:
    """The per-step parse spec of a SequenceExample schema (each parses to [batch, (steps), (values)])."""
    return {name: tf.io.RaggedFeature(TF_DTYPES[feature.dtype], row_splits_dtype=tf.int64)  # type: ignore[union-attr,index]
            for name, feature in schema.sequence_features.items()}


def _restore_steps(feature: Feature, steps: tf.RaggedTensor) -> tf.RaggedTensor:
    """[batch, (steps), (values)] -> [batch, (steps)] for scalars, [batch, (steps), length] for fixed lists."""
    if isinstance(feature, Scalar):
        return tf.RaggedTensor.from_row_splits(steps.values.values, steps.row_splits, validate=False)
    if isinstance(feature, FixedList):
        values = tf.reshape(steps.values.values, [-1, feature.length])
        return tf.RaggedTensor.from_row_splits(values, steps.row_splits, validate=False)
    return steps


def _decode_image(shape: tuple[int, int, int], decoding: ImageDecoding, encoded: tf.Tensor) -> tf.Tensor:
    """Decodes (and resizes) a batch of encoded images to [batch, height, width, channels]."""
    resize = decoding.size is not None

    def decode_one(data: tf.Tensor) -> tf.Tensor:
        image = tf.io.decode_image(data, channels=shape[2], expand_animations=False)
        if resize:
            image = tf.cast(tf.clip_by_value(tf.round(tf.image.resize(image, shape[:2])), 0, 255), tf.uint8)
        return tf.ensure_shape(image, shape)

    images = tf.map_fn(decode_one, encoded, fn_output_signature=tf.TensorSpec(shape, tf.uint8))
    if decoding.pixel_type is PixelType.FLOAT32:
        images = tf.cast(images, tf.float32) / 255.0
    return images


def pad_var_len(batch: ParsedBatch) -> dict[str, tf.Tensor]:
    """Pads every ragged feature of a batch to the longest in the batch (zeros, empty strings)."""
    return {name: value.to_tensor() if isinstance(value, tf.RaggedTensor) else value for name, value in batch.items()}


def make_batch_parser(schema: Schema, *, image_decoding: ImageDecoding | None = None, verbatim: bool = False
                      ) -> Callable[[tf.Tensor], ParsedBatch]:
    """The function that parses a batch of serialized records into a dict of batched tensors.

    Variable-length features come back ragged (see ``pad_var_len``).

    Args:
        schema: the dataset's schema (from its manifest).
        image_decoding: decode ``Image`` features to pixels; None keeps the encoded bytes.
        verbatim: the records are raw payloads as written (``holds_verbatim_payloads``): each batch is
            returned whole as the schema's one bytes feature.

    Raises:
        ReaderError: when images must be decoded but their size is neither fixed nor given.
    """
    if verbatim:
        return lambda records: {RAW_FEATURE: records}
    context_spec = feature_description(schema)
    sequence_spec = sequence_description(schema)
    image_shapes = ({name: image_decoding.output_shape(name, f) for name, f in schema.features.items()
                     if isinstance(f, Image)} if image_decoding is not None else {})

    def parse(records: tf.Tensor) -> ParsedBatch:
        if sequence_spec:
            context, steps, _ = tf.io.parse_sequence_example(records, context_features=context_spec or None,
                                                             sequence_features=sequence_spec)
            out = dict(context)
            out.update({name: _restore_steps(schema.sequence_features[name], value) for name, value in steps.items()})
        else:
            out = dict(tf.io.parse_example(records, context_spec))
        for name, feature in schema.features.items():
            if isinstance(feature, Tensor):
                flat = tf.io.decode_raw(out[name], tf.as_dtype(feature.dtype.value), little_endian=True)
                out[name] = tf.reshape(flat, [-1, *feature.shape])
            elif name in image_shapes and image_decoding is not None:
                out[name] = _decode_image(image_shapes[name], image_decoding, out[name])
        return out

    return parse
