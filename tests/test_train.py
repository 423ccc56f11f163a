"""recordkit.train's message classes, whose state lives in Rust: protobuf's API,
protobuf's bytes and protobuf's verdict on bad bytes, and nothing for Python's
garbage collector to walk."""

from __future__ import annotations

import gc
import math
import struct
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recordkit as rk
import reference
from recordkit import train

KINDS = ("bytes_list", "float_list", "int64_list")
LIST_CLASS = {"bytes_list": "BytesList", "float_list": "FloatList", "int64_list": "Int64List"}
DTYPE = {"bytes_list": object, "float_list": np.float32, "int64_list": np.int64}

names = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)
values_of_kind = {
    "bytes_list": st.lists(st.binary(max_size=10), max_size=5),
    "float_list": st.lists(st.floats(width=32, allow_nan=False), max_size=5),
    "int64_list": st.lists(st.integers(-(1 << 63), (1 << 63) - 1), max_size=5),
}
#: A Feature as (kind, values); kind None for a Feature with no kind set.
features = st.one_of(st.just((None, [])), *(st.tuples(st.just(k), v) for k, v in values_of_kind.items()))
feature_maps = st.dictionaries(names, features, max_size=5)
ways = st.sampled_from(["constructors", "mutation"])


@pytest.fixture(scope="module")
def pb() -> SimpleNamespace:
    pytest.importorskip("google.protobuf")
    import protobuf_messages

    return protobuf_messages.classes()


def _feature(lib: Any, kind: str | None, values: list) -> Any:
    if kind is None:
        return lib.Feature()
    return lib.Feature(**{kind: getattr(lib, LIST_CLASS[kind])(value=values)})


def _fill(lib: Any, feature_map: Any, spec: dict) -> None:
    """Sets each feature through the map, as a user changes a message in place."""
    for key, (kind, values) in spec.items():
        feature = feature_map[key]  # reading a missing key makes it, in both libraries
        if kind is None:
            continue
        if values:
            getattr(feature, kind).value.extend(values)
        else:
            getattr(feature, kind).CopyFrom(getattr(lib, LIST_CLASS[kind])())


def build_example(lib: Any, spec: dict, way: str) -> Any:
    """The same Example through `lib`'s classes (recordkit's or protobuf's)."""
    if way == "constructors":
        return lib.Example(features=lib.Features(feature={k: _feature(lib, *f) for k, f in spec.items()}))
    example = lib.Example()
    _fill(lib, example.features.feature, spec)
    return example


def build_sequence(lib: Any, context: dict, lists: dict, way: str) -> Any:
    if way == "constructors":
        return lib.SequenceExample(
            context=lib.Features(feature={k: _feature(lib, *f) for k, f in context.items()}),
            feature_lists=lib.FeatureLists(feature_list={
                k: lib.FeatureList(feature=[_feature(lib, *f) for f in steps]) for k, steps in lists.items()
            }),
        )
    sequence = lib.SequenceExample()
    _fill(lib, sequence.context.feature, context)
    for key, steps in lists.items():
        added = sequence.feature_lists.feature_list[key].feature
        for kind, values in steps:
            added.add(**({} if kind is None else {kind: getattr(lib, LIST_CLASS[kind])(value=values)}))
    return sequence


def _helper(kind: str | None, values: list) -> Any:
    if kind is None:
        return train.Feature()
    helper = {"bytes_list": rk.bytes_feature, "float_list": rk.float_feature, "int64_list": rk.int64_feature}[kind]
    return helper(values)


def _typed(spec: dict) -> dict:
    return {k: np.array(v, dtype=DTYPE[kind]) for k, (kind, v) in spec.items() if kind is not None}


# --- bytes: protobuf's deterministic serialization, encode_example, the reference -----------


@given(feature_maps, ways)
def test_examples_built_any_way_have_protobufs_bytes(pb: SimpleNamespace, spec: dict, way: str) -> None:
    ours = build_example(train, spec, way).SerializeToString()
    assert ours == build_example(pb, spec, way).SerializeToString(deterministic=True)
    helpers = train.Example(features=train.Features(feature={k: _helper(*f) for k, f in spec.items()}))
    assert helpers.SerializeToString() == build_example(pb, spec, "constructors").SerializeToString(deterministic=True)


