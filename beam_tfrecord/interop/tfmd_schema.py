"""``schema.pbtxt``: the dataset's schema as TensorFlow Metadata's ``Schema`` proto, in text format.

It states what the writer already enforces, feature by feature. The mapping: docs/manifest.md, "Files for
other tools"; reading it with TFX and TFDV: docs/reading.md.
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
