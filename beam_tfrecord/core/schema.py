"""The schema (feature spec): the one contract between the writer and the reader.

The manifest stores it, so no reader needs a hand-written ``feature_description``. See docs/schema.md.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import math
from collections.abc import Mapping
from typing import Any, ClassVar

from beam_tfrecord.errors import SchemaError


class DType(enum.Enum):
    """Element type of a plain (scalar or list) feature, as stored in a tf.train.Feature."""

    INT64 = "int64"  # int64_list
    FLOAT32 = "float32"  # float_list
    BYTES = "bytes"  # bytes_list, any bytes
    STRING = "string"  # bytes_list, must be valid UTF-8


class TensorDType(enum.Enum):
    """Element type of an N-d tensor, stored as raw little-endian bytes (decoded with tf.io.decode_raw)."""

    BOOL = "bool"
    UINT8 = "uint8"
    INT8 = "int8"
    UINT16 = "uint16"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    FLOAT16 = "float16"
    FLOAT32 = "float32"
    FLOAT64 = "float64"

    @property
    def is_float(self) -> bool:
        return self in (TensorDType.FLOAT16, TensorDType.FLOAT32, TensorDType.FLOAT64)


class ImageFormat(enum.Enum):
    """Encoded image formats the writer recognises by their signature bytes.

    ANY accepts every one of them (a folder mixing JPEG and PNG): each record's encoding is the
    one its signature bytes name, and readers decode it with ``tf.io.decode_image`` or Pillow.
    """

    JPEG = "jpeg"
    PNG = "png"
    GIF = "gif"
    BMP = "bmp"
    WEBP = "webp"
    ANY = "any"


# File name extensions (lower case) of the image formats, for folders and manifest columns.
IMAGE_EXTENSIONS: dict[str, ImageFormat] = {".jpg": ImageFormat.JPEG, ".jpeg": ImageFormat.JPEG,
                                            ".png": ImageFormat.PNG, ".gif": ImageFormat.GIF,
                                            ".bmp": ImageFormat.BMP, ".webp": ImageFormat.WEBP}


def _check_default(name: str, dtype: DType, default: Any, length: int | None) -> None:
    """Checks that a default value fits the dtype (and length for fixed lists)."""
    if default is None:
        return
    values = list(default) if length is not None else [default]
    if length is not None and len(values) != length:
        raise SchemaError(f"{name}: default must have {length} values, got {len(values)}")
    for value in values:
        ok = {
            DType.INT64: isinstance(value, int) and not isinstance(value, bool),
            DType.FLOAT32: isinstance(value, (int, float)) and not isinstance(value, bool),
            DType.BYTES: isinstance(value, bytes),
            DType.STRING: isinstance(value, str),
        }[dtype]
        if not ok:
            raise SchemaError(f"{name}: default {value!r} does not match dtype {dtype.value}")


@dataclasses.dataclass(frozen=True)
class Scalar:
    """One value per sample.

    Attributes:
        dtype: element type.
        default: value written when the sample lacks the feature; None makes the feature required.
        allow_non_finite: for FLOAT32 only, accept NaN and +/-inf (rejected by default).
    """

    KIND: ClassVar[str] = "scalar"
    dtype: DType
    default: Any = None
    allow_non_finite: bool = False

    def __post_init__(self) -> None:
        _check_default("Scalar", self.dtype, self.default, None)


@dataclasses.dataclass(frozen=True)
class FixedList:
    """Exactly ``length`` values per sample (a 1-d list of known length).

    Attributes:
        dtype: element type.
        length: number of values, at least 1.
        default: list written when the sample lacks the feature; None makes the feature required.
        allow_non_finite: for FLOAT32 only, accept NaN and +/-inf.
    """

    KIND: ClassVar[str] = "fixed_list"
    dtype: DType
    length: int
    default: tuple[Any, ...] | None = None
    allow_non_finite: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.length, int) or self.length < 1:
            raise SchemaError(f"FixedList: length must be a positive int, got {self.length!r}")
        if self.default is not None:
            object.__setattr__(self, "default", tuple(self.default))
        _check_default("FixedList", self.dtype, self.default, self.length)


@dataclasses.dataclass(frozen=True)
class VarList:
    """Any number of values per sample (read back as a ragged tensor). Absent means empty.

    Attributes:
        dtype: element type.
        allow_non_finite: for FLOAT32 only, accept NaN and +/-inf.
    """

    KIND: ClassVar[str] = "var_list"
    dtype: DType
    allow_non_finite: bool = False


@dataclasses.dataclass(frozen=True)
class Tensor:
    """An N-d numeric array of fixed shape, stored as its raw little-endian bytes.

    Raw bytes keep uint8 images and float arrays compact (an int64_list would cost 8 bytes per
    uint8); the reader restores dtype and shape from the schema.

    Attributes:
        dtype: element type.
        shape: the array shape, every dimension a positive int (``()`` for a 0-d array).
        allow_non_finite: for float dtypes, accept NaN and +/-inf.
    """

    KIND: ClassVar[str] = "tensor"
    dtype: TensorDType
    shape: tuple[int, ...]
    allow_non_finite: bool = False

    def __post_init__(self) -> None:
        shape = tuple(self.shape)
        if any(not isinstance(dim, int) or isinstance(dim, bool) or dim < 1 for dim in shape):
            raise SchemaError(f"Tensor: every dimension must be a positive int, got shape {shape!r}")
        object.__setattr__(self, "shape", shape)

    @property
    def num_elements(self) -> int:
        return math.prod(self.shape)


@dataclasses.dataclass(frozen=True)
class Image:
    """An encoded image (JPEG, PNG...), stored as its bytes.

    By default the writer checks the signature (and, with a shape, the header) only, which is
    cheap; ``check_decode`` decodes every image in full to catch truncated or corrupt files.

    Attributes:
        format: the encoding every sample must have.
        shape: (height, width, channels) that every image must decode to, or None for any size.
        check_decode: decode each image completely when validating (slower; catches truncation).
    """

    KIND: ClassVar[str] = "image"
    format: ImageFormat
    shape: tuple[int, int, int] | None = None
    check_decode: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.check_decode, bool):
            raise SchemaError(f"Image: check_decode must be a bool, got {self.check_decode!r}")
        if self.shape is not None:
            shape = tuple(self.shape)
            if len(shape) != 3 or any(not isinstance(d, int) or d < 1 for d in shape):
                raise SchemaError(f"Image: shape must be (height, width, channels) of positive ints, got {shape!r}")
            object.__setattr__(self, "shape", shape)


@dataclasses.dataclass(frozen=True)
class ClassLabel:
    """An integer class id with its names; samples may give the id or the name.

    Attributes:
        names: class names; the id of a name is its position.
    """

    KIND: ClassVar[str] = "class_label"
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        names = tuple(self.names)
        if not names or any(not isinstance(n, str) or not n for n in names):
            raise SchemaError(f"ClassLabel: names must be non-empty strings, got {names!r}")
        if len(set(names)) != len(names):
            raise SchemaError(f"ClassLabel: names must be unique, got {names!r}")
        object.__setattr__(self, "names", names)

    @property
    def num_classes(self) -> int:
        return len(self.names)


Feature = Scalar | FixedList | VarList | Tensor | Image | ClassLabel
FEATURE_TYPES: tuple[type, ...] = (Scalar, FixedList, VarList, Tensor, Image, ClassLabel)
# Types allowed per step of a SequenceExample feature list.
SEQUENCE_FEATURE_TYPES: tuple[type, ...] = (Scalar, FixedList, VarList)
_BY_KIND: dict[str, Any] = {cls.KIND: cls for cls in (Scalar, FixedList, VarList, Tensor, Image, ClassLabel)}
_ENUM_FIELDS: dict[str, type[enum.Enum]] = {"dtype": DType, "format": ImageFormat}
# Fields added after the first manifest version: left out of the JSON while at their default, so
# schemas that do not use them serialize exactly as before.
_OMIT_AT_DEFAULT: frozenset[str] = frozenset({"check_decode"})


def feature_to_json(feature: Feature) -> dict[str, Any]:
    """Returns the JSON form of one feature: ``{"kind": ..., field: value}``."""
    out: dict[str, Any] = {"kind": feature.KIND}
    for field in dataclasses.fields(feature):
        value = getattr(feature, field.name)
        if field.name in _OMIT_AT_DEFAULT and value == field.default:
            continue
        if isinstance(value, enum.Enum):
            value = value.value
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, bytes):
            value = {"base64": base64.b64encode(value).decode("ascii")}
        out[field.name] = value
    return out


def _decode_default(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"base64"}:
        return base64.b64decode(value["base64"])
    if isinstance(value, list):
        return tuple(_decode_default(v) for v in value)
    return value


def feature_from_json(name: str, data: Mapping[str, Any]) -> Feature:
    """Parses the JSON form of one feature; raises SchemaError naming the feature."""
    if not isinstance(data, Mapping) or "kind" not in data:
        raise SchemaError(f"feature {name!r}: expected an object with a 'kind', got {data!r}")
    cls = _BY_KIND.get(data["kind"])
    if cls is None:
        raise SchemaError(f"feature {name!r}: unknown kind {data['kind']!r}; known: {sorted(_BY_KIND)}")
    kwargs: dict[str, Any] = {}
    names = {f.name for f in dataclasses.fields(cls)}
    try:
        for key, value in data.items():
            if key == "kind":
                continue
            if key not in names:
                raise SchemaError(f"feature {name!r}: unknown field {key!r} for kind {cls.KIND!r}")
            if key == "dtype" and cls is Tensor:
                value = TensorDType(value)
            elif key in _ENUM_FIELDS:
                value = _ENUM_FIELDS[key](value)
            elif key in ("shape", "names") and value is not None:
                value = tuple(value)
            elif key == "default":
                value = _decode_default(value)
            kwargs[key] = value
        return cls(**kwargs)
    except SchemaError:
        raise
    except (TypeError, ValueError) as err:
        raise SchemaError(f"feature {name!r}: {err}") from err


@dataclasses.dataclass(frozen=True)
class Schema:
    """Feature names to feature types.

    Attributes:
        features: the features of a ``tf.train.Example`` (or the context of a ``SequenceExample``).
        sequence_features: per-step features; when non-empty, records are ``tf.train.SequenceExample``
            and each sample gives a list (one entry per step) for each of these.
    """

    features: Mapping[str, Feature]
    sequence_features: Mapping[str, Feature] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        for group, allowed in (("features", FEATURE_TYPES), ("sequence_features", SEQUENCE_FEATURE_TYPES)):
            mapping = getattr(self, group)
            for name, feature in mapping.items():
                if not isinstance(name, str) or not name:
                    raise SchemaError(f"{group}: feature names must be non-empty strings, got {name!r}")
                if not isinstance(feature, allowed):
                    raise SchemaError(
                        f"{group}[{name!r}]: expected one of {[t.__name__ for t in allowed]}, got {feature!r}"
                    )
            # Sorted and read-only: the same schema always serializes the same way.
            object.__setattr__(self, group, dict(sorted(mapping.items())))
        overlap = set(self.features) & set(self.sequence_features)
        if overlap:
            raise SchemaError(f"names used both as context and sequence features: {sorted(overlap)}")
        if not self.features and not self.sequence_features:
            raise SchemaError("a schema needs at least one feature")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"features": {n: feature_to_json(f) for n, f in self.features.items()}}
        if self.sequence_features:
            out["sequence_features"] = {n: feature_to_json(f) for n, f in self.sequence_features.items()}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Schema":
        if not isinstance(data, Mapping) or "features" not in data:
            raise SchemaError(f"expected a schema object with 'features', got {type(data).__name__}")
        unknown = set(data) - {"features", "sequence_features"}
        if unknown:
            raise SchemaError(f"unknown schema fields {sorted(unknown)}")
        return cls(
            features={n: feature_from_json(n, f) for n, f in data["features"].items()},
            sequence_features={n: feature_from_json(n, f) for n, f in data.get("sequence_features", {}).items()},
        )
