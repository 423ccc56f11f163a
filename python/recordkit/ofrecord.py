"""OneFlow's ``OFRecord`` messages (``oneflow/core/record/record.proto``) without OneFlow.

An ``OFRecord`` is a map from names to :class:`Feature`, like TensorFlow's
``Features`` (one level less nesting than an ``Example``). A Feature holds one
of ``bytes_list``, ``float_list``, ``double_list``, ``int32_list`` or
``int64_list``; on the wire, field 3 is ``double_list`` here but ``int64_list``
in TensorFlow, so the same bytes decode differently.
"""

from __future__ import annotations


from recordkit._messages import (
    FeatureMap,
    ListMessage,
    OneofFeature,
    _add_kind_properties,
    coerce_float64,
    coerce_int32,
    text_float64,
)
from recordkit.train import BytesList, FloatList, Int64List

# BytesList, FloatList and Int64List are the same messages as TensorFlow's
# (one repeated field 1); only the Feature around them differs.

__all__ = ["BytesList", "FloatList", "DoubleList", "Int32List", "Int64List", "Feature", "OFRecord"]


class DoubleList(ListMessage):
    """``DoubleList``: float64 values."""

    __slots__ = ()
    _KIND = "double_list"
    _COERCE = staticmethod(coerce_float64)
    _DTYPE = "float64"
    _FORMAT = staticmethod(text_float64)


class Int32List(ListMessage):
    """``Int32List``: int32 values."""

    __slots__ = ()
    _KIND = "int32_list"
    _COERCE = staticmethod(coerce_int32)
    _DTYPE = "int32"
    _FORMAT = staticmethod(str)


@_add_kind_properties
class Feature(OneofFeature):
    """OneFlow's ``Feature``: one of five list kinds."""

    __slots__ = ()
    _KINDS = {
        "bytes_list": BytesList,
        "float_list": FloatList,
        "double_list": DoubleList,
        "int32_list": Int32List,
        "int64_list": Int64List,
    }
    _SCHEMA = "oneflow"
    bytes_list: BytesList
    float_list: FloatList
    double_list: DoubleList
    int32_list: Int32List
    int64_list: Int64List


class OFRecord(FeatureMap):
    """``OFRecord``: ``feature`` maps names to :class:`Feature`."""

    __slots__ = ()
    _FEATURE = Feature
    _SCHEMA = "oneflow"
