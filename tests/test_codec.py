"""Messages (recordkit.train, recordkit.ofrecord), the tutorial's helpers and the dict codec."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import struct
import tempfile
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import recordkit as rk
import reference
from recordkit import train

# --- property tests against the pure-Python reference codec ------------------------------

names = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
int64s = st.integers(-(1 << 63), (1 << 63) - 1)
float32s = st.floats(width=32, allow_nan=False)
feature_values = st.one_of(
    st.tuples(st.just("int64_list"), st.lists(int64s, max_size=6)),
    st.tuples(st.just("float_list"), st.lists(float32s, max_size=6)),
    st.tuples(st.just("bytes_list"), st.lists(st.binary(max_size=12), max_size=6)),
)
examples = st.dictionaries(names, feature_values, max_size=6)


def _typed(kind: str, values: list) -> object:
    if kind == "int64_list":
        return np.array(values, dtype=np.int64)
    if kind == "float_list":
        return np.array(values, dtype=np.float32)
    return np.array(values, dtype=object) if values else np.array([], dtype=object)


@given(examples)
def test_encoding_matches_protobuf_deterministic_bytes(features: dict) -> None:
    expected = reference.encode_example(features)
    assert rk.encode_example({k: _typed(kind, v) for k, (kind, v) in features.items()}) == expected
    message = train.Example(features=train.Features(feature={
        k: train.Feature(**{kind: getattr(train, {"int64_list": "Int64List", "float_list": "FloatList", "bytes_list": "BytesList"}[kind])(value=v)})
        for k, (kind, v) in features.items()
    }))
    assert message.SerializeToString() == expected


@given(examples)
def test_decoding_agrees_with_the_reference(features: dict) -> None:
    data = reference.encode_example(features)
    decoded = rk.decode_example(data)
    ref = reference.decode_example(data)
    assert set(decoded) == set(ref) == set(features)
    for key, (_kind, values) in ref.items():
        got = decoded[key]
        assert (got.tolist() if isinstance(got, np.ndarray) else got) == values
    assert train.Example.FromString(data).SerializeToString() == data


@given(st.lists(st.tuples(st.sampled_from([1, 2, 3]), st.binary(max_size=20)), max_size=6), st.binary(max_size=30))
def test_decoding_never_crashes_on_garbage(fields: list, tail: bytes) -> None:
    data = b"".join(bytes([n << 3 | 2, len(p)]) + p for n, p in fields) + tail
    try:
        rk.decode_example(data)
    except rk.ParseError:
        pass
    try:
        rk.parse_example([data], {"x": rk.VarLenFeature("int64")})
    except rk.ParseError:
        pass


@given(st.dictionaries(names, st.one_of(
    st.lists(st.integers(-(1 << 31), (1 << 31) - 1), min_size=1, max_size=5).map(lambda v: np.array(v, np.int32)),
    st.lists(int64s, min_size=1, max_size=5).map(lambda v: np.array(v, np.int64)),
    st.lists(float32s, min_size=1, max_size=5).map(lambda v: np.array(v, np.float32)),
    st.lists(st.floats(allow_nan=False), min_size=1, max_size=5).map(lambda v: np.array(v, np.float64)),
    st.lists(st.binary(max_size=8), min_size=1, max_size=5),
), max_size=5))
def test_ofrecord_round_trip(mapping: dict) -> None:
    data = rk.encode_ofrecord(mapping)
    decoded = rk.decode_ofrecord(data)
    ref = reference.decode_feature_map(data, reference.OFRECORD_KINDS)
    for key, value in mapping.items():
        got = decoded[key]
        if isinstance(value, np.ndarray):
            assert got.dtype == value.dtype and got.tolist() == value.tolist()
        else:
            assert got == value
        assert ref[key][1] == (value.tolist() if isinstance(value, np.ndarray) else value)


# --- protobuf semantics where TensorFlow's fast parser differs --------------------------


def _entry(key: bytes, feature: bytes) -> bytes:
    return reference._len(1, reference._len(1, key) + reference._len(2, feature))


def test_runs_concatenate_and_last_kind_and_key_win() -> None:
    packed = reference._len(1, bytes([1, 2]))
    unpacked = bytes([0x08, 3])
    feature = reference._len(3, packed + unpacked + reference._len(1, bytes([4])))
    first = reference._len(1, _entry(b"k", reference._len(3, reference._len(1, bytes([9])))))
    second = reference._len(1, _entry(b"k", feature) + bytes([0x10, 0x01]))  # unknown field inside Features
    data = first + bytes([0x18, 0x05]) + second  # unknown field at the top
    assert rk.decode_example(data)["k"].tolist() == [1, 2, 3, 4]
    out = rk.parse_example([data], {"k": rk.VarLenFeature("int64")})["k"]
    assert out.values.tolist() == [1, 2, 3, 4]
    two_kinds = reference._len(1, _entry(b"k", reference._len(1, reference._len(1, b"x")) + reference._len(3, reference._len(1, b"\x07"))))
    assert rk.decode_example(two_kinds)["k"].tolist() == [7]


def test_feature_without_kind_is_missing() -> None:
    data = reference._len(1, _entry(b"k", b""))
    assert rk.decode_example(data) == {"k": None}
    out = rk.parse_example([data], {"k": rk.FixedLenFeature([], "int64", default_value=5)})
    assert out["k"].tolist() == [5]


# --- messages -----------------------------------------------------------------------------


def test_tutorial_printouts() -> None:
    assert str(rk.bytes_feature(b"test_string")) == 'bytes_list {\n  value: "test_string"\n}\n'
    assert str(rk.float_feature(np.exp(1))) == "float_list {\n  value: 2.71828175\n}\n"
    assert str(rk.int64_feature(1)) == "int64_list {\n  value: 1\n}\n"
    assert rk.float_feature(np.exp(1)).SerializeToString() == b"\x12\x06\n\x04T\xf8-@"


def test_helpers_coerce_like_the_tutorial_needs() -> None:
    assert rk.int64_feature(True).int64_list.value == [1]
    assert rk.int64_feature(np.bool_(False)).int64_list.value == [0]
    assert rk.int64_feature(np.array([1, 2, 3, 4])).int64_list.value == [1, 2, 3, 4]
    with pytest.raises(TypeError, match="2-D array"):  # as protobuf refuses it: flattening would hide the shape
        rk.int64_feature(np.array([[1, 2], [3, 4]]))
    assert rk.bytes_feature("héllo").bytes_list.value == ["héllo".encode()]
    assert rk.float_feature(0.1).float_list.value == [float(np.float32(0.1))]
    with pytest.raises(TypeError, match="1.0.*float_feature"):
        rk.int64_feature(1.0)
    with pytest.raises(TypeError, match="int64_feature"):
        rk.bytes_feature(3)
    with pytest.raises(TypeError, match="bytes_feature"):
        rk.float_feature("x")
    with pytest.raises(ValueError, match="range"):
        rk.int64_feature(1 << 63)


def test_message_api() -> None:
    example = train.Example()
    assert example.SerializeToString() == b"" and not example.HasField("features")
    example.features.feature["a"].int64_list.value.append(3)
    assert example.HasField("features")
    assert example.features.feature["a"].WhichOneof("kind") == "int64_list"
    copy = train.Example()
    copy.ParseFromString(example.SerializeToString())
    assert copy == example and copy is not example
    assert pickle.loads(pickle.dumps(example)) == example
    feature = train.Feature(bytes_list=train.BytesList(value=[b"x"]))
    feature.float_list.value.append(1.5)  # setting another member of the oneof clears the first
    assert feature.WhichOneof("kind") == "float_list"
    assert train.Feature().WhichOneof("kind") is None
    assert train.Example(features=train.Features()).SerializeToString() == b"\n\x00"
    with pytest.raises(TypeError):
        train.Int64List(value=[1.5])
    with pytest.raises(TypeError):
        train.Feature(nope=1)


def test_sequence_example_message() -> None:
    seq = train.SequenceExample()
    seq.context.feature["id"].int64_list.value.append(7)
    steps = seq.feature_lists.feature_list["tokens"].feature
    steps.add(int64_list=train.Int64List(value=[1, 2]))
    steps.add()
    data = seq.SerializeToString()
    assert train.SequenceExample.FromString(data) == seq
    context, lists = rk.decode_sequence_example(data)
    assert context["id"].tolist() == [7]
    assert [None if s is None else s.tolist() for s in lists["tokens"]] == [[1, 2], None]
    assert "feature_lists {" in str(seq)


def test_text_format_escapes_and_sorts() -> None:
    example = train.Example(features=train.Features(feature={
        "b": rk.bytes_feature(b'\x00\xff\n"\'\\ \x7f'), "a": rk.float_feature([16777216.0, float("inf")]),
    }))
    text = str(example)
    assert text.index('key: "a"') < text.index('key: "b"')
    assert r'value: "\000\377\n\"\'\\ \177"' in text
    assert "value: 16777216\n" in text and "value: inf" in text


def test_dict_codec() -> None:
    data = rk.encode_example({"label": 1, "score": [0.5, 0.7], "name": "cat", "flag": True, "none": None})
    decoded = rk.decode_example(data)
    assert decoded["label"].dtype == np.int64 and decoded["label"].tolist() == [1]
    assert decoded["score"].dtype == np.float32
    assert decoded["name"] == [b"cat"] and decoded["flag"].tolist() == [1] and "none" not in decoded
    with pytest.raises(ValueError, match="empty list"):
        rk.encode_example({"x": []})
    with pytest.raises(TypeError, match="mix"):
        rk.encode_example({"x": [1, b"a"]})
    assert rk.decode_example(rk.encode_example({"x": np.array([], np.float32)}))["x"].dtype == np.float32


def test_int32_and_double_helpers() -> None:
    record = rk.ofrecord.OFRecord(feature={"i": rk.int32_feature([1, -2]), "d": rk.double_feature(0.1)})
    decoded = rk.decode_ofrecord(record.SerializeToString())
    assert decoded["i"].dtype == np.int32 and decoded["i"].tolist() == [1, -2]
    assert decoded["d"].dtype == np.float64 and decoded["d"].tolist() == [0.1]
    with pytest.raises(ValueError):
        rk.int32_feature(1 << 40)


def test_field_three_differs_between_schemas() -> None:
    data = rk.ofrecord.OFRecord(feature={"x": rk.double_feature(2.5)}).SerializeToString()
    # The same bytes read as a TensorFlow Features message: field 3 is int64_list there.
    assert rk.decode_ofrecord(data)["x"].tolist() == [2.5]
    assert struct.pack("<d", 2.5) in data


@pytest.mark.parametrize("value", [{"b": 1}, {1, 2}, [[1, 2], [3]], [[1, 2], [3, 4]], np.zeros((2, 2)), [1, None], [b"a", [b"b"]], object()])
def test_values_that_are_not_one_flat_list_are_a_type_error_naming_the_feature(value: object) -> None:
    with pytest.raises(TypeError, match="feature 'a'"):
        rk.encode_example({"a": value})
    with pytest.raises(TypeError, match="int64_feature"):
        rk.int64_feature(value)


def test_flat_values_of_every_accepted_shape_still_encode() -> None:
    for value in (1, 1.5, "s", b"s", [1, 2], (1, 2), np.arange(3), np.float32(2.5), np.array(7), range(3)):
        assert rk.encode_example({"a": value})


@pytest.mark.parametrize("call", [
    lambda: rk.parse_example(["abc"], {"a": rk.VarLenFeature("int64")}),
    lambda: rk.parse_example([b"", "abc"], {"a": rk.VarLenFeature("int64")}),
    lambda: rk.parse_single_example("abc", {"a": rk.VarLenFeature("int64")}),
    lambda: rk.decode_example("abc"),
    lambda: rk.parse_sequence_example(["abc"], sequence_features={"a": rk.VarLenFeature("int64")}),
])
def test_str_where_serialized_bytes_are_expected_is_a_type_error(call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TypeError, match="bytes"):
        call()


def test_deeply_nested_groups_are_a_parse_error_not_a_crash() -> None:
    # 200 KB of start-group tags overflowed the stack (SIGSEGV) through every parsing API.
    # A child process, so that a regression fails this test instead of killing the run.
    script = """
