"""tf.io parsing semantics: the traps TensorFlow's behaviour sets (reference notes §4, §9)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import recordkit as rk
import reference

R = rk.RaggedFeature


def ex(**features) -> bytes:
    return rk.encode_example(features)


def test_default_only_for_missing_never_for_empty() -> None:
    spec = {"age": rk.FixedLenFeature([], "int64", default_value=-1)}
    assert rk.parse_example([ex(age=3), ex(other=1)], spec)["age"].tolist() == [3, -1]
    with pytest.raises(rk.ParseError) as info:
        rk.parse_example([ex(age=3), ex(age=np.array([], np.int64))], spec)
    assert (info.value.key, info.value.index) == ("age", 1)
    assert "Values size: 0" in str(info.value)


def test_defaults_are_not_broadcast() -> None:
    with pytest.raises(ValueError, match="broadcast"):
        rk.FixedLenFeature([2], "int64", default_value=0)
    with pytest.raises(TypeError):
        rk.FixedLenFeature([], "int64", default_value=1.5)
    out = rk.parse_example([ex(a=1)], {"m": rk.FixedLenFeature([2, 2], "float32", default_value=[[1, 2], [3, 4]])})
    assert out["m"].shape == (1, 2, 2) and out["m"].dtype == np.float32


@pytest.mark.parametrize("records", [1, 64, 65, 1000])
def test_equal_counts_are_a_read_only_view_and_parse_alike(records: int) -> None:
    """Past 64 records, counts that are all equal come as one value broadcast
    (read-only, stride 0); the outputs are the same either way."""
    from recordkit import _native

    batch = [ex(a=[1, 2], s=[b"x"]) if i % 3 else ex(a=[i, 7], s=[b"y"]) for i in range(records)]
    ((_, counts, uniform), (_, s_counts, _)) = _native.parse_example_columns(batch, [("a", "int64"), ("s", "string")])
    assert counts.tolist() == [2] * records and s_counts.tolist() == [1] * records and uniform == 2
    if records > 64:
        assert counts.strides == (0,) and not counts.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            counts[0] = 5
    else:
        assert counts.strides == (8,)
    out = rk.parse_example(batch, {"a": rk.FixedLenFeature([2], "int64"), "s": rk.VarLenFeature("string")})
    assert out["a"].tolist() == [[1, 2] if i % 3 else [i, 7] for i in range(records)]
    assert out["s"].values.tolist() == [b"x" if i % 3 else b"y" for i in range(records)]


@pytest.mark.parametrize("make", [
    lambda shape: rk.FixedLenFeature(shape, "int64"),
    lambda shape: rk.FixedLenSequenceFeature(shape, "int64", allow_missing=True),
])
def test_shapes_are_checked_when_the_spec_is_made(make) -> None:  # type: ignore[no-untyped-def]
    for bad in ([0], [2, 0], [-1], (3, -2)):  # TensorFlow 2.21 dies with SIGFPE on [0]
        with pytest.raises(ValueError, match="positive integer"):
            make(bad)
    with pytest.raises(ValueError, match="Missing shape for feature"):
        make(None)
    with pytest.raises(ValueError, match="need to be known"):
        make([None, 2])
    assert make([2, 1]).shape == (2, 1) and make(3).shape == (3,)


def test_an_empty_default_is_refused_alike_for_batches_and_single_records() -> None:
    with pytest.raises(ValueError, match="needs 1"):
        rk.FixedLenFeature([], "int64", default_value=[])
    with pytest.raises(ValueError, match="single value"):
        rk.FixedLenSequenceFeature([], "int64", allow_missing=True, default_value=[])
    spec = {"a": rk.FixedLenSequenceFeature([], "int64", allow_missing=True, default_value=[7])}
    assert rk.parse_single_example(ex(a=[1, 2]), spec)["a"].tolist() == [1, 2]
    assert rk.parse_example([ex(a=[1, 2]), ex(b=1)], spec)["a"].tolist() == [[1, 2], [7, 7]]


def test_type_mismatch_is_an_error() -> None:
    with pytest.raises(rk.ParseError) as info:
        rk.parse_example([ex(x=1), ex(x=1.5)], {"x": rk.VarLenFeature("int64")})
    assert (info.value.key, info.value.index) == ("x", 1)
    assert "float" in str(info.value) and "int64" in str(info.value)


def test_dtype_spellings() -> None:
    for dtype in ("int64", np.int64, np.dtype("int64")):
        assert rk.FixedLenFeature([], dtype).dtype == "int64"
    for dtype in ("string", bytes, str, np.bytes_, object):
        assert rk.VarLenFeature(dtype).dtype == "string"
    assert rk.VarLenFeature(np.float32).dtype == "float32"
    with pytest.raises(TypeError):
        rk.VarLenFeature(np.int32)


def test_single_example_shapes() -> None:
    record = ex(a=[1, 2, 3], s=b"x")
    out = rk.parse_single_example(record, {"a": rk.VarLenFeature("int64"), "s": rk.FixedLenFeature([], "string")})
    assert out["a"].indices.tolist() == [[0], [1], [2]] and out["a"].dense_shape.tolist() == [3]
    assert out["s"].shape == () and out["s"].item() == b"x"
    missing = rk.parse_single_example(ex(b=1), {"a": rk.VarLenFeature("int64")})["a"]
    assert missing.indices.shape == (0, 1) and missing.dense_shape.tolist() == [0]


def test_empty_batch() -> None:
    out = rk.parse_example([], {"f": rk.FixedLenFeature([2], "float32"), "v": rk.VarLenFeature("int64")})
    assert out["f"].shape == (0, 2)
    assert out["v"].indices.shape == (0, 2) and out["v"].dense_shape.tolist() == [0, 0]


def test_fixed_len_sequence_in_parse_example() -> None:
    spec = {"x": rk.FixedLenSequenceFeature([2], "int64", allow_missing=True, default_value=-1)}
    out = rk.parse_example([ex(x=[1, 2, 5, 6]), ex(x=[5, 7]), ex(y=1)], spec)["x"]
    assert out.tolist() == [[[1, 2], [5, 6]], [[5, 7], [-1, -1]], [[-1, -1], [-1, -1]]]
    with pytest.raises(rk.ParseError, match="multiple of stride"):
        rk.parse_example([ex(x=[1, 2, 3])], spec)
    with pytest.raises(ValueError, match="allow_missing"):
        rk.parse_example([ex(x=[1])], {"x": rk.FixedLenSequenceFeature([1], "int64")})


def test_sparse_feature_sorts_and_does_not_bound_check() -> None:
    spec = {"sp": rk.SparseFeature("idx", "val", "float32", 10)}
    out = rk.parse_example([ex(idx=[7, 2, 200], val=[0.7, 0.2, 9.0]), ex(idx=[1], val=[0.1])], spec)["sp"]
    assert out.indices.tolist() == [[0, 2], [0, 7], [0, 200], [1, 1]]
    assert out.values.tolist() == pytest.approx([0.2, 0.7, 9.0, 0.1])
    assert out.dense_shape.tolist() == [2, 10]
    kept = rk.parse_example([ex(idx=[7, 2], val=[0.7, 0.2])], {"sp": rk.SparseFeature("idx", "val", "float32", 10, already_sorted=True)})
    assert kept["sp"].indices.tolist() == [[0, 7], [0, 2]]


def test_ragged_defaults_to_int32_splits() -> None:
    out = rk.parse_example([ex(v=[1, 2]), ex(w=1), ex(v=[3])], {"v": R("int64")})["v"]
    assert out.row_splits.dtype == np.int32 and out.row_splits.tolist() == [0, 2, 2, 3]
    assert out.to_list() == [[1, 2], [], [3]]


@pytest.mark.parametrize(
    "partition, values",
    [
        (R.RowLengths("p"), [2, 0, 1]),
        (R.RowSplits("p"), [0, 2, 2, 3]),
        (R.RowStarts("p"), [0, 2, 2]),
        (R.RowLimits("p"), [2, 2, 3]),
        (R.ValueRowIds("p"), [0, 0, 2]),
    ],
)
def test_ragged_partitions(partition, values) -> None:
    records = [ex(v=[1, 2, 3], p=values), ex(v=[4], p={"RowLengths": [1], "RowSplits": [0, 1], "RowStarts": [0],
                                                          "RowLimits": [1], "ValueRowIds": [0]}[type(partition).__name__])]
    out = rk.parse_example(records, {"r": R("int64", value_key="v", partitions=(partition,), row_splits_dtype="int64")})["r"]
    assert out.to_list() == [[[1, 2], [], [3]], [[4]]]
    single = rk.parse_single_example(records[0], {"r": R("int64", value_key="v", partitions=(partition,))})["r"]
    assert single.to_list() == [[1, 2], [], [3]]


def test_uniform_row_length() -> None:
    spec = {"r": R("int64", value_key="v", partitions=(R.UniformRowLength(2),))}
    assert rk.parse_single_example(ex(v=[1, 2, 3, 4]), spec)["r"].tolist() == [[1, 2], [3, 4]]
    assert rk.parse_example([ex(v=[1, 2, 3, 4]), ex(v=[5, 6])], spec)["r"].to_list() == [[[1, 2], [3, 4]], [[5, 6]]]
    with pytest.raises(rk.ParseError):
        rk.parse_example([ex(v=[1, 2, 3])], spec)


def test_trailing_uniform_partitions_are_dense_inner_dimensions() -> None:
    # TensorFlow's layout (checked against 2.21): a trailing UniformRowLength is a
    # dimension of flat_values, not a ragged level; one before another partition is.
    records = [ex(v=[1, 2, 3, 4], p=[1, 1]), ex(v=[5, 6], p=[1])]
    out = rk.parse_example(records, {"r": R("int64", value_key="v", partitions=(R.UniformRowLength(2),))})["r"]
    assert out.flat_values.shape == (3, 2) and [s.tolist() for s in out.nested_row_splits] == [[0, 2, 3]]
    out = rk.parse_example(records, {"r": R("int64", value_key="v", partitions=(R.RowLengths("p"), R.UniformRowLength(2)))})["r"]
    assert out.flat_values.shape == (3, 2) and [s.tolist() for s in out.nested_row_splits] == [[0, 2, 3], [0, 1, 2, 3]]
    out = rk.parse_example([ex(v=[1, 2, 3, 4], p=[1, 1, 1, 1])], {"r": R("int64", value_key="v", partitions=(R.UniformRowLength(2), R.RowLengths("p")))})["r"]
    assert out.flat_values.shape == (4,) and [s.tolist() for s in out.nested_row_splits] == [[0, 2], [0, 2, 4], [0, 1, 2, 3, 4]]
    out = rk.parse_example([ex(w=1)], {"r": R("float32", value_key="v", partitions=(R.UniformRowLength(2),))})["r"]
    assert out.flat_values.shape == (0, 2) and [s.tolist() for s in out.nested_row_splits] == [[0, 0]]
    single = rk.parse_single_example(records[0], {"r": R("int64", value_key="v", partitions=(R.RowLengths("p"), R.UniformRowLength(2)))})["r"]
    assert single.flat_values.shape == (2, 2) and single.row_splits.tolist() == [0, 1, 2]


def test_missing_row_splits_mean_no_rows() -> None:
    spec = {"r": R("int64", value_key="v", partitions=(R.RowSplits("p"),), row_splits_dtype="int64")}
    out = rk.parse_example([ex(w=1), ex(v=[7], p=[0, 1])], spec)["r"]
    assert [s.tolist() for s in out.nested_row_splits] == [[0, 0, 1], [0, 1]]
    # TensorFlow's single-example parser passes the missing splits on as they are.
    assert rk.parse_single_example(ex(w=1), spec)["r"].row_splits.tolist() == []
    with pytest.raises(rk.ParseError, match="row splits p are empty"):
        rk.parse_example([ex(v=[1, 2])], spec)


def test_row_splits_as_tensorflow_reads_them() -> None:
    # Checked against TensorFlow 2.21: its batch parser ignores each record's first
    # split; its single-example parser keeps it, giving splits that do not start at 0.
    spec = {"r": R("int64", value_key="v", partitions=(R.RowSplits("p"),), row_splits_dtype="int64")}
    out = rk.parse_example([ex(v=[1, 2, 3], p=[2, 1, 3]), ex(v=[4], p=[0, 1])], spec)["r"]
    assert [s.tolist() for s in out.nested_row_splits] == [[0, 2, 3], [0, 1, 3, 4]]
    with pytest.raises(rk.ParseError, match="must start at 0"):
        rk.parse_single_example(ex(v=[1, 2, 3], p=[2, 1, 3]), spec)
    # Row lengths that add up but go below zero make no RaggedTensor (TensorFlow,
    # not validating, returns one anyway).
    with pytest.raises(rk.ParseError, match="negative row length"):
        rk.parse_example([ex(v=[1, 2, 3], p=[0, 5, 3])], spec)
    with pytest.raises(rk.ParseError, match="negative row length"):
        rk.parse_example([ex(v=[1, 2, 3], p=[5, -2])], {"r": R("int64", value_key="v", partitions=(R.RowLengths("p"),))})
    with pytest.raises(rk.ParseError, match="row ids p must not be negative"):
        rk.parse_example([ex(v=[1], p=[-1])], {"r": R("int64", value_key="v", partitions=(R.ValueRowIds("p"),))})


@pytest.mark.parametrize(
    "features, message",
    [
        ({"a": rk.FixedLenFeature([], "int64"), "b": rk.SparseFeature("a", "b", "int64", 3)}, "Dense and sparse keys must not intersect"),
        ({"a": rk.FixedLenFeature([], "int64"), "b": R("int64", partitions=(R.RowLengths("a"),))}, "Dense and ragged keys must not intersect"),
        ({"i": rk.VarLenFeature("int64"), "b": R("int64", partitions=(R.RowLengths("i"),))}, "Ragged and sparse keys must not intersect"),
        ({"a": R("int64", partitions=(R.RowLengths("i"),)), "b": R("int64", partitions=(R.RowSplits("i"),), row_splits_dtype="int64")},
         "Conflicting partition type int32 vs int64 for feature i"),
    ],
)
def test_keys_in_two_roles_are_refused(features: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        rk.parse_example([], features)


def test_conflicting_types_for_one_key() -> None:
    with pytest.raises(ValueError, match="Conflicting type"):
        rk.parse_example([ex(a=1)], {"a": rk.VarLenFeature("int64"), "b": rk.SparseFeature("a", "c", "float32", 3)} | {
            "c": rk.VarLenFeature("string"), "d": rk.RaggedFeature("float32", value_key="a")})


def seq(context: dict, lists: dict) -> bytes:
    return rk.encode_sequence_example(context, lists)


def test_sequence_features() -> None:
    records = [seq({"id": 1}, {"tok": [[1, 2], [3]], "fr": [[0.5, 1.5]]}), seq({"id": 2}, {"tok": [[4]]})]
    context, lists, lengths = rk.parse_sequence_example(
        records,
        {"id": rk.FixedLenFeature([], "int64")},
        {"tok": rk.VarLenFeature("int64"), "fr": rk.FixedLenSequenceFeature([2], "float32", allow_missing=True)},
    )
    assert context["id"].tolist() == [1, 2]
    assert lists["tok"].indices.tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 0], [1, 0, 0]]
    assert lists["tok"].dense_shape.tolist() == [2, 2, 2]
    assert lists["fr"].tolist() == [[[0.5, 1.5]], [[0.0, 0.0]]] and lengths["fr"].tolist() == [1, 0]
    # A key is sparse or ragged, never both (TensorFlow's check): the ragged view in a call of its own.
    with pytest.raises(ValueError, match="Ragged and sparse keys must not intersect"):
        rk.parse_sequence_example(records, None, {"tok": rk.VarLenFeature("int64"), "rag": R("int64", value_key="tok")})
    assert rk.parse_sequence_example(records, None, {"rag": R("int64", value_key="tok")})[1]["rag"].to_list() == [[[1, 2], [3]], [[4]]]
    single_context, single_lists = rk.parse_single_sequence_example(records[0], {"id": rk.FixedLenFeature([], "int64")}, {
        "tok": rk.VarLenFeature("int64"), "fr": rk.FixedLenSequenceFeature([2], "float32")})
    assert single_context["id"].item() == 1
    assert single_lists["tok"].indices.tolist() == [[0, 0], [0, 1], [1, 0]]
    assert single_lists["fr"].shape == (1, 2)


def test_sequence_errors() -> None:
    records = [seq({}, {"tok": [[1, 2], [3]]})]
    with pytest.raises(rk.ParseError, match="required") as info:
        rk.parse_sequence_example(records, None, {"zz": rk.FixedLenSequenceFeature([1], "int64")})
    assert info.value.key == "zz"
    with pytest.raises(rk.ParseError, match="values size: 1") as info:
        rk.parse_sequence_example(records, None, {"tok": rk.FixedLenSequenceFeature([2], "int64")})
    with pytest.raises(rk.ParseError, match="Data types"):
        rk.parse_sequence_example(records, None, {"tok": rk.VarLenFeature("float32")})
    with pytest.raises(ValueError, match="must be None"):
        rk.parse_sequence_example(records, None, {"tok": rk.FixedLenSequenceFeature([2], "int64", default_value=0)})


def test_unpacked_floats_beyond_the_shape_are_refused() -> None:
    # TensorFlow 2.21's batch parser writes these past its output buffer ("double
    # free or corruption"); recordkit counts them first.
    floats = b"".join(b"\x0d" + struct.pack("<f", 1.5) for _ in range(1000))
    record = reference._len(1, reference._len(1, reference._len(1, b"c") + reference._len(2, reference._len(2, floats))))
    with pytest.raises(rk.ParseError, match="Values size: 1000 but output shape: \\[2\\]"):
        rk.parse_example([record], {"c": rk.FixedLenFeature([2], "float32", default_value=[0.0, 0.0])})


def test_sequence_context_quirks_match_tensorflow() -> None:
    # Checked against TensorFlow 2.21. Its SequenceExample parser, unlike its
    # Example parser, takes a context Feature with no kind as present and empty.
    record = rk.train.SequenceExample(context=rk.train.Features(feature={"a": rk.train.Feature()})).SerializeToString()
    with pytest.raises(rk.ParseError, match="Values size: 0"):
        rk.parse_single_sequence_example(record, {"a": rk.FixedLenFeature([], "int64", default_value=7)})
    context, _ = rk.parse_single_sequence_example(record, {"a": rk.VarLenFeature("int64")})
    assert context["a"].values.tolist() == []
    assert rk.parse_example([ex(a=rk.train.Feature())], {"a": rk.FixedLenFeature([], "int64", default_value=7)})["a"].tolist() == [7]
    # An empty batch lacks a required context feature in every record.
    with pytest.raises(rk.ParseError, match="expected 2, but found 0"):
        rk.parse_sequence_example([], {"a": rk.FixedLenFeature([2], "int64")})
    context, _, _ = rk.parse_sequence_example([], {"a": rk.FixedLenFeature([2], "int64", default_value=[1, 2])})
    assert context["a"].shape == (0, 2)


def test_parse_errors_pickle() -> None:
    import pickle

    try:
        rk.parse_example([ex(x=1.5)], {"x": rk.FixedLenFeature([], "int64")})
    except rk.ParseError as error:
        clone = pickle.loads(pickle.dumps(error))
        assert (clone.key, clone.index, str(clone)) == (error.key, error.index, str(error))
        assert isinstance(clone, ValueError)
    else:
        raise AssertionError("no error")


def test_malformed_record() -> None:
    with pytest.raises(rk.ParseError) as info:
        rk.parse_example([ex(a=1), b"\x0a\x09garbage"], {"a": rk.VarLenFeature("int64")})
    assert info.value.index == 1


def test_layouts_protobuf_allows_but_does_not_write() -> None:
    """Records read by the canonical fast path up to the first entry laid out
    otherwise, then read again by the general reader: the results must be the
    general reader's (the last entry of a key wins, fields in any order)."""

    def entry(key: bytes, value: int, value_first: bool = False) -> bytes:
        fields = [reference._len(1, key), reference._len(2, reference._len(3, reference._len(1, bytes([value]))))]
        return reference._len(1, b"".join(fields[::-1] if value_first else fields))

    spec = {"a": rk.FixedLenFeature([], "int64"), "k": rk.FixedLenFeature([], "int64")}
    canonical = reference._len(1, entry(b"a", 1) + entry(b"k", 2))
    swapped_last = reference._len(1, entry(b"a", 1) + entry(b"k", 2) + entry(b"k", 3, value_first=True))
    two_maps = reference._len(1, entry(b"a", 1) + entry(b"k", 2)) + reference._len(1, entry(b"a", 4))
    key_only = reference._len(1, entry(b"k", 5) + reference._len(1, reference._len(1, b"a"))) + reference._len(1, entry(b"a", 6))
    out = rk.parse_example([canonical, swapped_last, two_maps, key_only, canonical], spec)
    assert out["a"].tolist() == [1, 1, 4, 6, 1]
    assert out["k"].tolist() == [2, 3, 2, 5, 2]


