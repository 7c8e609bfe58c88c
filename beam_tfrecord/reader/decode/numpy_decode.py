"""Serialized Example / SequenceExample -> dict of NumPy values, without TensorFlow.

Values match what tf.data returns for one example (``.numpy()``); this decoder is the reference for every
decoding error. See docs/reading.md, "Without TensorFlow's runtime".
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import numpy as np

from beam_tfrecord.core import proto
from beam_tfrecord.core.image_ops import PIL_MODES
from beam_tfrecord.core.schema import (
    ClassLabel,
    DType,
    Feature,
    FixedList,
    Image,
    ImageFormat,
    Scalar,
    Schema,
    Tensor,
    VarList,
)
from beam_tfrecord.errors import CorruptShardError
from beam_tfrecord.reader.decode.jpeg import fast_jpeg_decoder
from beam_tfrecord.reader.options import ImageDecoding, PixelType

_NUMPY = {DType.INT64: np.int64, DType.FLOAT32: np.float32}
Example = dict[str, Any]
# (tf.train.Feature or None when absent) -> value
_Decoder = Callable[[Any], Any]


def _values(dtype: DType, feature: Any) -> Any:
    if dtype is DType.INT64:
        return feature.int64_list.value
    if dtype is DType.FLOAT32:
        return feature.float_list.value
    return feature.bytes_list.value


def _array(dtype: DType, values: Any) -> np.ndarray:
    if dtype in _NUMPY:
        return np.array(values, dtype=_NUMPY[dtype])
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def _plain_decoder(name: str, feature: Scalar | FixedList | VarList | ClassLabel, *,
                   absent_lists: bool = False) -> _Decoder:
    dtype = DType.INT64 if isinstance(feature, ClassLabel) else feature.dtype
    absent_is_none = absent_lists and isinstance(feature, VarList)
    length = 1 if isinstance(feature, (Scalar, ClassLabel)) else getattr(feature, "length", None)
    default = getattr(feature, "default", None)

    def decode(stored: Any) -> Any:
        if stored is None and absent_is_none:
            return None
        values = _values(dtype, stored) if stored is not None else []
        if not values and default is not None:
            values = list(default) if isinstance(feature, FixedList) else [default]
            values = [v.encode("utf-8") if isinstance(v, str) else v for v in values]
        if length is not None and len(values) != length:
            raise ValueError(f"feature {name!r}: expected {length} value(s), found {len(values)}")
        if isinstance(feature, (Scalar, ClassLabel)):
            value = values[0]
            return np.array(value, dtype=_NUMPY[dtype]) if dtype in _NUMPY else bytes(value)
        return _array(dtype, values)

    return decode


def _tensor_decoder(name: str, feature: Tensor) -> _Decoder:
    dtype = np.dtype(feature.dtype.value).newbyteorder("<")

    def decode(stored: Any) -> np.ndarray:
        data = stored.bytes_list.value[0] if stored is not None and stored.bytes_list.value else b""
        if len(data) != feature.num_elements * dtype.itemsize:
            raise ValueError(f"feature {name!r}: expected {feature.num_elements * dtype.itemsize} bytes for "
                             f"{feature.dtype.value} {feature.shape}, found {len(data)}")
        return np.frombuffer(data, dtype=dtype).astype(dtype.newbyteorder("="), copy=True).reshape(feature.shape)

    return decode


_MAY_BE_JPEG = (ImageFormat.JPEG, ImageFormat.ANY)


def decode_image(name: str, feature: Image, decoding: ImageDecoding) -> Callable[[bytes], np.ndarray]:
    """The function that decodes (and resizes) one encoded image of a feature to its pixel array."""
    shape = decoding.output_shape(name, feature)
    fast = fast_jpeg_decoder(shape) if decoding.fast_jpeg and feature.format in _MAY_BE_JPEG else None

    def decode(data: bytes) -> np.ndarray:
        pixels = fast(data) if fast is not None else None
        if pixels is None:
            from PIL import Image as PILImage  # lazily: only when images are decoded

            with PILImage.open(io.BytesIO(data)) as opened:
                image = opened.convert(PIL_MODES[shape[2]])
                if image.size != (shape[1], shape[0]):
                    image = image.resize((shape[1], shape[0]), PILImage.Resampling.BILINEAR)
                pixels = np.asarray(image, dtype=np.uint8).reshape(shape)
        return pixels.astype(np.float32) / 255.0 if decoding.pixel_type is PixelType.FLOAT32 else pixels

    return decode


def _image_decoder(name: str, feature: Image, decoding: ImageDecoding | None) -> _Decoder:
    pixels = decode_image(name, feature, decoding) if decoding is not None else None

    def decode(stored: Any) -> Any:
        data = stored.bytes_list.value[0] if stored is not None and stored.bytes_list.value else b""
        return bytes(data) if pixels is None else pixels(data)

    return decode


def _step_decoder(name: str, feature: Feature) -> Callable[[Any], Any]:
    """Decodes a FeatureList (or None) into the per-step value of a sequence feature."""
    dtype: DType = feature.dtype  # type: ignore[union-attr,assignment]

    def decode(stored: Any) -> Any:
        steps = [_values(dtype, step) for step in stored.feature] if stored is not None else []
        if isinstance(feature, VarList):
            return [_array(dtype, values) for values in steps]
        width = 1 if isinstance(feature, Scalar) else feature.length  # type: ignore[union-attr]
        if any(len(values) != width for values in steps):
            raise ValueError(f"sequence feature {name!r}: expected {width} value(s) per step")
        flat = _array(dtype, [v for values in steps for v in values])
        return flat if isinstance(feature, Scalar) else flat.reshape(len(steps), width)

    return decode


def make_decoder(feature_name: str, feature: Feature, decoding: ImageDecoding | None, *,
                 absent_lists: bool = False) -> _Decoder:
    """The function that turns one stored tf.train.Feature (or None) into its NumPy value (None for an absent
    variable-length list with ``absent_lists``: told apart from an empty one, as statistics count it missing)."""
    if isinstance(feature, Tensor):
        return _tensor_decoder(feature_name, feature)
    if isinstance(feature, Image):
        return _image_decoder(feature_name, feature, decoding)
    return _plain_decoder(feature_name, feature, absent_lists=absent_lists)


class RecordDecoder:
    """Decodes serialized records of one schema. Build once, call ``decode`` per record."""

    def __init__(self, schema: Schema, *, image_decoding: ImageDecoding | None = None,
                 absent_lists: bool = False) -> None:
        self.schema = schema
        self._context = [(n, make_decoder(n, f, image_decoding, absent_lists=absent_lists))
                         for n, f in schema.features.items()]
        self._sequence = [(n, _step_decoder(n, f)) for n, f in schema.sequence_features.items()]

    def decode(self, record: bytes, *, shard: str, offset: int) -> Example:
        """The example in ``record``.

        Raises:
            CorruptShardError: when the record is not a valid proto of the schema, naming where it is.
        """
        return self.guard(self._decode, record, shard=shard, offset=offset)

    @staticmethod
    def guard(decode: Callable[[Any], Any], record: bytes | memoryview, *, shard: str, offset: int) -> Any:
        """``decode(record)``, its errors raised as a CorruptShardError naming the shard and offset."""
        try:
            return decode(record)
        except Exception as err:  # protobuf's DecodeError, our ValueError, Pillow's many error types
            raise CorruptShardError(shard, f"record does not match the schema: {type(err).__name__}: {err}",
                                    offset) from err

    def _decode(self, record: bytes) -> Example:
        if self._sequence:
            message = proto.SequenceExample.FromString(record)
            context, lists = message.context.feature, message.feature_lists.feature_list
            out = {n: decode(context.get(n, None)) for n, decode in self._context}
            out.update({n: decode(lists.get(n, None)) for n, decode in self._sequence})
            return out
        features = proto.Example.FromString(record).features.feature
        return {n: decode(features.get(n, None)) for n, decode in self._context}
