"""TensorFlow's "TFRecord and tf.Example" tutorial and OneFlow's OFRecord guide, step by step,
with recordkit and without TensorFlow or OneFlow.

Run it from anywhere: ``python docs/tutorial.py``. It writes its files into the
current directory (``test.tfrecord``, ``images.tfrecords``, ``example.ofrecords``,
``ofrecord_dataset/``). Each section names the tutorial step it replaces.
"""

# --8<-- [start:setup]
import os
import random
import struct
import sys

import numpy as np

import recordkit as rk

HERE = os.path.dirname(os.path.abspath(__file__))
# --8<-- [end:setup]

# --8<-- [start:helpers]
# --- tf.train.Example: the helpers ---------------------------------------------------------
# The tutorial's _bytes_feature / _float_feature / _int64_feature, ready-made:
print(rk.bytes_feature(b"test_string"))
print(rk.bytes_feature("test_bytes".encode("utf-8")))
print(rk.float_feature(np.exp(1)))
print(rk.int64_feature(True))  # protobuf 7 refuses bool here; recordkit stores 1
print(rk.int64_feature(1))

feature = rk.float_feature(np.exp(1))
print(feature.SerializeToString())
assert feature.SerializeToString() == b"\x12\x06\n\x04T\xf8-@"

# The helpers say what went wrong instead of failing deep inside protobuf:
try:
    rk.int64_feature(1.0)
except TypeError as error:
    print("TypeError:", error)
# --8<-- [end:helpers]

# --8<-- [start:creating]
# --- Creating a tf.Example message -------------------------------------------------------
n_observations = int(1e4)
rng = np.random.default_rng(0)
feature0 = rng.choice([False, True], n_observations)  # bool
feature1 = rng.integers(0, 5, n_observations)  # int in [0, 5)
strings = np.array([b"cat", b"dog", b"chicken", b"horse", b"goat"])
feature2 = strings[feature1]  # bytes
feature3 = rng.standard_normal(n_observations)  # float


def serialize_example(feature0, feature1, feature2, feature3):
    """Creates a tf.train.Example message ready to be written to a file."""
    feature = {
        "feature0": rk.int64_feature(feature0),
        "feature1": rk.int64_feature(feature1),
        "feature2": rk.bytes_feature(feature2),
        "feature3": rk.float_feature(feature3),
    }
    example_proto = rk.train.Example(features=rk.train.Features(feature=feature))
    return example_proto.SerializeToString()


serialized_example = serialize_example(False, 4, b"goat", 0.9876)
print(serialized_example)
example_proto = rk.train.Example.FromString(serialized_example)
print(example_proto)

# The same bytes from a plain dict:
assert rk.encode_example({"feature0": False, "feature1": 4, "feature2": b"goat", "feature3": 0.9876}) == serialized_example
# --8<-- [end:creating]

# --8<-- [start:writing]
# --- TFRecord files: writing --------------------------------------------------------------
# tf.data.Dataset.from_tensor_slices(...).map(tf_serialize_example) + TFRecordWriter becomes
# one call that encodes and frames every row in Rust, straight from the columns:
filename = "test.tfrecord"
rk.write_examples(filename, {"feature0": feature0, "feature1": feature1, "feature2": feature2, "feature3": feature3})
print(filename, os.path.getsize(filename), "bytes")

# ... and the tutorial's loop with tf.io.TFRecordWriter, record by record, gives the same file:
with rk.TFRecordWriter("test-loop.tfrecord") as writer:
    for i in range(n_observations):
        writer.write(serialize_example(feature0[i], feature1[i], feature2[i], feature3[i]))
with open(filename, "rb") as a, open("test-loop.tfrecord", "rb") as b:
    assert a.read() == b.read()
# --8<-- [end:writing]

# --8<-- [start:reading]
# --- TFRecord files: reading ------------------------------------------------------------
raw_dataset = rk.TFRecordReader(filename)  # tf.data.TFRecordDataset([filename])
for i, raw_record in enumerate(raw_dataset):
    if i == 10:
        break
    print(repr(raw_record))

feature_description = {
    "feature0": rk.FixedLenFeature([], "int64", default_value=0),
    "feature1": rk.FixedLenFeature([], "int64", default_value=0),
    "feature2": rk.FixedLenFeature([], "string", default_value=""),
    "feature3": rk.FixedLenFeature([], "float32", default_value=0.0),
}


def _parse_function(example_proto):
    return rk.parse_single_example(example_proto, feature_description)


for i, raw_record in enumerate(rk.TFRecordReader(filename)):
    if i == 10:
        break
    print(repr(_parse_function(raw_record)))

# Better: parse whole batches into NumPy columns, framing + CRC + parsing in Rust.
total = 0
for batch in rk.read_examples(filename, feature_description, batch_size=1024):
    total += len(batch["feature0"])
assert total == n_observations
assert np.array_equal(batch["feature1"], feature1[-len(batch["feature1"]):])

# Reading a record back into an Example message:
for raw_record in rk.TFRecordReader(filename):
    example = rk.train.Example()
    example.ParseFromString(raw_record)
    print(example)
    break