@given(feature_maps.map(lambda spec: {k: f for k, f in spec.items() if f[0] is not None}))
def test_examples_have_the_bytes_of_encode_example_and_the_reference(spec: dict) -> None:
    ours = build_example(train, spec, "constructors").SerializeToString()
    assert ours == rk.encode_example(_typed(spec)) == reference.encode_example(spec)
    assert train.Example.FromString(ours).SerializeToString() == ours


@given(feature_maps, st.dictionaries(names, st.lists(features, max_size=3), max_size=3), ways)
def test_sequence_examples_built_any_way_have_protobufs_bytes(
    pb: SimpleNamespace, context: dict, lists: dict, way: str
) -> None:
    ours = build_sequence(train, context, lists, way)
    assert ours.SerializeToString() == build_sequence(pb, context, lists, way).SerializeToString(deterministic=True)
    assert train.SequenceExample.FromString(ours.SerializeToString()) == ours


@given(
    feature_maps.map(lambda spec: {k: f for k, f in spec.items() if f[0] is not None}),
    st.dictionaries(names, st.sampled_from(KINDS).flatmap(
        lambda kind: st.lists(st.tuples(st.just(kind), values_of_kind[kind]), min_size=1, max_size=3)), max_size=3),
)
def test_sequence_examples_have_the_bytes_of_encode_sequence_example(context: dict, lists: dict) -> None:
    ours = build_sequence(train, context, lists, "constructors").SerializeToString()
    steps = {k: [np.array(v, dtype=DTYPE[kind]) for kind, v in s] for k, s in lists.items()}
    assert ours == rk.encode_sequence_example(_typed(context), steps)


# --- bad bytes: protobuf's verdict, and the same values where both accept ---------------


def _mutated(data: bytes, draw: st.DrawFn) -> bytes:
    at = draw(st.integers(0, len(data)))
    how = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "repeat"]))
    if how == "flip" and data:
        at = min(at, len(data) - 1)
        return data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1:]
    if how == "truncate":
        return data[:at]
    if how == "insert":
        return data[:at] + draw(st.binary(min_size=1, max_size=4)) + data[at:]
    end = draw(st.integers(at, len(data)))
    if how == "delete":
        return data[:at] + data[end:]
    return data[:end] + data[at:end] + data[end:]


def _value(x: object) -> object:
    if isinstance(x, (float, np.floating)):  # float32 either way; NaN's payload is not what is compared here
        return "nan" if math.isnan(x) else struct.pack("<f", x)
    return x


def _map_values(feature_map: Any) -> dict:
    out = {}
    for key, feature in feature_map.items():
        kind = feature.WhichOneof("kind")
        out[key] = (kind, [_value(v) for v in getattr(feature, kind).value] if kind else None)
    return out


def _example_values(example: Any) -> object:
    return example.HasField("features"), _map_values(example.features.feature)


def _sequence_values(sequence: Any) -> object:
    lists = {
        key: [_map_values({"": step})[""] for step in feature_list.feature]
        for key, feature_list in sequence.feature_lists.feature_list.items()
    }
    return sequence.HasField("context"), _map_values(sequence.context.feature), lists


def _entry_with_unknown_fields(data: bytes, maps: tuple[int, ...]) -> bool:
    """Whether a map entry of the message in `data` holds a field other than its
    key and value (`maps`: the top-level fields that are maps). docs/guarantees.md skips
    unknown fields at every level, so recordkit keeps such an entry; protobuf's
    upb backend moves it out of the map into the message's unknown fields. Only
    the verdict is compared then. False where the bytes do not parse."""
    try:
        for number, wire, body in reference.fields(data):
            if number in maps and wire == 2:
                for entry_number, entry_wire, entry in reference.fields(body):  # type: ignore[arg-type]
                    if (entry_number, entry_wire) == (1, 2) and {(n, w) for n, w, _ in reference.fields(entry)} - {(1, 2), (2, 2)}:  # type: ignore[arg-type]
                        return True
    except (ValueError, IndexError):
        return False
    return False


def _verdict(parse: Any, data: bytes, errors: type | tuple[type, ...], values: Any) -> object:
    try:
        return values(parse(data))
    except errors:
        return "refused"


