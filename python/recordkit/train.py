"""``tf.train``'s messages without TensorFlow or protobuf: ``Example``, ``Feature`` and the rest.

They behave like the protobuf classes the TensorFlow tutorial uses::

    example = recordkit.train.Example(features=recordkit.train.Features(feature={
        "label": recordkit.train.Feature(int64_list=recordkit.train.Int64List(value=[1]))}))
    data = example.SerializeToString()        # protobuf's deterministic bytes
    recordkit.train.Example.FromString(data) == example
    print(example)                             # protobuf text format, keys ascending

A message's state lives in Rust: parsing checks every byte (as protobuf does)
and keeps them, decoding a Feature's values when first read; building and
serializing never make a Python object per value, and no message holds a
reference cycle, so the garbage collector has nothing to walk.

Sub-messages are shared, not copied: ``Features(feature={"a": f})`` holds the
Feature ``f`` itself (protobuf's constructors copy), so changing ``f`` later
changes the map. ``CopyFrom`` copies.
"""

from __future__ import annotations

from recordkit._native import (
    BytesList,
    Example,
    FeatureList,
    FeatureLists,
    Features,
    FloatList,
    Int64List,
    SequenceExample,
)
from recordkit._native import TfFeature as Feature

__all__ = [
    "BytesList",
    "FloatList",
    "Int64List",
    "Feature",
    "Features",
    "Example",
    "FeatureList",
    "FeatureLists",
    "SequenceExample",
]