# The tutorial's Example-to-dict-of-NumPy-arrays conversion, verbatim:
result = {}
# example.features.feature is the dictionary
for key, feature in example.features.feature.items():
    # The values are the Feature objects which contain a `kind` which contains:
    # one of three fields: bytes_list, float_list, int64_list
    kind = feature.WhichOneof("kind")
    result[key] = np.array(getattr(feature, kind).value)
print(result)
# ... or simply:
print(rk.decode_example(raw_record))
# --8<-- [end:reading]

# --8<-- [start:images]
# --- Walkthrough: reading and writing image data --------------------------------------
cat_in_snow = os.path.join(HERE, "images", "cat.jpg")
williamsburg_bridge = os.path.join(HERE, "images", "bridge.jpg")
image_labels = {cat_in_snow: 0, williamsburg_bridge: 1}

image_string = open(cat_in_snow, "rb").read()
label = image_labels[cat_in_snow]


def image_example(image_string, label):
    image_shape = rk.image_shape(image_string)  # tf.image.decode_jpeg(image_string).shape
    feature = {
        "height": rk.int64_feature(image_shape[0]),
        "width": rk.int64_feature(image_shape[1]),
        "depth": rk.int64_feature(image_shape[2]),
        "label": rk.int64_feature(label),
        "image_raw": rk.bytes_feature(image_string),
    }
    return rk.train.Example(features=rk.train.Features(feature=feature))


for line in str(image_example(image_string, label)).split("\n")[:15]:
    print(line)
print("...")

record_file = "images.tfrecords"
with rk.TFRecordWriter(record_file) as writer:
    for filename, label in image_labels.items():
        image_string = open(filename, "rb").read()
        tf_example = image_example(image_string, label)
        writer.write(tf_example.SerializeToString())
print(record_file, os.path.getsize(record_file), "bytes")

image_feature_description = {
    "height": rk.FixedLenFeature([], "int64"),
    "width": rk.FixedLenFeature([], "int64"),
    "depth": rk.FixedLenFeature([], "int64"),
    "label": rk.FixedLenFeature([], "int64"),
    "image_raw": rk.FixedLenFeature([], "string"),
}
for raw, (filename, label) in zip(rk.TFRecordReader(record_file), image_labels.items()):
    image_features = rk.parse_single_example(raw, image_feature_description)
    image_raw = image_features["image_raw"].item()
    assert image_raw == open(filename, "rb").read() and image_features["label"] == label
    print(filename, "->", image_features["height"], "x", image_features["width"], "x", image_features["depth"])
# --8<-- [end:images]

# --8<-- [start:ofrecord]
# --- OneFlow's OFRecord guide --------------------------------------------------------------
# The guide's helpers (int32/int64/float/double/bytes_feature) are recordkit's; an OFRecord
# takes them directly. Its Features are OneFlow's five kinds.
feature0 = [True, True, False, False, True]
feature1 = [random.randint(1, 100) for x in range(0, 5)]
feature2 = [b"cat", b"dog", b"chicken", b"horse", b"goat"]
feature3 = [random.random() for x in range(0, 5)]

topack = {
    "feature0": rk.int64_feature(feature0),
    "feature1": rk.int64_feature(feature1),
    "feature2": rk.bytes_feature(feature2),
    "feature3": rk.float_feature(feature3),
    "feature4": rk.double_feature(feature3),
    "feature5": rk.int32_feature(feature1),
}
ofrecord_features = rk.ofrecord.OFRecord(feature=topack)
serilizedBytes = ofrecord_features.SerializeToString()

# Written exactly as the guide does, with struct ...
with open("example.ofrecords", "wb") as f:
    length = ofrecord_features.ByteSize()
    f.write(struct.pack("q", length))
    f.write(serilizedBytes)

# ... and read back exactly as the guide does:
with open("example.ofrecords", "rb") as f:
    length = struct.unpack("q", f.read(8))
    serilizedBytes = f.read(length[0])
    ofrecord_features = rk.ofrecord.OFRecord.FromString(serilizedBytes)
    f0 = ofrecord_features.feature["feature0"].int64_list.value
    f1 = ofrecord_features.feature["feature1"].int64_list.value
    f2 = ofrecord_features.feature["feature2"].bytes_list.value
    f3 = ofrecord_features.feature["feature3"].float_list.value
    print(f0)
    print(f1)
    print(f2)
    print(f3)
assert f0 == [1, 1, 0, 0, 1] and f2 == feature2

# recordkit's reader gives the same records, and checks the framing:
assert list(rk.OFRecordReader("example.ofrecords")) == [serilizedBytes]
print(rk.decode_ofrecord(serilizedBytes))

# A dataset folder as OneFlow reads it (part-00000, part-00001, ...):
parts = rk.write_ofrecords("ofrecord_dataset", {"label": feature1, "name": feature2, "score": np.array(feature3)}, num_parts=2)
print(parts, [rk.count_records(p, format="ofrecord") for p in parts])
# --8<-- [end:ofrecord]

assert "tensorflow" not in sys.modules and "oneflow" not in sys.modules
print("tutorial complete: no TensorFlow, no OneFlow")
