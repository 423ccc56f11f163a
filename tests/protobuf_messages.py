"""TensorFlow's Example messages as protobuf classes, built from their
descriptor (example.proto and feature.proto, proto3), so that tests compare
recordkit's classes with protobuf wherever protobuf is installed, TensorFlow
or not. Held in a pool of their own: TensorFlow's, where it is loaded, stays
untouched."""

from __future__ import annotations

from types import SimpleNamespace

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto


def _message(file: descriptor_pb2.FileDescriptorProto, name: str) -> descriptor_pb2.DescriptorProto:
    message = file.message_type.add()
    message.name = name
    return message


def _field(message: descriptor_pb2.DescriptorProto, name: str, number: int, kind: int,
           type_name: str = "", repeated: bool = False, oneof: int | None = None) -> None:
    field = message.field.add()
    field.name, field.number, field.type = name, number, kind
    field.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
    if type_name:
        field.type_name = type_name
    if oneof is not None:
        field.oneof_index = oneof


def _map(message: descriptor_pb2.DescriptorProto, name: str, entry: str, value_type: str) -> None:
    nested = message.nested_type.add()
    nested.name = entry
    nested.options.map_entry = True
    _field(nested, "key", 1, _F.TYPE_STRING)
    _field(nested, "value", 2, _F.TYPE_MESSAGE, value_type)
    _field(message, name, 1, _F.TYPE_MESSAGE, f"{message.name}.{entry}", repeated=True)


def classes() -> SimpleNamespace:
    """``Example``, ``SequenceExample``, ``Features``, ``Feature`` and the lists, as protobuf classes."""
    file = descriptor_pb2.FileDescriptorProto(name="recordkit_tests/example.proto", package="tensorflow",
                                              syntax="proto3")
    _field(_message(file, "BytesList"), "value", 1, _F.TYPE_BYTES, repeated=True)
    _field(_message(file, "FloatList"), "value", 1, _F.TYPE_FLOAT, repeated=True)
    _field(_message(file, "Int64List"), "value", 1, _F.TYPE_INT64, repeated=True)
    feature = _message(file, "Feature")
    feature.oneof_decl.add().name = "kind"
    for number, kind in enumerate(("BytesList", "FloatList", "Int64List"), start=1):
        name = {"BytesList": "bytes_list", "FloatList": "float_list", "Int64List": "int64_list"}[kind]
        _field(feature, name, number, _F.TYPE_MESSAGE, f".tensorflow.{kind}", oneof=0)
    _map(_message(file, "Features"), "feature", "FeatureEntry", ".tensorflow.Feature")
    _field(_message(file, "FeatureList"), "feature", 1, _F.TYPE_MESSAGE, ".tensorflow.Feature", repeated=True)
    _map(_message(file, "FeatureLists"), "feature_list", "FeatureListEntry", ".tensorflow.FeatureList")
    _field(_message(file, "Example"), "features", 1, _F.TYPE_MESSAGE, ".tensorflow.Features")
    sequence = _message(file, "SequenceExample")
    _field(sequence, "context", 1, _F.TYPE_MESSAGE, ".tensorflow.Features")
    _field(sequence, "feature_lists", 2, _F.TYPE_MESSAGE, ".tensorflow.FeatureLists")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    names = ("Example", "SequenceExample", "Features", "Feature", "FeatureList", "FeatureLists",
             "BytesList", "FloatList", "Int64List")
    return SimpleNamespace(**{
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"tensorflow.{name}")) for name in names
    })
