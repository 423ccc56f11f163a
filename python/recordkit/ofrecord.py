"""OneFlow's ``OFRecord`` messages (``oneflow/core/record/record.proto``) without OneFlow.

An ``OFRecord`` is a map from names to ``Feature``, like TensorFlow's
``Features`` (one level less nesting than an ``Example``). A Feature holds one
of ``bytes_list``, ``float_list``, ``double_list``, ``int32_list`` or
``int64_list``; on the wire, field 3 is ``double_list`` here but ``int64_list``
in TensorFlow, so the same bytes decode differently. An OFRecord also takes
TensorFlow's Features (``rk.int64_feature(...)``), as OneFlow's guide does:
they are converted.
"""

from __future__ import annotations

from recordkit._native import DoubleList, Int32List, OFRecord
from recordkit._native import OfFeature as Feature
from recordkit.train import BytesList, FloatList, Int64List

# BytesList, FloatList and Int64List are the same messages as TensorFlow's
# (one repeated field 1); only the Feature around them differs.

__all__ = ["BytesList", "FloatList", "DoubleList", "Int32List", "Int64List", "Feature", "OFRecord"]
