"""``schema.pbtxt``: the dataset's schema as TensorFlow Metadata's ``Schema`` proto, in text format.

TFX's ExampleValidator and TensorFlow Data Validation (``tfdv.load_schema_text``,
``tfdv.validate_statistics``) check a dataset's statistics against this proto; TFX's
``ImportSchemaGen`` imports the file as it is. It says what the writer already enforces, feature
by feature, as it is stored in each ``tf.train.Example``:

=============================  =======================================================================
this schema                    TFMD ``Feature``
=============================  =======================================================================
``Scalar``                     INT / FLOAT / BYTES, ``shape {dim {size: 1}}``, present in every record
``FixedList``                  the same, ``shape {dim {size: length}}``
``VarList``                    INT / FLOAT / BYTES, no shape, ``presence {min_fraction: 0}`` (absent = empty)
``Tensor``                     BYTES, one value (the raw little-endian array)
``Image``                      BYTES, one value, ``image_domain {}``
``ClassLabel``                 INT, one value, ``int_domain {min: 0 max: classes - 1 is_categorical: true}``
=============================  =======================================================================

Float features that refuse NaN and infinities (the default) get ``float_domain {disallow_nan: true
disallow_inf: true}``. Records that are ``tf.train.SequenceExample`` get no file
(``unsupported_reason``): TFMD describes them only through TFX's internal ``##SEQUENCE##`` struct.
"""

from __future__ import annotations

from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.core.schema import ClassLabel, DType, Feature, FixedList, Image, Scalar, Tensor, VarList

SCHEMA_FILENAME = "schema.pbtxt"


def unsupported_reason(manifest: Manifest) -> str | None:
    """Why no ``schema.pbtxt`` describes this dataset, or None when one does."""
    if manifest.schema.sequence_features:
        return "records are tf.train.SequenceExample; a TFMD schema describes tf.train.Example features"
    return None


_KINDS = {DType.INT64: schema_pb2.INT, DType.FLOAT32: schema_pb2.FLOAT, DType.BYTES: schema_pb2.BYTES,
          DType.STRING: schema_pb2.BYTES}


def _fill(proto_feature: schema_pb2.Feature, feature: Feature) -> None:
    values = 1
    if isinstance(feature, (Scalar, FixedList, VarList)):
        proto_feature.type = _KINDS[feature.dtype]
        if feature.dtype is DType.FLOAT32 and not feature.allow_non_finite:
            proto_feature.float_domain.disallow_nan = True
            proto_feature.float_domain.disallow_inf = True
        if isinstance(feature, FixedList):
            values = feature.length
    elif isinstance(feature, ClassLabel):
        proto_feature.type = schema_pb2.INT
        proto_feature.int_domain.min = 0
        proto_feature.int_domain.max = feature.num_classes - 1
        proto_feature.int_domain.is_categorical = True
    elif isinstance(feature, (Tensor, Image)):
        proto_feature.type = schema_pb2.BYTES
        if isinstance(feature, Image):
            proto_feature.image_domain.SetInParent()
    else:
        raise TypeError(f"no TFMD feature for {feature!r}")
    if isinstance(feature, VarList):
        proto_feature.presence.min_fraction = 0.0
        return
    proto_feature.presence.min_fraction = 1.0
    proto_feature.shape.dim.add().size = values


def schema_proto(manifest: Manifest) -> schema_pb2.Schema:
    """The dataset's ``tensorflow_metadata.proto.v0.schema_pb2.Schema``, features in schema order."""
    schema = schema_pb2.Schema()
    for name, feature in manifest.schema.features.items():
        proto_feature = schema.feature.add()
        proto_feature.name = name
        _fill(proto_feature, feature)
    return schema


def schema_text(manifest: Manifest) -> bytes:
    """``schema.pbtxt``: the proto in text format (protobuf's ``text_format``), with a header comment."""
    header = (f"# TensorFlow Metadata Schema of dataset {manifest.dataset_name!r}, written by beam-tfrecord "
              f"{manifest.tool_version}.\n# Load it with tfdv.load_schema_text; manifest.json describes the dataset.\n")
    return (header + text_format.MessageToString(schema_proto(manifest))).encode("utf-8")