@settings(max_examples=400)
@given(feature_maps, st.data())
def test_mutated_examples_get_protobufs_verdict_and_values(pb: SimpleNamespace, spec: dict, data: st.DataObject) -> None:
    from google.protobuf.message import DecodeError

    good = build_example(pb, spec, "constructors").SerializeToString(deterministic=True)
    bad = _mutated(good, data.draw)
    ours = _verdict(train.Example.FromString, bad, rk.ParseError, _example_values)
    theirs = _verdict(pb.Example.FromString, bad, DecodeError, _example_values)
    if _entry_with_unknown_fields(bad, maps=(1,)):
        assert (ours == "refused") == (theirs == "refused"), repr(bad)
    else:
        assert ours == theirs, repr(bad)
    decoded = _verdict(rk.decode_example, bad, rk.ParseError, lambda d: d)
    assert (decoded == "refused") == (ours == "refused"), repr(bad)


@settings(max_examples=300)
@given(feature_maps, st.dictionaries(names, st.lists(features, max_size=3), max_size=2), st.data())
def test_mutated_sequence_examples_get_protobufs_verdict_and_values(
    pb: SimpleNamespace, context: dict, lists: dict, data: st.DataObject
) -> None:
    from google.protobuf.message import DecodeError

    good = build_sequence(pb, context, lists, "constructors").SerializeToString(deterministic=True)
    bad = _mutated(good, data.draw)
    ours = _verdict(train.SequenceExample.FromString, bad, rk.ParseError, _sequence_values)
    theirs = _verdict(pb.SequenceExample.FromString, bad, DecodeError, _sequence_values)
    if _entry_with_unknown_fields(bad, maps=(1, 2)):
        assert (ours == "refused") == (theirs == "refused"), repr(bad)
    else:
        assert ours == theirs, repr(bad)


# --- nothing for the garbage collector --------------------------------------------------


def _tracked() -> int:
    gc.collect()
    return len(gc.get_objects())


def test_a_message_holds_no_python_objects_however_many_values() -> None:
    values = list(range(10_000))
    data = rk.encode_example({"ids": values, "words": [b"w%d" % i for i in range(1_000)],
                              "scores": np.zeros(1_000, np.float32)})
    before = _tracked()
    messages = [train.Example.FromString(data) for _ in range(100)]
    for message in messages:  # touch every part: lists decoded, sub-messages made
        assert message.features.feature["ids"].int64_list.value[-1] == 9_999
        assert len(message.features.feature["words"].bytes_list.value) == 1_000
    # One object per message (its handle) and nothing per value: 10 000 values
    # each would be a million objects here.
    assert _tracked() - before <= len(messages) + 10
    parts: list[object] = [messages[0], messages[0].features, messages[0].features.feature,
                           messages[0].features.feature["ids"], messages[0].features.feature["ids"].int64_list,
                           messages[0].features.feature["ids"].int64_list.value]
    built = train.Example(features=train.Features(feature={"x": rk.int64_feature(values)}))
    for part in [*parts, built, built.features.feature["x"]]:  # what the collector would walk: the class alone
        assert [r for r in gc.get_referents(part) if r is not type(part)] == [], type(part).__name__


def test_handles_share_the_message_they_reach() -> None:
    example = train.Example.FromString(rk.encode_example({"a": [1, 2]}))
    values = example.features.feature["a"].int64_list.value
    feature = example.features.feature["a"]
    values.append(3)
    assert list(feature.int64_list.value) == [1, 2, 3]
    assert example.SerializeToString() == rk.encode_example({"a": [1, 2, 3]})
    feature.float_list.value.append(0.5)  # a oneof: the int64 list is gone, and the old handle sees it
    assert list(values) == [] and feature.WhichOneof("kind") == "float_list"
    del example
    assert list(feature.float_list.value) == [0.5]  # a handle keeps its part alive


def test_one_value_read_in_place_agrees_with_the_decoded_list() -> None:
    data = rk.encode_example({"i": [5, -1, 1 << 40], "f": np.array([0.5, -2.0], np.float32), "b": [b"x", b"", b"yz"]})
    for i in range(-4, 4):
        fresh = train.Example.FromString(data).features.feature
        decoded = train.Example.FromString(data).features.feature
        for key, kind in (("i", "int64_list"), ("f", "float_list"), ("b", "bytes_list")):
            whole = list(getattr(decoded[key], kind).value)
            if -len(whole) <= i < len(whole):
                assert getattr(fresh[key], kind).value[i] == whole[i]
            else:
                with pytest.raises(IndexError):
                    getattr(fresh[key], kind).value[i]
            # Asking for another kind than the one held reads an empty list, as protobuf does.
            other = "int64_list" if kind != "int64_list" else "float_list"
            with pytest.raises(IndexError):
                getattr(fresh[key], other).value[0]