def test_a_string_whose_length_runs_past_its_list_is_malformed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A BytesList of one value `0a 85 01` + 132 bytes: its length, 133 in two
    bytes, runs one byte past the list, and the length's first byte equals the
    bytes after it. A one-byte length read from it would make a value of them."""
    bytes_list = b"\x0a\x85\x01" + b"x" * 132
    assert len(bytes_list) - 2 == 0x85
    entry = reference._len(1, b"s") + reference._len(2, reference._len(1, bytes_list))
    record = reference._len(1, reference._len(1, entry))
    path = tmp_path / "r.tfrecord"
    path.write_bytes(reference.frame_tfrecord([record]))
    for spec in ({"s": rk.FixedLenFeature([], "string")}, {"s": rk.VarLenFeature("string")}):
        with pytest.raises(rk.ParseError):
            rk.parse_example([record], spec)
        with pytest.raises(rk.ParseError):
            rk.read_table(path, spec)
    # The same list with its length right reads as the value it holds.
    good = reference._len(1, reference._len(1, reference._len(1, b"s") + reference._len(2, reference._len(1, reference._len(1, b"x" * 133)))))
    assert rk.parse_example([good], {"s": rk.FixedLenFeature([], "string")})["s"].tolist() == [b"x" * 133]


# Short values that differ only in trailing NULs, length or one bit, around the
# 16-byte limit of the cache that lets repeated short values share one object,
# or in one byte in the middle, at each length the cache reads differently
# (under 4 bytes, under 8, up to 16).
_SHORT_VALUES = [b"", b"\x00", b"a", b"a\x00", b"a\x00\x00", b"b", b"cat", b"x" * 15 + b"\x00",
                 b"x" * 16, b"x" * 15 + b"y", b"x" * 17, b"x" * 16 + b"\x00", bytes(16), bytes(17),
                 b"ab", b"bb", b"cot", b"horse", b"hodse", b"chicken", b"chiXken", b"abcdefgh",
                 b"abcdXfgh", b"x" * 6 + b"ab" + b"y" * 6, b"x" * 6 + b"ba" + b"y" * 6]


@given(st.lists(st.sampled_from(_SHORT_VALUES) | st.binary(max_size=20), max_size=200))
def test_repeated_short_strings_parse_exactly(values: list[bytes]) -> None:
    out = rk.parse_example([ex(s=v) for v in values], {"s": rk.FixedLenFeature([], "string")})["s"]
    assert out.dtype == object and all(type(v) is bytes for v in out)
    assert out.tolist() == values


def test_a_repeated_short_string_is_one_object() -> None:
    out = rk.parse_example([ex(s=b"cat")] * 1000, {"s": rk.FixedLenFeature([], "string")})["s"]
    assert len({id(v) for v in out}) == 1


def _sequence(**lists: list) -> bytes:
    return rk.encode_sequence_example(None, {k: [np.array(step, np.int64) for step in steps] for k, steps in lists.items()})


# Expected values as TensorFlow 2.21 gives them (tests/test_tensorflow_differential.py compares live).
SEQUENCE_PARTITIONS = [
    (lambda: [rk.RaggedFeature.RowSplits("s")], [[[[1, 2], [3]], [[4]]], [[[5], [6]]]]),
    (lambda: [rk.RaggedFeature.RowLengths("l")], [[[[1], [2, 3]], [[4]]], [[[5], [6]]]]),
    (lambda: [rk.RaggedFeature.ValueRowIds("r")], [[[[1, 2], [3]], [[4]]], [[[5], [6]]]]),
    (lambda: [rk.RaggedFeature.RowLengths("l"), rk.RaggedFeature.UniformRowLength(1)],
     [[[[[1]], [[2], [3]]], [[[4]]]], [[[[5]], [[6]]]]]),
]
SEQUENCE_RECORDS = [
    _sequence(v=[[1, 2, 3], [4]], s=[[0, 2, 3], [0, 1]], l=[[1, 2], [1]], r=[[0, 0, 1], [0]]),
    _sequence(v=[[5, 6]], s=[[0, 1, 2]], l=[[1, 1]], r=[[0, 1]]),
]


@pytest.mark.parametrize("partitions, expected", SEQUENCE_PARTITIONS)
def test_ragged_partitions_on_feature_lists(partitions, expected) -> None:  # type: ignore[no-untyped-def]
    spec = {"x": rk.RaggedFeature("int64", value_key="v", partitions=partitions())}
    _, lists, _ = rk.parse_sequence_example(SEQUENCE_RECORDS, sequence_features=spec)
    assert lists["x"].to_list() == expected
    _, single = rk.parse_single_sequence_example(SEQUENCE_RECORDS[0], sequence_features=spec)
    assert single["x"].to_list() == expected[0]


def test_misaligned_partitions_on_feature_lists_are_a_parse_error() -> None:
    spec = {"x": rk.RaggedFeature("int64", value_key="v", partitions=[rk.RaggedFeature.RowSplits("s")])}
    with pytest.raises(rk.ParseError, match="not aligned: v has 2 steps, s has 1") as info:
        rk.parse_sequence_example([SEQUENCE_RECORDS[1], _sequence(v=[[1, 2, 3], [4]], s=[[0, 2, 3]])], sequence_features=spec)
    assert (info.value.key, info.value.index) == ("x", 1)
    lengths = {"x": rk.RaggedFeature("int64", value_key="v", partitions=[rk.RaggedFeature.RowLengths("l")])}
    with pytest.raises(rk.ParseError, match=r"Index: 1, step 1\. partition RowLengths covers 2 values but there are 1"):
        rk.parse_sequence_example([SEQUENCE_RECORDS[1], _sequence(v=[[1], [4]], l=[[1], [1, 1]])], sequence_features=lengths)


def test_row_ids_cannot_ask_for_unbounded_rows() -> None:
    # A 32-byte record whose row id is 2**31 asked for a 16 GiB allocation.
    spec = {"r": rk.RaggedFeature("int64", value_key="v", partitions=[rk.RaggedFeature.ValueRowIds("ids")])}
    with pytest.raises(rk.ParseError, match="MAX_ROWS_FROM_ROW_IDS"):
        rk.parse_example([ex(v=[1], ids=[1 << 31])], spec)
    assert rk.parse_example([ex(v=[1, 2], ids=[0, 2])], spec)["r"].to_list() == [[[1], [], [2]]]


def test_a_default_that_does_not_fit_its_dtype_says_which_spec_and_why() -> None:
    with pytest.raises(TypeError, match=r"FixedLenFeature\(\[\], 'int64', default_value='x'\): the default of an "
                                        r"int64 feature is a number, not 'x' \(str\)"):
        rk.FixedLenFeature([], "int64", default_value="x")
    with pytest.raises(TypeError, match=r"default_value=1.5\): cannot convert the default to int64"):
        rk.FixedLenFeature([], "int64", default_value=1.5)
    with pytest.raises(TypeError, match=r"the default of a string feature is bytes or str"):
        rk.FixedLenFeature([], "string", default_value=3)


@pytest.mark.parametrize("name, kind", [("int64", "int64"), ("int", "int64"), (int, "int64"), (np.int64, "int64"),
                                        ("float32", "float32"), ("float", "float32"), (float, "float32"),
                                        ("string", "string"), ("bytes", "string"), (str, "string"), (object, "string"),
                                        ("tf.int64", "int64")])
def test_tensorflow_and_numpy_dtype_names_are_accepted(name: object, kind: str) -> None:
    assert rk.FixedLenFeature([], name).dtype == kind
    assert rk.VarLenFeature(name).dtype == kind


@pytest.mark.parametrize("name", ["float64", "double", np.float64])
def test_float64_is_read_as_float32_with_a_warning(name: object) -> None:
    with pytest.warns(UserWarning, match="holds float32 values, so the feature is read as float32"):
        assert rk.FixedLenFeature([], name).dtype == "float32"


@pytest.mark.parametrize("name", ["int32", "bool", "uint8", "float16", "complex64", "datetime"])
def test_other_dtypes_are_refused_with_the_valid_names(name: str) -> None:
    with pytest.raises(TypeError, match=r"dtype must be int64 \(or int\), float32 \(or float; float64 and double are "
                                        r"read as float32\), string \(or bytes, str\)"):
        rk.FixedLenFeature([], name)