import recordkit as rk
data = b"\\x0b" * 200_000
spec = {"a": rk.VarLenFeature("int64")}
calls = [lambda: rk.decode_example(data), lambda: rk.parse_example([data], spec),
         lambda: rk.parse_single_example(data, spec), lambda: rk.decode_sequence_example(data),
         lambda: rk.parse_sequence_example([data], sequence_features=spec), lambda: rk.decode_ofrecord(data),
         lambda: rk.train.Example.FromString(data)]
for call in calls:
    try:
        call()
    except rk.ParseError as error:
        assert "nested more than 100 deep" in str(error), error
    else:
        raise AssertionError("accepted")
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", (result.returncode, result.stderr[-2000:])


@pytest.mark.parametrize("bits", [0x7F800010, 0xFF800001, 0x7FC00000, 0x7FFFFFFF])
def test_message_classes_keep_float32_nan_bits(bits: int) -> None:
    value = np.frombuffer(struct.pack("<I", bits), np.float32)
    data = rk.encode_example({"f": value})
    assert rk.train.Example.FromString(data).SerializeToString() == data
    kept = rk.train.FloatList(value=value).values_array()
    assert kept.view(np.uint32)[0] == bits
    assert "nan" in str(rk.train.Example.FromString(data))


def _len_field(number: int, payload: bytes) -> bytes:
    return bytes([number << 3 | 2, len(payload)]) + payload


