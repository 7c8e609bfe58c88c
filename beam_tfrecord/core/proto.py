"""``tf.train.Example`` and ``SequenceExample`` message classes without importing TensorFlow.

Field for field as TensorFlow's ``example.proto``, under a package of our own: the same bytes
(``tests/core/test_proto.py``), no clash with TensorFlow's classes.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

_PACKAGE = "beam_tfrecord.proto"
_F = descriptor_pb2.FieldDescriptorProto


def _field(message: descriptor_pb2.DescriptorProto, name: str, number: int, kind: int, *,
           repeated: bool = False, type_name: str | None = None, packed: bool = False,
           oneof_index: int | None = None) -> None:
    field = message.field.add(name=name, number=number, type=kind,
                              label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL)
    if type_name is not None:
        field.type_name = f".{_PACKAGE}.{type_name}"
    if packed:
        field.options.packed = True
    if oneof_index is not None:
        field.oneof_index = oneof_index


def _map_field(message: descriptor_pb2.DescriptorProto, name: str, entry: str, value_type: str) -> None:
    nested = message.nested_type.add(name=entry)
    nested.options.map_entry = True
    _field(nested, "key", 1, _F.TYPE_STRING)
    _field(nested, "value", 2, _F.TYPE_MESSAGE, type_name=value_type)
    _field(message, name, 1, _F.TYPE_MESSAGE, repeated=True, type_name=f"{message.name}.{entry}")


def _build_file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(name="beam_tfrecord/example.proto", package=_PACKAGE, syntax="proto3")
    _field(file.message_type.add(name="BytesList"), "value", 1, _F.TYPE_BYTES, repeated=True)
    _field(file.message_type.add(name="FloatList"), "value", 1, _F.TYPE_FLOAT, repeated=True, packed=True)
    _field(file.message_type.add(name="Int64List"), "value", 1, _F.TYPE_INT64, repeated=True, packed=True)
    feature = file.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    _field(feature, "bytes_list", 1, _F.TYPE_MESSAGE, type_name="BytesList", oneof_index=0)
    _field(feature, "float_list", 2, _F.TYPE_MESSAGE, type_name="FloatList", oneof_index=0)
    _field(feature, "int64_list", 3, _F.TYPE_MESSAGE, type_name="Int64List", oneof_index=0)
    _map_field(file.message_type.add(name="Features"), "feature", "FeatureEntry", "Feature")
    _field(file.message_type.add(name="FeatureList"), "feature", 1, _F.TYPE_MESSAGE, repeated=True,
           type_name="Feature")
    _map_field(file.message_type.add(name="FeatureLists"), "feature_list", "FeatureListEntry", "FeatureList")
    _field(file.message_type.add(name="Example"), "features", 1, _F.TYPE_MESSAGE, type_name="Features")
    sequence = file.message_type.add(name="SequenceExample")
    _field(sequence, "context", 1, _F.TYPE_MESSAGE, type_name="Features")
    _field(sequence, "feature_lists", 2, _F.TYPE_MESSAGE, type_name="FeatureLists")
    return file


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_build_file())


def _message(name: str) -> type[Message]:
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{_PACKAGE}.{name}"))


Feature = _message("Feature")
Features = _message("Features")
FeatureList = _message("FeatureList")
Example = _message("Example")
SequenceExample = _message("SequenceExample")