def test_a_writer_takes_messages_as_they_are(tmp_path: Any) -> None:
    example = train.Example(features=train.Features(feature={"a": rk.int64_feature([1, 2])}))
    sequence = train.SequenceExample.FromString(rk.encode_sequence_example({"c": [1]}, {"s": [[1], [2, 3]]}))
    path = str(tmp_path / "m.tfrecord")
    with rk.TFRecordWriter(path) as writer:
        writer.write(example)
        writer.write_many([sequence, example.SerializeToString()])
    assert list(rk.TFRecordReader(path)) == [example.SerializeToString(), sequence.SerializeToString(),
                                              example.SerializeToString()]
    record = rk.ofrecord.OFRecord(feature={"x": rk.ofrecord.Feature(int32_list=rk.ofrecord.Int32List(value=[7]))})
    of_path = str(tmp_path / "part-0")
    with rk.OFRecordWriter(of_path) as writer:
        writer.write(record)
    assert list(rk.OFRecordReader(of_path)) == [record.SerializeToString()]
    with rk.TFRecordWriter(str(tmp_path / "n.tfrecord")) as writer, pytest.raises(TypeError, match="SerializeToString"):
        writer.write(example.features)



# --- what the comparisons above found, each kept -------------------------------------

FOUND = {
    # An entry with no key field, or no value field: the defaults, "" and a Feature with no kind.
    "entry without key": (b"\n\x06\n\x04\x12\x02\x1a\x00", True),
    "entry without value": (b"\n\x05\n\x03\n\x01k", True),
    # A varint of 11 bytes in a packed list.
    "varint of 11 bytes": (b"\n\x15\n\x13\n\x01k\x12\x0e\x1a\x0c\n\x0b" + b"\xff" * 10 + b"\x01", False),
    # An entry whose first key field is not UTF-8, a later one replacing it.
    "a replaced key not UTF-8": (b"\n\x0d\n\x0b\n\x03\x80\x12\x00\n\x04\n\x00\x12\x00", False),
    # A Feature setting two kinds: the first, malformed, still checked before the second wins.
    "a cleared kind malformed": (b"\n\x0d\n\x0b\n\x01k\x12\x06\n\x02\n\x05\x12\x00", False),
    # Inside a group a tag must fit 32 bits; field number 0 passes there.
    "a tag past 32 bits in a group": (b"\x0b" + b"\x80\x80\x80\x80\x80\x01" + b"\x00\x0c", False),
    "field number 0 in a group": (b"\x0b\x00\x00\x0c", True),
}


@pytest.mark.parametrize("case", sorted(FOUND))
def test_what_the_comparisons_found(case: str) -> None:
    data, accepted = FOUND[case]
    for parse, values in ((train.Example.FromString, _example_values),
                          (train.SequenceExample.FromString, _sequence_values)):
        if accepted:
            values(parse(data))  # every part read
        else:
            with pytest.raises(rk.ParseError):
                parse(data)
    if accepted:
        rk.decode_example(data)
    else:
        with pytest.raises(rk.ParseError):
            rk.decode_example(data)
    try:
        import protobuf_messages
        from google.protobuf.message import DecodeError
    except ImportError:
        return
    pb = protobuf_messages.classes()
    for name, values in (("Example", _example_values), ("SequenceExample", _sequence_values)):
        ours = _verdict(getattr(train, name).FromString, data, rk.ParseError, values)
        assert ours == _verdict(getattr(pb, name).FromString, data, DecodeError, values)


def test_an_entry_holding_unknown_fields_is_kept() -> None:
    # docs/guarantees.md: unknown fields are skipped at every level, a map entry's too.
    # protobuf's upb backend moves such an entry out of the map instead (into the
    # message's unknown fields), so the two differ here by design.
    entry = b"\n\x01k\x12\x04\x1a\x02\n\x00" + b"\x18\x01"
    data = b"\n" + bytes([len(entry) + 2]) + b"\n" + bytes([len(entry)]) + entry
    assert list(train.Example.FromString(data).features.feature) == ["k"]
    assert list(rk.decode_example(data)) == ["k"]