def _example_with_a_bad_entry_then_a_good_one() -> bytes:
    bad = _len_field(3, _len_field(1, b"\x80"))  # an Int64List whose packed varint is cut short
    good = _len_field(3, _len_field(1, b"\x01"))
    entries = [_len_field(1, b"a") + _len_field(2, value) for value in (bad, good)]
    return _len_field(1, b"".join(_len_field(1, e) for e in entries))


def test_a_malformed_entry_is_refused_even_when_a_later_key_replaces_it() -> None:
    data = _example_with_a_bad_entry_then_a_good_one()
    for decode in (rk.decode_example, rk.train.Example.FromString):
        with pytest.raises(rk.ParseError, match="truncated varint"):
            decode(data)
    with pytest.raises(rk.ParseError, match="Key: a, Index: 0"):
        rk.parse_example([data], {"a": rk.VarLenFeature("int64")})
    sequence = _len_field(1, _example_with_a_bad_entry_then_a_good_one()[2:])  # the same map as a context
    with pytest.raises(rk.ParseError, match="truncated varint"):
        rk.decode_sequence_example(sequence)
    with pytest.raises(rk.ParseError, match="Key: a"):
        rk.parse_sequence_example([sequence], context_features={"a": rk.VarLenFeature("int64")})
    pb = pytest.importorskip("tensorflow.core.example.example_pb2")
    with pytest.raises(Exception, match="Wire format was corrupt|Error parsing"):
        pb.Example.FromString(data)


