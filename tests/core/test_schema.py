"""Schema: construction checks and the JSON round trip."""

import pytest

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
from beam_tfrecord.errors import SchemaError

EVERY_KIND = Schema(
    features={
        "id": Scalar(DType.INT64),
        "score": Scalar(DType.FLOAT32, default=0.5, allow_non_finite=True),
        "blob": Scalar(DType.BYTES, default=b"\x00\xff"),
        "caption": Scalar(DType.STRING, default="none"),
        "box": FixedList(DType.FLOAT32, 4),
        "tokens": VarList(DType.INT64),
        "pixels": Tensor(TensorDType.UINT8, (2, 3, 3)),
        "photo": Image(ImageFormat.PNG, shape=(8, 8, 3)),
        "label": ClassLabel(("cat", "dog")),
    },
    sequence_features={"frames": FixedList(DType.FLOAT32, 2)},
)


def test_json_round_trip_keeps_every_field():
    assert Schema.from_json(EVERY_KIND.to_json()) == EVERY_KIND


def test_features_are_sorted_so_json_is_stable():
    schema = Schema({"b": Scalar(DType.INT64), "a": Scalar(DType.INT64)})
    assert list(schema.to_json()["features"]) == ["a", "b"]


@pytest.mark.parametrize("make, message", [
    pytest.param(lambda: FixedList(DType.INT64, 0), "length must be a positive int", id="zero-length"),
    pytest.param(lambda: Tensor(TensorDType.FLOAT32, (2, 0)), "every dimension must be a positive int",
                 id="zero-dim"),
    pytest.param(lambda: Image(ImageFormat.JPEG, shape=(8, 8)), "(height, width, channels)", id="2d-image-shape"),
    pytest.param(lambda: ClassLabel(("a", "a")), "names must be unique", id="duplicate-class"),
    pytest.param(lambda: Scalar(DType.INT64, default=1.5), "default 1.5 does not match dtype int64",
                 id="bad-default"),
    pytest.param(lambda: FixedList(DType.INT64, 2, default=(1,)), "default must have 2 values", id="short-default"),
    pytest.param(lambda: Schema({}), "at least one feature", id="empty"),
    pytest.param(lambda: Schema({"x": Image(ImageFormat.PNG)}, {"x": Scalar(DType.INT64)}),
                 "both as context and sequence", id="name-clash"),
    pytest.param(lambda: Schema({"x": Scalar(DType.INT64)}, {"y": Image(ImageFormat.PNG)}),
                 "sequence_features['y']", id="image-per-step"),
])
def test_bad_schemas_raise_schema_error(make, message):
    with pytest.raises(SchemaError, match=None) as info:
        make()
    assert message in str(info.value)


@pytest.mark.parametrize("data, message", [
    pytest.param({"features": {"x": {"kind": "matrix"}}}, "unknown kind 'matrix'", id="unknown-kind"),
    pytest.param({"features": {"x": {"kind": "scalar", "dtype": "int64", "colour": 1}}}, "unknown field 'colour'",
                 id="unknown-field"),
    pytest.param({"features": {"x": {"kind": "scalar", "dtype": "int128"}}}, "feature 'x'", id="bad-dtype"),
    pytest.param({"feature": {}}, "expected a schema object with 'features'", id="missing-features"),
])
def test_bad_schema_json_names_the_feature(data, message):
    with pytest.raises(SchemaError) as info:
        Schema.from_json(data)
    assert message in str(info.value)
