"""Sample -> serialized ``tf.train.Example`` / ``SequenceExample``, checked against the schema.

Pure functions: no Beam, no storage. Every rejection is a ``SampleError`` that names the
sample, the feature and what was expected. Encoding is deterministic (map keys are serialized
in sorted order), so the same sample always gives the same bytes.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from beam_tfrecord.core import proto
from beam_tfrecord.core.image_header import plain_jpeg_shape
from beam_tfrecord.core.image_ops import check_decodable
from beam_tfrecord.core.samples import Sample
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
from beam_tfrecord.errors import ImageDecodeError, SampleError

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_FORMAT_SIGNATURES: dict[ImageFormat, Callable[[bytes], bool]] = {
    ImageFormat.JPEG: lambda b: b[:3] == b"\xff\xd8\xff",
    ImageFormat.PNG: lambda b: b[:8] == b"\x89PNG\r\n\x1a\n",
    ImageFormat.GIF: lambda b: b[:6] in (b"GIF87a", b"GIF89a"),
    ImageFormat.BMP: lambda b: b[:2] == b"BM",
    ImageFormat.WEBP: lambda b: b[:4] == b"RIFF" and b[8:12] == b"WEBP",
}


def image_format_of(data: bytes) -> ImageFormat | None:
    """The encoding of ``data`` read from its signature (its first bytes), or None when it has none
    of the known ones: how a record of an ``ImageFormat.ANY`` feature tells its encoding."""
    return next((fmt for fmt, check in _FORMAT_SIGNATURES.items() if check(data)), None)


_SIGNATURES: dict[ImageFormat, Callable[[bytes], bool]] = {
    **_FORMAT_SIGNATURES,
    ImageFormat.ANY: lambda b: image_format_of(b) is not None,
}


_PIL_CHANNELS = {"1": 1, "L": 1, "P": 1, "LA": 2, "RGB": 3, "YCbCr": 3, "LAB": 3, "HSV": 3, "RGBA": 4, "CMYK": 4,
                 "I": 1, "F": 1, "I;16": 1}

# (sample key, feature name, value, destination tf.train.Feature) -> None, raising SampleError.
_Filler = Callable[[str, str, Any, Any], None]


def describe_value(value: Any) -> str:
    """A short description of a value for error messages: type and a clipped repr."""
    if isinstance(value, np.ndarray):
        return f"ndarray of dtype {value.dtype} and shape {value.shape}"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"{type(value).__name__} of {len(value)} bytes"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def _as_int(key: str, name: str, value: Any, what: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise SampleError(key, name, what, describe_value(value))
    number = int(value)
    if not _INT64_MIN <= number <= _INT64_MAX:
        raise SampleError(key, name, f"{what} within int64 range", describe_value(value))
    return number


def _as_float(key: str, name: str, value: Any, what: str, allow_non_finite: bool) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise SampleError(key, name, what, describe_value(value))
    number = float(value)
    if not allow_non_finite and not math.isfinite(number):
        raise SampleError(key, name, f"{what} that is finite (the schema forbids NaN and inf)", describe_value(value))
    if math.isfinite(number) and abs(number) > _FLOAT32_MAX:
        raise SampleError(key, name, f"{what} within float32 range", describe_value(value))
    return number


def _as_bytes(key: str, name: str, value: Any, what: str) -> bytes:
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value)
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise SampleError(key, name, what, describe_value(value))


def _as_utf8(key: str, name: str, value: Any, what: str) -> bytes:
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as err:
            raise SampleError(key, name, f"{what} encodable as UTF-8",
                              f"{describe_value(value)} ({err.reason})") from err
    if isinstance(value, (bytes, bytearray, memoryview, np.bytes_)):
        data = bytes(value)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise SampleError(key, name, f"{what} of valid UTF-8",
                              f"invalid UTF-8 byte {data[err.start:err.start + 1]!r} at position {err.start}") from err
        return data
    raise SampleError(key, name, what, describe_value(value))


def _values_list(key: str, name: str, value: Any, what: str) -> list[Any]:
    """Turns a list-like value into a Python list; strings and bytes are not lists."""
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise SampleError(key, name, what, describe_value(value))
        return value.tolist() if value.dtype.kind in "biuf" else list(value)
    if isinstance(value, (list, tuple)):
        return list(value)
    raise SampleError(key, name, what, describe_value(value))


def _fill_values(dtype: DType, allow_non_finite: bool, key: str, name: str, values: list[Any], dest: Any,
                 what: str) -> None:
    if dtype is DType.INT64:
        dest.int64_list.value.extend([_as_int(key, name, v, what) for v in values])
    elif dtype is DType.FLOAT32:
        dest.float_list.value.extend([_as_float(key, name, v, what, allow_non_finite) for v in values])
    elif dtype is DType.BYTES:
        dest.bytes_list.value.extend([_as_bytes(key, name, v, what) for v in values])
    else:
        dest.bytes_list.value.extend([_as_utf8(key, name, v, what) for v in values])


def _scalar_filler(feature: Scalar) -> _Filler:
    what = f"{feature.dtype.value} scalar"

    def fill(key: str, name: str, value: Any, dest: Any) -> None:
        if isinstance(value, np.ndarray) and value.shape == ():
            value = value.item()
        _fill_values(feature.dtype, feature.allow_non_finite, key, name, [value], dest, what)

    return fill


def _list_filler(feature: FixedList | VarList) -> _Filler:
    length = feature.length if isinstance(feature, FixedList) else None
    what = (f"list of {length} {feature.dtype.value} values" if length is not None
            else f"list of {feature.dtype.value} values")

    def fill(key: str, name: str, value: Any, dest: Any) -> None:
        values = _values_list(key, name, value, what)
        if length is not None and len(values) != length:
            raise SampleError(key, name, what, f"{len(values)} values")
        _fill_values(feature.dtype, feature.allow_non_finite, key, name, values, dest, f"{what}, each")

    return fill


def _tensor_filler(feature: Tensor) -> _Filler:
    target = np.dtype(feature.dtype.value).newbyteorder("<")
    native = np.dtype(feature.dtype.value)  # NumPy's shared instance: an identity check is the fast path
    what = f"{feature.dtype.value} array of shape {feature.shape}"

    shape = feature.shape
    check_finite = feature.dtype.is_float and not feature.allow_non_finite

    def fill(key: str, name: str, value: Any, dest: Any) -> None:
        if (value.__class__ is np.ndarray and (value.dtype is native or value.dtype == target)
                and value.shape == shape and not check_finite):
            dest.bytes_list.value.append(value.tobytes())  # the common case: already the right array
            return
        if isinstance(value, np.ndarray):
            array = value
            if array.dtype != target and not np.can_cast(array.dtype, target, casting="safe"):
                raise SampleError(key, name, what, describe_value(value))
        elif isinstance(value, (list, tuple, int, float)):
            try:
                array = np.asarray(value, dtype=target)
                exact = np.array_equal(array, np.asarray(value), equal_nan=feature.dtype.is_float)
            except (TypeError, ValueError, OverflowError) as err:
                raise SampleError(key, name, what, describe_value(value)) from err
            if not exact:
                raise SampleError(key, name, f"{what} (values representable as {feature.dtype.value})",
                                  describe_value(value))
        else:
            raise SampleError(key, name, what, describe_value(value))
        if array.shape != feature.shape:
            raise SampleError(key, name, what, f"shape {array.shape}")
        if feature.dtype.is_float and not feature.allow_non_finite and not np.isfinite(array).all():
            raise SampleError(key, name, f"{what} with finite values (the schema forbids NaN and inf)",
                              "non-finite values")
        dest.bytes_list.value.append(np.ascontiguousarray(array, dtype=target).tobytes())

    return fill


def image_size(data: bytes) -> tuple[int, int, int]:
    """(height, width, channels) from an encoded image's header, without decoding its pixels: Pillow's
    answer, read without Pillow for a plain JPEG (``image_header``)."""
    plain = plain_jpeg_shape(data)
    if plain is not None:
        return plain
    from PIL import Image as PILImage  # imported lazily: only schemas with image shapes need it

    with PILImage.open(io.BytesIO(data)) as image:
        width, height = image.size
        return height, width, _PIL_CHANNELS.get(image.mode, len(image.getbands()))


def _image_filler(feature: Image) -> _Filler:
    if feature.format is ImageFormat.ANY:
        what, no_signature = "image bytes (jpeg, png, gif, bmp or webp)", "no image signature"
    else:
        what, no_signature = f"{feature.format.value} image bytes", f"not a {feature.format.value} signature"

    def fill(key: str, name: str, value: Any, dest: Any) -> None:
        data = _as_bytes(key, name, value, what)
        if not data:
            raise SampleError(key, name, what, "an empty (0-byte) value")
        if not _SIGNATURES[feature.format](data):
            raise SampleError(key, name, what, f"{len(data)} bytes starting {data[:8]!r}, {no_signature}")
        if feature.shape is not None:
            try:
                shape = image_size(data)
            except Exception as err:  # Pillow raises many types for bad headers
                raise SampleError(key, name, f"a readable {feature.format.value} header",
                                  f"{type(err).__name__}: {err}") from err
            if shape != feature.shape:
                raise SampleError(key, name, f"{feature.format.value} image of shape {feature.shape}",
                                  f"shape {shape}")
        if feature.check_decode:
            try:
                check_decodable(data)
            except ImageDecodeError as err:
                raise SampleError(key, name, f"a complete, decodable {feature.format.value} image",
                                  str(err).removeprefix("cannot decode ")) from err
        dest.bytes_list.value.append(data)

    return fill


def _class_label_filler(feature: ClassLabel) -> _Filler:
    index = {name: i for i, name in enumerate(feature.names)}
    what = f"a class id in [0, {feature.num_classes}) or one of the class names {list(feature.names)[:10]}"

    num_classes = feature.num_classes

    def fill(key: str, name: str, value: Any, dest: Any) -> None:
        if value.__class__ is int and 0 <= value < num_classes:  # the common case: a valid class id
            dest.int64_list.value.append(value)
            return
        if isinstance(value, str):
            if value not in index:
                raise SampleError(key, name, what, f"unknown class name {value!r}")
            label = index[value]
        else:
            label = _as_int(key, name, value, what)
            if not 0 <= label < feature.num_classes:
                raise SampleError(key, name, what, f"class id {label}")
        dest.int64_list.value.append(label)

    return fill


def make_filler(feature: Feature) -> _Filler:
    """The function that validates a value of this feature and writes it into a tf.train.Feature."""
    if isinstance(feature, Scalar):
        return _scalar_filler(feature)
    if isinstance(feature, (FixedList, VarList)):
        return _list_filler(feature)
    if isinstance(feature, Tensor):
        return _tensor_filler(feature)
    if isinstance(feature, Image):
        return _image_filler(feature)
    return _class_label_filler(feature)


def _default(feature: Feature) -> Any:
    return getattr(feature, "default", None)


class SampleEncoder:
    """Encodes samples of one schema. Build once (per DoFn ``setup``), call ``encode`` per sample."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self._context = [(n, f, make_filler(f)) for n, f in schema.features.items()]
        self._sequence = [(n, f, make_filler(f)) for n, f in schema.sequence_features.items()]
        self._known = set(schema.features) | set(schema.sequence_features)

    def encode(self, sample: Sample) -> bytes:
        """Returns the serialized record for one sample; raises SampleError on any mismatch."""
        key, values = sample
        if values.__class__ is not dict and not isinstance(values, Mapping):
            raise SampleError(key, None, "a mapping of feature names to values", describe_value(values))
        if not self._known.issuperset(values):
            unknown = [name for name in values if name not in self._known]
            raise SampleError(key, unknown[0], f"only schema features {sorted(self._known)}",
                              "a feature the schema does not declare")
        if self._sequence:
            message = proto.SequenceExample()
            self._fill_context(key, values, message.context.feature)
            lists = message.feature_lists.feature_list
            for name, _feature, fill in self._sequence:
                steps = values.get(name)
                if steps is None:
                    continue
                if isinstance(steps, (str, bytes)) or not hasattr(steps, "__len__"):
                    raise SampleError(key, name, "a list with one value per step", describe_value(steps))
                feature_list = lists[name].feature
                for step in steps:
                    fill(key, name, step, feature_list.add())
        else:
            message = proto.Example()
            self._fill_context(key, values, message.features.feature)
        return message.SerializeToString(deterministic=True)

    def _fill_context(self, key: str, values: Mapping[str, Any], dest: Any) -> None:
        for name, feature, fill in self._context:
            value = values.get(name)
            if value is None:
                value = _default(feature)
                if value is None:
                    if isinstance(feature, VarList):
                        continue  # absent means empty
                    raise SampleError(key, name, "a value (the feature is required and has no default)",
                                      "nothing")
            fill(key, name, value, dest[name])