@pytest.mark.parametrize("value", [1e300, -1e39, [0.5, 3.5e38], np.array([1e300])])
def test_a_finite_value_beyond_float32_is_refused_on_every_path(value: object) -> None:
    with pytest.raises(ValueError, match="beyond float32's range"):
        rk.float_feature(value)
    with pytest.raises(ValueError, match="feature 'a': .* beyond float32's range"):
        rk.encode_example({"a": value})
    with pytest.raises(ValueError, match="beyond float32's range"):
        rk.train.FloatList(value=value if isinstance(value, (list, np.ndarray)) else [value])
    with pytest.raises(ValueError, match="column 'a', row 0: .* beyond float32's range"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the float64 -> float32 warning
            rk.write_examples(os.path.join(tempfile.mkdtemp(), "x.tfrecord"),
                              {"a": [value] if not isinstance(value, np.ndarray) else value[None, :]})
    assert rk.decode_example(rk.encode_example({"a": [float("inf"), 3.4e38]}))["a"][0] == np.inf  # inf stays inf


@pytest.mark.parametrize("value", [memoryview(b"\x89PNG"), bytearray(b"\x89PNG"), [memoryview(b"\x89PNG")]])
def test_byte_buffers_are_bytes_in_the_helpers_and_the_dict_codec(value: object) -> None:
    assert rk.decode_example(rk.encode_example({"a": value}))["a"] == [b"\x89PNG"]
    assert rk.bytes_feature(value).bytes_list.value == [b"\x89PNG"]


def test_a_buffer_of_wider_items_is_refused_not_stored_as_its_bytes() -> None:
    with pytest.raises(TypeError, match="feature 'a': a buffer of 1-D items of 4 bytes"):
        rk.encode_example({"a": memoryview(np.arange(3, dtype=np.int32))})
    with pytest.raises(ValueError, match="feature 'a': '\\\\ud800' has no UTF-8 form"):
        rk.encode_example({"a": "\ud800"})


def test_examples_go_to_protobuf_json_and_back() -> None:
    example = rk.train.Example(features=rk.train.Features(feature={
        "b": rk.float_feature([0.1, float("nan"), float("-inf")]), "a": rk.int64_feature([1, -(2**63)]),
        "c": rk.bytes_feature([b"abc", b"\xff"]), "d": rk.train.Feature(), "e": rk.train.Feature(int64_list=rk.train.Int64List())}))
    text = example.to_json()
    content = json.loads(text)
    assert list(content["features"]["feature"]) == ["a", "b", "c", "d", "e"]
    assert content["features"]["feature"]["a"] == {"int64List": {"value": ["1", "-9223372036854775808"]}}
    assert content["features"]["feature"]["b"] == {"floatList": {"value": [0.1, "NaN", "-Infinity"]}}
    assert content["features"]["feature"]["c"] == {"bytesList": {"value": ["YWJj", "/w=="]}}
    assert content["features"]["feature"]["d"] == {} and content["features"]["feature"]["e"] == {"int64List": {}}
    back = rk.train.Example.from_json(text)
    assert back.SerializeToString() == example.SerializeToString()
    assert rk.train.Example.from_json(text.replace("int64List", "int64_list")) == back  # proto names too
    assert rk.train.Example().to_json() == "{}" and rk.train.Example.from_json("{}").SerializeToString() == b""
    assert rk.train.Example.from_json('{"features": {}}').HasField("features")
    assert rk.decode_json_example(text) == example.SerializeToString()
    assert rk.decode_json_example([[text, "{}"]]).tolist() == [[example.SerializeToString(), b""]]


@pytest.mark.parametrize("text, problem", [
    ('{"x": 1}', 'Example has no field named "x"'),
    ("not json", "not JSON"),
    ('{"features": {"feature": {"a": {"int64List": {"value": ["1.5"]}}}}}', r"value\[0\]: '1.5' is not an int64"),
    ('{"features": {"feature": {"a": {"floatList": {"value": [1e300]}}}}}', "beyond float32's range"),
    ('{"features": {"feature": {"a": {"bytesList": {"value": ["!!"]}}}}}', "is not base64"),
    ('{"features": {"feature": {"a": {"bytesList": {}, "int64List": {}}}}}', "a Feature holds one kind"),
])
def test_json_that_is_no_example_is_a_parse_error_naming_where(text: str, problem: str) -> None:
    with pytest.raises(rk.ParseError, match=problem):
        rk.train.Example.from_json(text)
