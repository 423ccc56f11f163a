"""Columns to files and back: write_examples, write_ofrecords, read_examples."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recordkit as rk
from conftest import PEAK_RSS_MB

SPEC = {
    "label": rk.FixedLenFeature([], "int64"),
    "vec": rk.FixedLenFeature([3], "float32"),
    "name": rk.FixedLenFeature([], "string"),
    "tokens": rk.VarLenFeature("int64"),
}


def columns(n: int = 25) -> dict:
    rng = np.random.default_rng(4)
    return {
        "label": np.arange(n),
        "vec": rng.random((n, 3)).astype(np.float32),
        "name": np.array([f"n{i}".encode() for i in range(n)]),
        "tokens": [list(range(i % 4)) for i in range(n)],
    }


def read_all(paths, spec=SPEC, batch_size=1000) -> dict:
    records = [r for p in paths for r in rk.TFRecordReader(p)]
    return rk.parse_example(records, spec)


@pytest.mark.parametrize("compression", [None, "gzip", "zlib"])
def test_write_then_read(tmp_path: Path, compression: str | None) -> None:
    cols = columns()
    [path] = rk.write_examples(tmp_path / "data.tfrecord", cols, compression=compression)
    out = read_all([path])
    assert out["label"].tolist() == cols["label"].tolist()
    assert np.array_equal(out["vec"], cols["vec"])
    assert out["name"].tolist() == cols["name"].tolist()
    assert out["tokens"].to_dense().tolist() == [t + [0] * (3 - len(t)) for t in cols["tokens"]]
    batches = list(rk.read_examples(path, SPEC, batch_size=10))
    assert [len(b["label"]) for b in batches] == [10, 10, 5]
    assert np.concatenate([b["label"] for b in batches]).tolist() == cols["label"].tolist()


def test_rows_match_per_record_encoding(tmp_path: Path) -> None:
    cols = {"a": np.array([1, 2]), "b": np.array([[0.5, 1.5], [2.5, 3.5]], np.float32), "s": ["x", "yz"]}
    [path] = rk.write_examples(tmp_path / "d", cols)
    expected = [rk.encode_example({"a": 1, "b": [0.5, 1.5], "s": "x"}), rk.encode_example({"a": 2, "b": [2.5, 3.5], "s": "yz"})]
    assert list(rk.TFRecordReader(path)) == expected


def test_missing_rows_and_fixed_width_strings(tmp_path: Path) -> None:
    cols = {"t": [[1], None, [2, 3]], "s": np.array([b"a\x00b", b"", b"abc"])}
    [path] = rk.write_examples(tmp_path / "d", cols)
    decoded = [rk.decode_example(r) for r in rk.TFRecordReader(path)]
    assert "t" not in decoded[1] and decoded[2]["t"].tolist() == [2, 3]
    # NumPy's S dtype keeps inner NULs and drops trailing ones, as it always does.
    assert [d["s"] for d in decoded] == [[b"a\x00b"], [b""], [b"abc"]]


def test_python_strings_keep_their_trailing_nuls(tmp_path: Path) -> None:
    # A list of bytes must not go through NumPy's S dtype, which drops trailing NULs.
    for column in ([b"ab\x00", b"c"], [[b"x\x00", b"y"], [b"c", b"\x00"]], [[b"ab\x00"], [b"c", b"\x00"]]):
        [path] = rk.write_examples(tmp_path / "n.tfrecord", {"raw": column})
        decoded = [rk.decode_example(r)["raw"] for r in rk.TFRecordReader(path)]
        assert decoded == [row if isinstance(row, list) else [row] for row in column], column


def test_shards(tmp_path: Path) -> None:
    paths = rk.write_examples(tmp_path / "out" / "train.tfrecord.gz", columns(10), shards=3, compression="gzip")
    assert [os.path.basename(p) for p in paths] == [f"train-0000{i}-of-00003.tfrecord.gz" for i in range(3)]
    assert [rk.count_records(p) for p in paths] == [3, 3, 4]
    assert read_all(paths)["label"].tolist() == list(range(10))
    assert rk.shard_names("a/b.tfrecords", 2) == [os.path.join("a", "b-00000-of-00002.tfrecords"), os.path.join("a", "b-00001-of-00002.tfrecords")]


def test_errors_leave_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="rows"):
        rk.write_examples(tmp_path / "d", {"a": np.arange(3), "b": np.arange(4)})
    with pytest.raises(TypeError):
        rk.write_examples(tmp_path / "d", {"a": np.array([1 + 2j])})
    with pytest.raises(TypeError):
        rk.write_examples(tmp_path / "d", {"a": np.array([b"x", 3], dtype=object)})
    assert os.listdir(tmp_path) == []


def test_read_examples_reports_the_index_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "d"
    with rk.TFRecordWriter(path) as writer:
        writer.write_many([rk.encode_example({"x": 1})] * 30 + [rk.encode_example({"x": 1.5})])
    with pytest.raises(rk.ParseError) as info:
        list(rk.read_examples(path, {"x": rk.VarLenFeature("int64")}, batch_size=8))
    assert (info.value.key, info.value.index) == ("x", 30)


@pytest.mark.parametrize("write, target", [
    (rk.write_examples, "new/deeper/d.tfrecord"),
    (rk.write_examples, "new/deeper/d@3"),
    (rk.write_ofrecords, "new/deeper"),
])
def test_a_failed_write_leaves_no_folder_it_made(tmp_path: Path, write, target: str) -> None:
    """The row that does not fit comes after the files are opened; the folders
    made for them go with them, and a folder that was there stays."""
    columns = {"a": np.array([1, 2**64 - 1], dtype=np.uint64)}
    with pytest.raises(ValueError, match="does not fit"):
        write(tmp_path / target, columns)
    assert os.listdir(tmp_path) == []
    (tmp_path / "new").mkdir()
    with pytest.raises(ValueError, match="does not fit"):
        write(tmp_path / target, columns)
    assert os.listdir(tmp_path) == ["new"] and os.listdir(tmp_path / "new") == []
    with pytest.raises(ZeroDivisionError), rk.TFRecordWriter(tmp_path / "new/deeper/w.tfrecord") as writer:
        writer.write(b"x")
        1 / 0
    assert os.listdir(tmp_path / "new") == []
    write(tmp_path / target, {"a": np.arange(3)})
    assert os.listdir(tmp_path / "new/deeper")


def test_a_shard_that_cannot_be_opened_aborts_those_opened_before(tmp_path: Path, monkeypatch) -> None:
    """As when a set of many shards meets the limit on open files: the shards
    opened before it are aborted there, not left to the garbage collector (which
    warned, for each, that it was never closed)."""
    import gc

    from recordkit import records

    opened = []

    def open_output(target, **options):  # type: ignore[no-untyped-def]
        if len(opened) == 2:
            raise OSError(24, "Too many open files")
        opened.append(target)
        return real_open_output(target, **options)

    real_open_output = records.open_output
    monkeypatch.setattr(records, "open_output", open_output)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(OSError, match="Too many open files"):
            rk.write_examples(tmp_path / "new/t.tfrecord", {"a": np.arange(10)}, shards=4)
        gc.collect()
    assert len(opened) == 2 and os.listdir(tmp_path) == []


@pytest.mark.parametrize("source", ["numpy", "lists", "arrow"])
def test_shards_beyond_the_open_file_limit_are_written_one_at_a_time(tmp_path: Path, source: str) -> None:
    """400 shards under a limit of 64 open files: each shard's file is closed
    before the next opens, and the whole set is still renamed together."""
    if source == "arrow":
        pytest.importorskip("pyarrow")
    script = f"""
import resource, sys, numpy as np, recordkit as rk
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
columns = {{"label": np.arange(1000)}}
if "{source}" == "lists":
    columns = {{"label": list(range(1000)), "word": [b"w%d" % i for i in range(1000)]}}
elif "{source}" == "arrow":
    import pyarrow as pa
    columns = pa.table(columns)
paths = rk.write_examples(sys.argv[1], columns, shards=400)
print(len(paths))
"""
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "t.tfrecord")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["400"]
    names = sorted(os.listdir(tmp_path))
    assert len([n for n in names if n.endswith(".tfrecord")]) == 400 and not [n for n in names if ".tmp" in n]
    labels = np.concatenate([batch["label"] for batch in rk.read_examples(
        str(tmp_path / "t-*-of-00400.tfrecord"), {"label": rk.FixedLenFeature([], "int64")})])
    assert labels.tolist() == list(range(1000))


@pytest.mark.parametrize("source, spec, options, error", [
    ("missing.tfrecord", SPEC, {}, FileNotFoundError),
    ("data.tfrecord", SPEC, {"batch_size": 2.5}, TypeError),
    ("data.tfrecord", {"label": 3}, {}, TypeError),
    ("data.tfrecord", SPEC, {"compression": "lz4"}, ValueError),
])
def test_read_examples_refuses_what_it_cannot_read_at_the_call(tmp_path: Path, source, spec, options, error) -> None:
    """Not at the first batch: a generator function would raise only there."""
    rk.write_examples(tmp_path / "data.tfrecord", {"label": np.arange(3)})
    with pytest.raises(error):
        rk.read_examples(tmp_path / source, spec, **options)


def test_write_ofrecords(tmp_path: Path) -> None:
    cols = {"i32": np.arange(5, dtype=np.int32), "i64": np.arange(5), "f": np.ones(5, np.float32), "d": np.ones((5, 2)),
            "s": [b"a", b"b", b"c", b"d", b"e"]}
    paths = rk.write_ofrecords(tmp_path / "of", cols, num_parts=2)
    records = [rk.decode_ofrecord(r) for p in paths for r in rk.OFRecordReader(p)]
    assert [r["i32"].dtype for r in records[:1]] == [np.int32]
    assert [int(r["i64"][0]) for r in records] == list(range(5))
    assert records[0]["d"].dtype == np.float64 and records[0]["d"].tolist() == [1.0, 1.0]


def test_pyarrow_table(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    table = pa.table({
        "label": pa.array([1, 2, None], pa.int64()),
        "tokens": pa.array([[1, 2], [], None], pa.list_(pa.int64())),
        "name": pa.array(["a", "b", "c"]),
        "vec": pa.array([[1.0, 2.0]] * 3, pa.list_(pa.float32(), 2)),
    })
    [path] = rk.write_examples(tmp_path / "t", table)
    decoded = [rk.decode_example(r) for r in rk.TFRecordReader(path)]
    assert decoded[0]["label"].tolist() == [1] and "label" not in decoded[2]
    assert decoded[0]["tokens"].tolist() == [1, 2] and decoded[1]["tokens"].tolist() == [] and "tokens" not in decoded[2]
    assert [d["name"] for d in decoded] == [[b"a"], [b"b"], [b"c"]]
    assert decoded[1]["vec"].tolist() == [1.0, 2.0]


def test_pandas_dataframe(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"label": [1, 2, 3], "score": [0.5, 0.25, 0.125], "name": ["a", "b", "c"]})
    with pytest.warns(UserWarning, match="column 'score': float64 values are stored as float32"):
        [path] = rk.write_examples(tmp_path / "p", frame)
    out = rk.parse_example(list(rk.TFRecordReader(path)), {
        "label": rk.FixedLenFeature([], "int64"), "score": rk.FixedLenFeature([], "float32"), "name": rk.FixedLenFeature([], "string")})
    assert out["label"].tolist() == [1, 2, 3] and out["score"].tolist() == [0.5, 0.25, 0.125]
    assert out["name"].tolist() == [b"a", b"b", b"c"]


def test_pandas_columns_backed_by_arrow_or_a_mask(tmp_path: Path) -> None:
    # pandas 3's strings, ArrowDtype, nullable integers and categoricals go through
    # Arrow: a missing value (None, NaN in a string column, pd.NA) is a missing feature.
    # Sparse columns, which pyarrow does not take, as their dense values.
    pd = pytest.importorskip("pandas")
    pa = pytest.importorskip("pyarrow")
    frame = pd.DataFrame({
        "text": pd.array(["a", None, "ccc"], dtype="string"),
        "python_text": pd.array(["x", "y", None], dtype="string[python]"),
        "count": pd.array([1, None, 3], dtype="Int64"),
        "tags": pd.array([["p"], [], None], dtype=pd.ArrowDtype(pa.list_(pa.string()))),
        "plain": [b"u", b"v", b"w"],
        "kind": pd.Categorical(["cat", None, "cat"]),
        "sparse": pd.arrays.SparseArray([0, 0, 7]),  # written as its dense values
    })
    [path] = rk.write_examples(tmp_path / "p", frame)
    decoded = [{k: list(v) for k, v in rk.decode_example(r).items()} for r in rk.TFRecordReader(path)]
    assert decoded == [
        {"text": [b"a"], "python_text": [b"x"], "count": [1], "tags": [b"p"], "plain": [b"u"], "kind": [b"cat"],
         "sparse": [0]},
        {"python_text": [b"y"], "tags": [], "plain": [b"v"], "sparse": [0]},
        {"text": [b"ccc"], "count": [3], "plain": [b"w"], "kind": [b"cat"], "sparse": [7]},
    ]


def test_pd_na_is_a_missing_feature_in_lists_and_object_arrays(tmp_path: Path) -> None:
    # pandas' marker of a missing value, wherever a row may be None: in string
    # columns stored as Python objects (handed over as they are, not through
    # Arrow), in lists, in object arrays, and in rows that are NumPy arrays
    # (read by the general path).
    pd = pytest.importorskip("pandas")
    objects = np.empty(3, dtype=object)
    objects[:] = [b"x", pd.NA, b"z"]
    frame = pd.DataFrame({"text": pd.array(["a", pd.NA, "c"], dtype="string[python]")})
    columns = {
        "text": frame["text"],
        "tags": [["p"], pd.NA, ["q", "r"]],
        "objects": objects,
        "arrays": [np.array([1, 2]), pd.NA, np.array([3])],
    }
    [path] = rk.write_examples(tmp_path / "na.tfrecord", columns)
    decoded = [{k: list(v) for k, v in rk.decode_example(r).items()} for r in rk.TFRecordReader(path)]
    assert decoded == [
        {"text": [b"a"], "tags": [b"p"], "objects": [b"x"], "arrays": [1, 2]},
        {},
        {"text": [b"c"], "tags": [b"q", b"r"], "objects": [b"z"], "arrays": [3]},
    ]


def _column_from_rows(rows, start=0, stop=None):
    """One column read as writes read it (``_native._columns_from_rows``): its
    flat values, or None for the general path; its error raised."""
    from recordkit import _native

    (found,) = _native._columns_from_rows([(rows, start, stop)])
    if isinstance(found, BaseException):
        raise found
    return found


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(["int", "float", "bytes"]), st.booleans(),
       st.integers(0, 50), st.integers(400, 900))
def test_long_columns_of_list_rows_are_read_whole(seed, kind, as_objects, start, stop) -> None:
    # Rows of lists of every length, empty ones, tuples, None, a bare value,
    # read by range (the loop over rows reads a list's item array up to the
    # range's end, not the list's), give exactly the rows' values.
    rng = np.random.default_rng(seed)
    make = {"int": lambda: int(rng.integers(-5, 2**40)), "float": lambda: float(rng.random()),
            "bytes": lambda: bytes(rng.integers(0, 256, int(rng.integers(0, 20))).astype(np.uint8))}[kind]
    shapes = rng.choice(["list", "empty", "tuple", "none", "bare", "one"], 1000, p=[0.5, 0.1, 0.1, 0.1, 0.1, 0.1])
    rows = [{"list": lambda: [make() for _ in range(int(rng.integers(1, 6)))], "empty": list, "none": lambda: None,
             "tuple": lambda: (make(), make()), "bare": make, "one": lambda: [make()]}[shape]() for shape in shapes]
    found_kind, values, splits, present = _column_from_rows(_object_array(rows) if as_objects else rows, start, stop)
    read = rows[start:stop]
    listed = [[] if r is None else list(r) if isinstance(r, (list, tuple)) else [r] for r in read]
    flat = [v for r in listed for v in r]
    if kind == "bytes":
        offsets, data = values
        got = [data[a:b].tobytes() for a, b in zip(offsets[:-1], offsets[1:])]
    else:
        got = values.tolist()
    assert found_kind == {"int": "int64", "float": "float64", "bytes": "bytes"}[kind]
    assert got == flat
    assert (splits.tolist() if splits is not None else list(range(len(read) + 1))) == np.cumsum(
        [0] + [len(r) for r in listed]).tolist()
    assert (present.tolist() if present is not None else [True] * len(read)) == [r is not None for r in read]


def _found_as_lists(found):
    """What ``_columns_from_rows`` found of a column, in plain Python values (errors by type and args)."""
    if isinstance(found, BaseException):
        return type(found).__name__, found.args
    if found is None:
        return None
    kind, values, splits, present = found
    # Bit for bit (NaN is no NaN's equal as a float).
    values = (values[0].tobytes(), values[1].tobytes() if kind == "bytes" else str(values[1])) if isinstance(
        values, tuple) else (str(values.dtype), values.tobytes())
    return kind, values, None if splits is None else splits.tolist(), None if present is None else present.tolist()


_PLAIN_ROWS = {"int": lambda rng, i: int(rng.integers(-9, 2**40)), "float": lambda rng, i: float(rng.random()),
               "bytes": lambda rng, i: bytes([i % 256]) * int(rng.integers(0, 9)), "str": lambda rng, i: f"w{i % 97}"}
# Rows a read on other threads (plain memory reads, no call into Python) cannot
# take: the calling thread reads on from each, as one pass would.
_UNUSUAL_ROWS = {
    "int": [2**61, -(2**62), 2**63, 1.5, None, [], [1, 2], True, np.array([3]), "x"],
    "float": [2, None, [], [0.5, 0.25], float("nan"), 2**63, "x"],
    "bytes": ["é", "\udc80", None, float("nan"), [], [b"a", b"b"], 7, bytearray(b"x")],
    "str": ["é", "\udc80", b"raw", None, [], ["a", "b"], 7],
}


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(sorted(_PLAIN_ROWS)), st.booleans(), st.booleans(),
       st.lists(st.tuples(st.integers(0, 69_999), st.integers(0, 9)), max_size=4), st.integers(0, 3))
def test_columns_read_on_every_core_are_those_of_one_pass(seed, kind, as_objects, in_lists, unusual, cut) -> None:
    # Large columns are read on several threads, which read Python objects
    # without calls into Python and leave every other row to the calling
    # thread. For 1, 2 and 7 threads: the same values, splits, presence, and
    # the same error at the same row, wherever the unusual rows fall (at a
    # part's start or end, or none), for lists and object arrays, and ranges.
    from recordkit import _native

    rng = np.random.default_rng(seed)
    rows = [_PLAIN_ROWS[kind](rng, i) for i in range(70_000)]
    if in_lists:
        rows = [[value] for value in rows]
    for at, which in unusual:
        choices = _UNUSUAL_ROWS[kind]
        rows[at] = choices[which % len(choices)]
    start, stop = [(0, None), (1, 60_001), (16_385, 70_000), (3, 40)][cut]
    source = _object_array(rows) if as_objects else rows
    found = {}
    for threads in (1, 2, 7):
        rk.set_num_threads(threads)
        try:
            [found[threads]] = _native._columns_from_rows([(source, start, stop)])
        finally:
            rk.set_num_threads(None)
    one = _found_as_lists(found[1])
    assert _found_as_lists(found[2]) == one
    assert _found_as_lists(found[7]) == one


# Values alone in a list that mean the same as the value itself (NaN among strings
# marks a missing one, as pandas does, but not inside a list).
_UNUSUAL_VALUES = {kind: [v for v in values if v is not None and not isinstance(v, (list, np.ndarray))
                          and not (kind in ("bytes", "str") and isinstance(v, float))]
                   for kind, values in _UNUSUAL_ROWS.items()}
_UNUSUAL_VALUES["int"].append(False)


def _values_with_unusual(seed: int, kind: str, count: int, unusual: list, extra: tuple = ()) -> tuple[np.random.Generator, list]:
    """``count`` plain values of ``kind`` with, at each ``(row, which)`` of ``unusual``,
    one of the values the fast loops leave to the general step (or of ``extra``)."""
    rng = np.random.default_rng(seed)
    values = [_PLAIN_ROWS[kind](rng, i) for i in range(count)]
    choices = _UNUSUAL_VALUES[kind] + list(extra)
    for at, which in unusual:
        values[at] = choices[which % len(choices)]
    return rng, values


def _read_each(sources: list, as_objects: bool, threads: int) -> list:
    """What ``_columns_from_rows`` finds of each source, read alone on ``threads`` threads."""
    from recordkit import _native

    rk.set_num_threads(threads)
    try:
        return [_found_as_lists(_native._columns_from_rows([(_object_array(rows) if as_objects else rows, 0, None)])[0])
                for rows in sources]
    finally:
        rk.set_num_threads(None)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(sorted(_PLAIN_ROWS)), st.booleans(),
       st.lists(st.tuples(st.integers(0, 39_999), st.integers(0, 9)), max_size=4), st.sampled_from([1, 2]))
def test_rows_of_one_value_in_a_list_read_as_the_values_themselves(seed, kind, as_objects, unusual, threads) -> None:
    # [[a], [b], ...] is read by a loop of its own: the same values, and the
    # same error at the same row, as [a, b, ...], wherever values it cannot
    # take (large ints, non-ASCII str, a float among ints, a bool) fall.
    _, values = _values_with_unusual(seed, kind, 40_000, unusual)
    flat, nested = _read_each([values, [[value] for value in values]], as_objects, threads)
    assert nested == flat


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(sorted(_PLAIN_ROWS)), st.booleans(),
       st.lists(st.tuples(st.integers(0, 99_999), st.integers(0, 9)), max_size=4), st.sampled_from([1, 2]))
def test_rows_of_lists_and_tuples_read_as_their_values_flat(seed, kind, as_objects, unusual, threads) -> None:
    # Rows that are lists or tuples (of 0-5 values, or 1 in the first rows)
    # are read by a loop of their own; plain values by another. The rows give
    # the values their concatenation gives, split by row, with None rows
    # missing, and its error (or its hand-over to the general path) at the
    # row that holds the value, wherever values the loop cannot take fall.
    rng, values = _values_with_unusual(seed, kind, 100_000, unusual, extra=(None,))
    ends = np.cumsum(np.where(np.arange(30_000) < int(rng.integers(0, 100)), 1, rng.integers(0, 6, 30_000)))
    ends = ends[ends <= len(values)]
    rows = [values[a:b] for a, b in zip(np.r_[0, ends[:-1]], ends)]
    rows = [None if None in row else (tuple(row) if rng.random() < 0.3 else row) for row in rows]
    sizes = [0 if row is None else len(row) for row in rows]
    nested, flat = _read_each([rows, [v for row in rows if row is not None for v in row]], as_objects, threads)
    if flat is None or isinstance(flat[0], str) and flat[0].endswith("Error"):
        if flat is not None and flat[0] == "ValueError":  # (row, problem): the row holding the value
            at, problem = flat[1]
            flat = flat[0], (int(np.searchsorted(np.cumsum(sizes), at, side="right")), problem)
        assert nested == flat
        return
    kind_found, found, splits, present = nested
    assert (kind_found, found) == flat[:2]
    assert (splits if splits is not None else list(range(len(rows) + 1))) == np.cumsum([0] + sizes).tolist()
    assert (present if present is not None else [True] * len(rows)) == [row is not None for row in rows]


def test_columns_read_together_raise_the_first_columns_error_and_leave_the_rest_unread() -> None:
    # Several columns read at once: each column's own result, as it would be
    # alone; after a column that raises, the later ones are not read (None).
    from recordkit import _native

    good = list(range(40_000))
    bad = list(range(40_000))
    bad[33_333] = 2**64
    rk.set_num_threads(2)
    try:
        first, error, after = _native._columns_from_rows([(good, 0, None), (bad, 0, None), (good, 0, None)])
    finally:
        rk.set_num_threads(None)
    assert first[0] == "int64" and first[1].tolist() == good
    assert isinstance(error, ValueError) and error.args[0] == 33_333 and "does not fit an int64" in error.args[1]
    assert after is None


def test_a_list_row_that_breaks_the_fast_loop_is_read_again_whole() -> None:
    # Rows of lists are read in a loop for the column's kind; a row whose later
    # item is of another kind is taken back and read again by the general step
    # (ints become floats, as NumPy would make them), not counted twice.
    kind, values, splits, present = _column_from_rows([[1, 2], [3], [4, 5.5], [True], None])
    assert kind == "float64" and values.tolist() == [1, 2, 3, 4, 5.5, 1]
    assert splits.tolist() == [0, 2, 3, 5, 6, 6] and present.tolist() == [True] * 4 + [False]
    kind, (offsets, data), splits, _ = _column_from_rows([[b"a", b"bc"], (b"d", "é"), [b"x"]])
    assert kind == "bytes" and data.tobytes() == "abcdéx".encode() and offsets.tolist() == [0, 1, 3, 4, 6, 7]
    assert splits.tolist() == [0, 2, 4, 5]
    assert _column_from_rows([[b"a", b"b"], [b"c", 1]]) is None  # strings and numbers: the general path


def test_rows_that_are_numpy_arrays_keep_their_dtype(tmp_path: Path) -> None:
    # Rows given as NumPy arrays are read in Rust when they share one numeric
    # dtype, which they keep: float32 rows are no float64 (no warning), and
    # int32 rows stay int32 in an OFRecord. Rows of differing dtypes, of
    # strings, or strided, take the general path, with the same result.
    found = _column_from_rows([np.array([1.5, 2.5], np.float32), None, np.zeros((2, 2), np.float32)])
    assert found[0] == "array" and found[1][1] == np.float32 and found[2].tolist() == [0, 2, 2, 6]
    # np.array([]) is float64, and holds no value to say so: the rows with values decide.
    found = _column_from_rows([np.array([]), np.array([7], np.int32), np.array([], np.float32)])
    assert found[0] == "array" and found[1][1] == np.int32 and found[2].tolist() == [0, 0, 1, 1]
    strided = np.arange(6, dtype=np.int32)[::2]
    for rows in ([np.array([1, 2], np.int32), strided], [np.array([1, 2], np.int32), np.array([4], np.int64)],
                 [np.array([b"a"]), np.array([b"b", b"c"])]):
        assert _column_from_rows(rows) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no float64 warning
        [path] = rk.write_examples(tmp_path / "f.tfrecord", {"v": [np.array([1.5], np.float32), np.array([], np.float32)]})
    assert [list(rk.decode_example(r)["v"]) for r in rk.TFRecordReader(path)] == [[1.5], []]
    [part] = rk.write_ofrecords(tmp_path / "of", {"i": [np.array([1, -2], np.int32), strided, np.array([7], np.int32)]})
    decoded = [rk.decode_ofrecord(r)["i"] for r in rk.OFRecordReader(part)]
    assert [d.dtype for d in decoded] == [np.int32] * 3
    assert [d.tolist() for d in decoded] == [[1, -2], [0, 2, 4], [7]]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(["int64", "float32", "int32"]),
       st.lists(st.tuples(st.integers(0, 4_999), st.sampled_from(["int16", "strided", "2-D", "0-d", "empty",
                                                                  "masked", "None"])), max_size=4))
def test_rows_of_numpy_arrays_are_their_values_joined(seed, dtype, unusual) -> None:
    # Rows that are arrays of one dtype object are copied by a loop of their
    # own: the values joined, in their dtype, with splits (none while each of
    # the first rows holds one value); an empty row of any dtype adds nothing;
    # rows of another dtype, strided, or masked leave the column to the general path.
    rng = np.random.default_rng(seed)
    ones = int(rng.integers(0, 50))
    rows = [np.array(rng.integers(-9, 9, 1 if i < ones else int(rng.integers(0, 5)))).astype(dtype) for i in range(5_000)]
    for at, kind in unusual:
        rows[at] = {"int16": np.array([1, 2], np.int16), "strided": np.arange(6).astype(dtype)[::2],
                    "2-D": np.arange(6).astype(dtype).reshape(2, 3), "0-d": np.array(5).astype(dtype),
                    "empty": np.array([]), "masked": np.ma.array([1, 2], dtype=dtype), "None": None}[kind]
    found = _column_from_rows(rows)
    given = [r for r in rows if r is not None]
    if any(r.size and (r.dtype != np.dtype(dtype) or not r.flags.c_contiguous or type(r) is not np.ndarray)
           for r in given):
        assert found is None
        return
    kind, (data, found_dtype), splits, present = found
    assert kind == "array" and found_dtype == np.dtype(dtype)
    assert np.frombuffer(data.tobytes(), dtype).tolist() == [v for r in given for v in r.ravel().tolist()]
    sizes = [0 if r is None else r.size for r in rows]
    assert (splits.tolist() if splits is not None else list(range(len(rows) + 1))) == np.cumsum([0] + sizes).tolist()
    assert (present.tolist() if present is not None else [True] * len(rows)) == [r is not None for r in rows]


@pytest.mark.parametrize("shape", ["column", "rows", "2-D"])
def test_a_masked_value_is_refused_naming_its_row(tmp_path: Path, shape: str) -> None:
    # The value under a mask is not data: writing it would store what the mask
    # hides. Refused, naming the row; an array that masks nothing is written.
    columns = {
        "column": np.ma.array([1, 2, 3], mask=[0, 1, 0]),
        "rows": [np.array([4]), np.ma.array([1, 2], mask=[0, 1]), np.array([5])],
        "2-D": np.ma.array([[1, 2], [3, 4], [5, 6]], mask=[[0, 0], [0, 1], [0, 0]]),
    }[shape]
    with pytest.raises(ValueError, match="^column 'x', row 1: a masked value"):
        rk.write_examples(tmp_path / "m.tfrecord", {"x": columns})
    assert not (tmp_path / "m.tfrecord").exists()
    [path] = rk.write_examples(tmp_path / "m.tfrecord", {"x": np.ma.array([1, 2])})
    assert [list(rk.decode_example(r)["x"]) for r in rk.TFRecordReader(path)] == [[1], [2]]


def test_nan_in_a_column_of_strings_is_a_missing_feature(tmp_path: Path) -> None:
    # pandas (before 3) reads a missing string as NaN into an object column; in a
    # column of strings NaN can only mean that, as pyarrow takes it. Read in Rust
    # once the column is known to hold strings, by the general path when a NaN
    # comes first. In a column of numbers NaN stays a value.
    pd = pytest.importorskip("pandas")
    nan = float("nan")
    objects = np.empty(3, dtype=object)
    objects[:] = [np.float64("nan"), b"y", "z"]
    columns = {
        "list": ["a", nan, "c"],
        "first": [nan, b"b", b"c"],
        "objects": objects,
        "pandas": pd.Series(["p", np.nan, "r"], dtype=object),
        "numbers": [1.5, nan, 2.5],
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # float64 stored as float32
        [path] = rk.write_examples(tmp_path / "nan.tfrecord", columns)
    decoded = [rk.decode_example(r) for r in rk.TFRecordReader(path)]
    assert [{k: list(v) for k, v in d.items() if k != "numbers"} for d in decoded] == [
        {"list": [b"a"], "pandas": [b"p"]},
        {"first": [b"b"], "objects": [b"y"]},
        {"list": [b"c"], "first": [b"c"], "objects": [b"z"], "pandas": [b"r"]},
    ]
    assert np.isnan(decoded[1]["numbers"][0]) and [d["numbers"][0] for d in decoded[::2]] == [1.5, 2.5]
    kind, _, _, present = _column_from_rows(["a", nan, "c"])  # in Rust, no general path
    assert kind == "bytes" and present.tolist() == [True, False, True]


_keys = st.text("abcdefghij_", min_size=1, max_size=130)


@pytest.mark.parametrize("key_len", [1, 23, 24, 25, 121, 122, 123])
def test_strings_of_every_length_around_a_one_byte_length_match_the_general_encoder(tmp_path: Path, key_len: int) -> None:
    # Short strings take their entry's bytes from a table of prefixes where
    # the prefix fits 32 bytes (keys up to 24), and every length byte is one
    # byte while the value is under 122 bytes less the key.
    key = "k" * key_len
    values = [bytes(range(n % 256))[:n] + b"x" * max(0, n - 256) for n in range(140)]
    for name, column in (("objects", np.array(values, dtype=object)), ("cells", np.array(values, dtype="S139"))):
        [path] = rk.write_examples(tmp_path / f"{name}.tfrecord", {key: column, "n": np.arange(len(values))})
        expected = [rk.encode_example({key: bytes(v), "n": i}) for i, v in enumerate(column)]
        assert list(rk.TFRecordReader(path)) == expected, name


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 40),
    keys=st.lists(_keys, min_size=1, max_size=5, unique=True),
    seed=st.integers(0, 2**32 - 1),
    fixed_width=st.integers(1, 140),
)
def test_one_value_per_row_matches_the_general_encoder(rows: int, keys: list, seed: int, fixed_width: int) -> None:
    """Columns of one value per row take the scalar fast path in Rust; every
    row must still be the bytes ``encode_example`` (the general encoder) gives,
    whatever the key and value lengths (one- or two-byte lengths, NumPy ``S``
    cells read as one word or byte by byte)."""
    rng = np.random.default_rng(seed)
    makers = [
        lambda: rng.integers(-(2**63), 2**63 - 1, rows, dtype=np.int64, endpoint=True) >> rng.integers(0, 64, rows),
        lambda: rng.standard_normal(rows).astype(np.float32),
        lambda: np.array([rng.bytes(int(n)) for n in rng.integers(0, 300, rows)], dtype=object),
        lambda: np.array([rng.bytes(int(n)) + b"\0" * int(rng.integers(0, 2)) for n in rng.integers(0, fixed_width + 1, rows)],
                         dtype=f"S{fixed_width}"),
    ]
    cols = {key: makers[int(rng.integers(0, len(makers)))]() for key in keys}
    with tempfile.TemporaryDirectory() as folder:
        [path] = rk.write_examples(Path(folder) / "scalar.tfrecord", cols)
        written = list(rk.TFRecordReader(path))
    for row, record in enumerate(written):
        assert record == rk.encode_example({key: column[row] for key, column in cols.items()}), row


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 30),
    keys=st.lists(_keys, min_size=1, max_size=4, unique=True),
    seed=st.integers(0, 2**32 - 1),
    oneflow=st.booleans(),
)
def test_lists_and_missing_features_match_the_general_encoder(rows: int, keys: list, seed: int, oneflow: bool) -> None:
    """Columns of lists (0 to 6 values a row), rows without the feature, and
    2-D arrays take the row plan's list entries in Rust; every row must still be
    the bytes the per-record encoder gives, for Examples and OFRecords alike."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 7, rows)
    missing = rng.random(rows) < 0.3

    def rows_of(draw) -> list:
        return [None if gone else draw(int(n)) for n, gone in zip(counts, missing)]

    dtypes = [np.int64, np.float32] + ([np.int32, np.float64] if oneflow else [])
    python_float = np.float64 if oneflow else np.float32  # an Example stores float32
    # (column, the dtype each row's values are written as)
    makers = [
        lambda _: (rows_of(lambda n: (rng.integers(-(2**31), 2**31, n) << int(rng.integers(0, 33))).tolist()), np.int64),
        lambda _: (rows_of(lambda n: rng.standard_normal(n).tolist()), python_float),
        lambda dtype: (rows_of(lambda n: (rng.standard_normal(n) * 1e6).astype(dtype)), dtype),
        lambda _: (rows_of(lambda n: [rng.bytes(int(k)) for k in rng.integers(0, 300, n)]), object),
        lambda _: (rows_of(lambda n: ["é" * int(k) for k in rng.integers(0, 20, n)]), object),
        lambda dtype: ((rng.standard_normal((rows, int(rng.integers(0, 4)))) * 1e6).astype(dtype), dtype),
    ]
    cols, written_as = {}, {}
    for key in keys:
        dtype = dtypes[int(rng.integers(0, len(dtypes)))]
        maker = int(rng.integers(0, len(makers)))
        cols[key], written_as[key] = makers[maker](dtype)
        if maker in (0, 1, 3, 4) and not any(c for c in cols[key] if c is not None):
            written_as[key] = python_float  # no value to tell the kind: NumPy's default, float
    encode = rk.encode_ofrecord if oneflow else rk.encode_example
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # float64 stored as float32 in Examples
        bare = [row for row in range(rows) if all(isinstance(c, list) and c[row] is None for c in cols.values())]
        if oneflow and bare:
            # An empty OFRecord, which OneFlow cannot read: refused, nothing kept.
            with pytest.raises(ValueError, match=f"^row {bare[0]}: no column has a value"):
                rk.write_ofrecords(Path(folder) / "ds", cols)
            assert not [f for _, _, files in os.walk(folder) for f in files]
            return
        if oneflow:
            [path] = rk.write_ofrecords(Path(folder) / "ds", cols)
            written = list(rk.OFRecordReader(path))
        else:
            [path] = rk.write_examples(Path(folder) / "lists.tfrecord", cols)
            written = list(rk.TFRecordReader(path))
    assert len(written) == rows
    for row, record in enumerate(written):
        expected = {key: np.asarray(c[row], dtype=written_as[key]) for key, c in cols.items() if c[row] is not None}
        assert record == encode(expected), row


@pytest.mark.parametrize("container", ["object array", "list"])
def test_large_rows_are_encoded_in_small_chunks(tmp_path: Path, container: str) -> None:
    """Rows of 1 MB images: the encoder's buffers hold a few MB, not thousands of
    rows (the memory a write takes stays far below the size of the file). A list's
    values are copied out a slice at a time, of about 16 MB however large the rows."""
    script = PEAK_RSS_MB + f"""
import numpy as np, recordkit as rk
images = np.empty(300, dtype=object)
images[:] = [bytes([i % 251]) * (1 << 20) for i in range(300)]
if {container!r} == "list":
    images = images.tolist()
labels = np.arange(300)
base = peak_rss_mb()
rk.write_examples({str(tmp_path / "images.tfrecord")!r}, {{"image": images, "label": labels}})
print(peak_rss_mb() - base)
"""
    growth_mb = int(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout)
    assert (tmp_path / "images.tfrecord").stat().st_size > 300 << 20
    assert growth_mb < 100, f"writing 300 MB of rows took {growth_mb} MB more memory"
    decoded = [rk.decode_example(r) for r in rk.TFRecordReader(tmp_path / "images.tfrecord")]
    assert [d["label"][0] for d in decoded] == list(range(300))
    assert all(d["image"] == [bytes([i % 251]) * (1 << 20)] for i, d in enumerate(decoded))


def test_read_examples_and_count_records_take_every_source_list_files_takes(tmp_path: Path) -> None:
    paths = rk.write_examples(tmp_path / "out" / "train.tfrecord", {"id": np.arange(9)}, shards=3)
    spec = {"id": rk.FixedLenFeature([], "int64")}
    for source in (f"{tmp_path}/out", f"{tmp_path}/out/*.tfrecord", f"{tmp_path}/out/train@3", [paths[0], f"{tmp_path}/out/train-0000[12]*"]):
        ids = np.concatenate([batch["id"] for batch in rk.read_examples(source, spec)])
        assert ids.tolist() == list(range(9)), source
        assert rk.count_records(source) == 9
    with open(paths[1], "rb") as f:
        assert rk.count_records(f) == 3


def test_count_records_knows_ofrecord_parts_by_name(tmp_path: Path) -> None:
    rk.write_ofrecord_parts([b"a", b"bb", b"ccc"], tmp_path / "ds", num_parts=2)
    assert rk.count_records(tmp_path / "ds" / "part-00000") == 2
    assert rk.count_records(tmp_path / "ds") == 3
    with pytest.raises(rk.DataLossError):
        rk.count_records(tmp_path / "ds" / "part-00000", format="tfrecord")


def test_a_column_of_only_empty_lists_is_written(tmp_path) -> None:
    # NumPy makes [[], []] a (2, 0) float array: no values per row, which once divided by zero.
    path = tmp_path / "empty-lists.tfrecord"
    rk.write_examples(path, {"tags": [[], []], "x": [1, 2]})
    table = rk.read_table(path, {"tags": rk.VarLenFeature("float32"), "x": rk.FixedLenFeature([], "int64")})
    assert table.to_pylist() == [{"tags": [], "x": 1}, {"tags": [], "x": 2}]


_SCALARS = {
    "int": st.integers(-(2**63), 2**63 - 1),
    "float": st.floats(width=32, allow_nan=False),
    "bytes": st.binary(max_size=6),
    "str": st.text(max_size=4),
    # ints, bools and floats in one column: NumPy's promotion, which the fast path follows
    "number": st.one_of(st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(width=32, allow_nan=False)),
}


def _object_array(rows: list) -> np.ndarray:
    array = np.empty(len(rows), dtype=object)
    array[:] = rows  # element by element: lists stay lists, not a second axis
    return array


@given(st.sampled_from(sorted(_SCALARS)).flatmap(lambda kind: st.lists(st.one_of(
    st.none(), _SCALARS[kind], st.lists(_SCALARS[kind], max_size=3), st.tuples(_SCALARS[kind])), min_size=1, max_size=20)),
    st.booleans())
def test_python_lists_write_what_the_general_path_writes(tmp_path_factory, rows, as_objects) -> None:
    # The one-pass reader of Python lists and object arrays against the general
    # path, which takes rows given as NumPy arrays (or object arrays of strings).
    folder = tmp_path_factory.mktemp("lists")
    if not any(r not in (None, [], ()) for r in rows):
        return  # no value anywhere: no kind to compare (NumPy's empty arrays pick one of their own)

    def general(row):
        if row is None:
            return None
        values = list(row) if isinstance(row, (list, tuple)) else [row]
        if values and isinstance(values[0], (bytes, str)):
            return np.array(values, dtype=object)
        return np.array(values, dtype=np.float64 if any(isinstance(v, float) for v in rows_values) else np.int64)

    rows_values = [v for r in rows if r is not None for v in (r if isinstance(r, (list, tuple)) else [r])]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # floats stored as float32
        rk.write_examples(folder / "fast.tfrecord", {"x": _object_array(rows) if as_objects else rows,
                                                     "n": list(range(len(rows)))})
        rk.write_examples(folder / "general.tfrecord", {"x": [general(r) for r in rows], "n": list(range(len(rows)))})
    assert (folder / "fast.tfrecord").read_bytes() == (folder / "general.tfrecord").read_bytes()


@pytest.mark.parametrize("as_objects", [False, True])
def test_python_values_change_shape_midway(tmp_path, as_objects) -> None:
    # One value per row at first (no splits, no mask kept), then a list, a
    # missing row and a float: what came before is kept as it was read.
    rows = [1, 2, True, [3, 4], None, 5, 6.5, None, 7]
    with pytest.warns(UserWarning, match="'x': float64 values are stored as float32"):
        rk.write_examples(tmp_path / "x.tfrecord", {"x": _object_array(rows) if as_objects else rows})
    decoded = [rk.decode_example(r).get("x") for r in rk.TFRecordReader(tmp_path / "x.tfrecord")]
    assert [None if d is None else d.tolist() for d in decoded] == [
        [1.0], [2.0], [1.0], [3.0, 4.0], None, [5.0], [6.5], None, [7.0]]
    assert all(d is None or d.dtype == np.float32 for d in decoded)


def test_object_arrays_of_strings_read_in_one_pass(tmp_path) -> None:
    # str and bytes together in one pass; a strided array (every other row),
    # which the one-pass reader leaves to the general path; and a str with no
    # UTF-8 form, which is an error naming it, not a crash.
    strings = np.array([b"cat", "d\u00f6g", b"", "x"] * 3, dtype=object)
    assert _column_from_rows(strings) is not None
    assert _column_from_rows(strings[1::2]) is None
    for name, column, expected in (("all", strings, [[b"cat"], ["d\u00f6g".encode()], [b""], [b"x"]] * 3),
                                   ("strided", strings[1::2], [["d\u00f6g".encode()], [b"x"]] * 3)):
        rk.write_examples(tmp_path / f"{name}.tfrecord", {"s": column})
        decoded = [rk.decode_example(r)["s"] for r in rk.TFRecordReader(tmp_path / f"{name}.tfrecord")]
        assert decoded == expected, name
    with pytest.raises(ValueError, match=r"column 's', row 1: '\\ud800' has no UTF-8 form"):
        rk.write_examples(tmp_path / "bad.tfrecord", {"s": np.array(["ok", "\ud800"], dtype=object)})
    assert not (tmp_path / "bad.tfrecord").exists()


def test_ints_around_every_digit_boundary_are_read_exactly() -> None:
    # CPython keeps an int as 30-bit digits, and the one-pass reader reads ints of
    # up to two digits in place (the rest through CPython's call): both signs of
    # every size around 0, 2**30 and 2**60, as scalars, as lists and in object arrays.
    edges = [0, 1, 2**30 - 1, 2**30, 2**30 + 1, 2**60 - 1, 2**60, 2**60 + 1, 2**63 - 1]
    values = sorted({sign * edge for edge in edges for sign in (1, -1)} | {-(2**63)})
    for rows in (values, [[v] for v in values], [(v, v) for v in values], _object_array(values)):
        kind, read, _, _ = _column_from_rows(rows)
        assert kind == "int64"
        assert read.tolist() == [v for row in rows for v in (row if isinstance(row, (list, tuple)) else [row])]


@pytest.mark.parametrize("rows", [[1, [2, 3], [4, 2**64 - 1]], [1, 2, 2**64 - 1]])
def test_python_lists_name_the_row_that_does_not_fit(tmp_path, rows) -> None:
    with pytest.raises(ValueError, match=r"column 'x', row 2: value 18446744073709551615 does not fit an int64"):
        rk.write_examples(tmp_path / "x.tfrecord", {"x": rows})
    assert not (tmp_path / "x.tfrecord").exists()


@pytest.mark.parametrize("make, row", [(lambda v: v, 2), (lambda v: v.reshape(2, 2), 1),
                                       (lambda v: pytest.importorskip("pyarrow").array(v), 2)])
def test_uint64_beyond_int64_is_refused_naming_the_row_in_every_format(tmp_path, make, row) -> None:
    # Both record formats hold int64 at most: a cast would wrap 2**63 + 5 to a negative number.
    column = make(np.array([1, 2, 2**63 + 5, 3], np.uint64))
    problem = rf"^column 'x', row {row}: value 9223372036854775813 does not fit an int64$"
    with pytest.raises(ValueError, match=problem):
        rk.write_examples(tmp_path / "x.tfrecord", {"x": column})
    with pytest.raises(ValueError, match=problem):
        rk.write_ofrecords(tmp_path / "parts", {"x": column})
    assert os.listdir(tmp_path) == []  # neither the file nor the folder made for the parts


def test_python_lists_of_other_types_take_the_general_path(tmp_path) -> None:
    rows = {"a": [np.int64(1), 2], "b": [[1, 2], (3,)], "c": [True, 2], "d": [1, 2.5]}
    with pytest.warns(UserWarning, match="'d': float64 values are stored as float32"):
        rk.write_examples(tmp_path / "x.tfrecord", rows)
    decoded = [rk.decode_example(r) for r in rk.TFRecordReader(tmp_path / "x.tfrecord")]
    assert [d["a"].tolist() for d in decoded] == [[1], [2]]
    assert [d["b"].tolist() for d in decoded] == [[1, 2], [3]]
    assert [d["c"].tolist() for d in decoded] == [[1], [2]]
    assert [d["d"].tolist() for d in decoded] == [[1.0], [2.5]]


# --- slices read while the one before is written -----------------------------------


def _mixed_columns(n: int = 30) -> dict:
    # Ints that become floats at row 13; a column that no row of the first
    # slices has; lists; a NumPy and an object column; strings.
    return {
        "num": [i if i != 13 else 13.5 for i in range(n)],
        "late": [None] * 9 + [f"s{i}" for i in range(9, n)],
        "tags": [list(range(i % 3)) for i in range(n)],
        "arr": np.arange(n, dtype=np.int32),
        "obj": np.array([f"o{i}".encode() for i in range(n)], dtype=object),
        "count": list(range(n)),
    }


@pytest.mark.filterwarnings("ignore:column 'num'")
@pytest.mark.parametrize("threads", [1, 2, 7])
def test_slices_written_behind_match_the_whole_columns(tmp_path, monkeypatch, threads) -> None:
    # Written a few rows a slice, each slice read while the one before is
    # written: the same bytes as one slice, whatever the kinds found per slice
    # (the slice of ints before the float starts the write over, whole).
    from recordkit import writing

    calls: list[tuple[str, bool]] = []
    write = writing.write_slice
    monkeypatch.setattr(writing, "write_slice", lambda *a, **k: (
        calls.append((threading.current_thread().name, k.get("behind", False))), write(*a, **k))[1])
    for name, slice_rows in (("one", 10**9), ("sliced", 4)):
        monkeypatch.setattr(writing, "_WRITE_SLICE_ROWS", slice_rows)
        monkeypatch.setattr(writing, "OBJECT_SLICE_ROWS", slice_rows)
        for kind, data in (("mixed", _mixed_columns()), ("plain", {k: v for k, v in _mixed_columns().items() if k != "num"})):
            rk.set_num_threads(threads)
            try:
                rk.write_examples(tmp_path / f"{kind}-{name}.tfrecord", data, shards=2)
            finally:
                rk.set_num_threads(None)
    for kind in ("mixed", "plain"):
        for shard in ("00000", "00001"):
            one = (tmp_path / f"{kind}-one-{shard}-of-00002.tfrecord").read_bytes()
            assert one == (tmp_path / f"{kind}-sliced-{shard}-of-00002.tfrecord").read_bytes(), (kind, shard)
    decoded = [rk.decode_example(r) for r in rk.TFRecordReader(tmp_path / "mixed-sliced-00000-of-00002.tfrecord")]
    assert decoded[12]["num"].dtype == np.float32 and "late" not in decoded[0]
    # Every slice is read and lent to the writer's own thread from this one;
    # the start over, whole, writes in turn.
    assert {name for name, _ in calls} == {threading.main_thread().name}
    assert {behind for _, behind in calls} == {True, False}


@pytest.mark.parametrize("source", ["lists", "arrow", "convert"])
def test_an_ofrecord_row_without_any_value_is_refused_naming_it(tmp_path, monkeypatch, source) -> None:
    # OneFlow's reader refuses an empty OFRecord, which a row that every column
    # leaves out would be: refused before it is written, named by its row in
    # the whole input, in a later slice of the second part.
    import pyarrow as pa
    import pyarrow.parquet as pq
    from recordkit import writing

    for constant in ("_WRITE_SLICE_ROWS", "OBJECT_SLICE_ROWS"):
        monkeypatch.setattr(writing, constant, 32)
    ids = [None if i == 250 else i for i in range(300)]
    names = [None if i in (7, 250) else f"n{i}" for i in range(300)]
    message = "^row 250: no column has a value, and an OFRecord cannot be empty"
    if source == "convert":
        pq.write_table(pa.table({"id": ids, "name": names}), tmp_path / "rows.parquet")
        with pytest.raises(ValueError, match=message):
            rk.convert(tmp_path / "rows.parquet", tmp_path / "ds", destination_format="ofrecord", progress=False)
    else:
        columns = {"id": ids, "name": names}
        with pytest.raises(ValueError, match=message):
            rk.write_ofrecords(tmp_path / "ds", pa.table(columns) if source == "arrow" else columns, num_parts=2)
    assert not [f for _, _, files in os.walk(tmp_path / "ds") for f in files]


@pytest.mark.filterwarnings("ignore:column 'num'")
def test_the_rows_read_to_measure_them_are_read_again_in_the_first_slice(tmp_path, monkeypatch) -> None:
    # The first 16 rows measure the rows' size; 100 small rows fit one slice, read
    # from the first row again. A float after the measured rows makes the column
    # float in that slice, not a second kind that starts the write over.
    from recordkit import writing

    sizes: list[int] = []
    normalize = writing.normalize_items
    monkeypatch.setattr(writing, "normalize_items", lambda items, *a, **k: (
        sizes.append(len(items[0][1])), normalize(items, *a, **k))[1])
    data = {"num": [i if i != 20 else 20.5 for i in range(100)], "s": [b"v%d" % i for i in range(100)]}
    rk.write_examples(tmp_path / "x.tfrecord", data)
    assert sizes == [16, 100]
    decoded = [rk.decode_example(r) for r in rk.TFRecordReader(tmp_path / "x.tfrecord")]
    assert [d["num"][0] for d in decoded] == pytest.approx(data["num"])
    assert [d["s"][0] for d in decoded] == data["s"]
    # Measured once: larger first rows, then smaller ones, read again only once.
    sizes.clear()
    monkeypatch.setattr(writing, "_WRITE_SLICE_BYTES", 16_000)
    values = [b"x" * (500 if i < 16 else 10) for i in range(100)]
    rk.write_examples(tmp_path / "y.tfrecord", {"s": values})
    assert sizes[0] == 16 and sizes[1] > 16 and sum(sizes[1:]) == 100, sizes
    assert [rk.decode_example(r)["s"][0] for r in rk.TFRecordReader(tmp_path / "y.tfrecord")] == values
    # NumPy columns are sliced in place, not copied: by rows, however large their values.
    sizes.clear()
    rk.write_examples(tmp_path / "z.tfrecord", {"s": np.array(values, dtype="S500")})
    assert sizes == [100]
    # Python objects: small slices first (nothing is written until one is read),
    # each at most twice the one before.
    sizes.clear()
    monkeypatch.setattr(writing, "_FIRST_READ_ROWS", 8)
    monkeypatch.setattr(writing, "_WRITE_SLICE_BYTES", 16 << 20)
    rk.write_examples(tmp_path / "w.tfrecord", {"s": values})
    assert sizes == [16, 32, 64, 4]
    assert [rk.decode_example(r)["s"][0] for r in rk.TFRecordReader(tmp_path / "w.tfrecord")] == values


def test_an_error_in_a_later_slice_names_the_row_and_leaves_nothing(tmp_path, monkeypatch) -> None:
    from recordkit import writing

    monkeypatch.setattr(writing, "_WRITE_SLICE_ROWS", 4)
    monkeypatch.setattr(writing, "OBJECT_SLICE_ROWS", 4)
    with pytest.raises(ValueError, match=r"column 'x', row 10: value 18446744073709551615 does not fit an int64"):
        rk.write_examples(tmp_path / "x.tfrecord", {"x": list(range(10)) + [2**64 - 1], "y": list(range(11))})
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("columns", ["dict", "table"])
def test_a_write_that_fails_behind_stops_the_write_and_leaves_nothing(tmp_path, monkeypatch, columns) -> None:
    # A write's failure (a full disk, say) is raised here; no slice
    # is read or written after it, and the file is not left behind.
    pa = pytest.importorskip("pyarrow")
    from recordkit import writing

    monkeypatch.setattr(writing, "_WRITE_SLICE_ROWS", 4)
    monkeypatch.setattr(writing, "OBJECT_SLICE_ROWS", 4)
    write, written = writing.write_slice, []

    def fail_third(writer, normalized, start, end, schema, rows_before=0, behind=False):
        if len(written) == 2:
            raise OSError(28, "No space left on device")
        write(writer, normalized, start, end, schema, rows_before, behind)
        written.append(end - start)

    monkeypatch.setattr(writing, "write_slice", fail_third)
    data = {"x": list(range(40)), "s": [b"v"] * 40}
    with pytest.raises(OSError, match="No space left"):
        rk.write_examples(tmp_path / "x.tfrecord", data if columns == "dict" else pa.table(data))
    assert written == [4, 4] and os.listdir(tmp_path) == []


@pytest.mark.parametrize("threads", [2, 7])
def test_a_write_of_many_chunks_is_the_same_bytes_for_every_thread_count(tmp_path: Path, threads: int) -> None:
    # Runs of 16 384 rows alternately slow and quick to encode (each several
    # encoding chunks), the chunks taken by whichever thread is free, so that
    # they end out of order: written in order, the same bytes as on one thread.
    # (Written in the order they end, this fails.)
    n = 200_000
    slow = (np.arange(n) // 16_384) % 2 == 0
    sizes = np.where(slow, 40, 0)
    data = {"id": np.arange(n), "tags": [list(range(k)) for k in sizes], "blob": [bytes(8 * k) for k in sizes]}
    written = {}
    for count in (1, threads):
        rk.set_num_threads(count)
        try:
            rk.write_examples(tmp_path / f"{count}.tfrecord", data)
        finally:
            rk.set_num_threads(None)
        written[count] = (tmp_path / f"{count}.tfrecord").read_bytes()
    assert written[threads] == written[1]
    assert sum(1 for _ in rk.TFRecordReader(tmp_path / "1.tfrecord")) == n


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, a device that is always full")
@pytest.mark.parametrize("threads", [1, 2, 7])
def test_a_full_disk_under_rows_written_behind_is_raised_and_stops_the_writer(threads: int) -> None:
    # With threads, write_columns(behind=True) returns once the columns are
    # lent, and the rows' failure comes from settle; on one thread, from the
    # call itself. Either way every later call fails, naming it. The failure
    # comes at a later chunk than the first (the writer's buffer takes the
    # first): with 7 threads, encoder lanes still at work stop.
    from recordkit import _native

    rows = 200_000  # past the writer's 1 MiB buffer
    columns = [("a", "int64_list", np.arange(rows), np.arange(rows + 1), None)]
    rk.set_num_threads(threads)
    try:
        writer = _native.RecordWriter("/dev/full", name="/dev/full", format="tfrecord", compression="none")
        if threads == 1:
            with pytest.raises(OSError, match="No space left"):
                writer.write_columns(rows, columns, "tensorflow", True)
        else:
            assert writer.write_columns(rows, columns, "tensorflow", True) == rows
            with pytest.raises(OSError, match="No space left"):
                writer.settle()
        for later in (lambda: writer.write_columns(rows, columns, "tensorflow", True), writer.close):
            with pytest.raises(ValueError, match="stopped at an earlier error .*No space left"):
                later()
    finally:
        rk.set_num_threads(None)


def test_rows_written_behind_outlive_the_callers_references(tmp_path: Path) -> None:
    # The writer keeps the columns it was lent alive until their rows are
    # written, and a writer dropped with rows in flight waits for them.
    from recordkit import _native

    rows = 100_000
    expected = tmp_path / "expected.tfrecord"
    rk.write_examples(expected, {"n": np.arange(rows) * 7, "s": np.char.mod(b"v%d", np.arange(rows))})
    rk.set_num_threads(2)
    try:
        for drop_writer in (False, True):
            path = tmp_path / f"behind-{drop_writer}.tfrecord"
            writer = _native.RecordWriter(str(path), name=str(path), format="tfrecord", compression="none")
            words = np.char.mod(b"v%d", np.arange(rows))
            columns = [("n", "int64_list", np.arange(rows) * 7, np.arange(rows + 1), None),
                       ("s", "bytes_fixed", (words.view(np.uint8).reshape(-1), words.dtype.itemsize),
                        np.arange(rows + 1), None)]
            writer.write_columns(rows, columns, "tensorflow", True)
            del columns, words
            if drop_writer:
                del writer  # never closed: waits for the rows in flight, which reach the file
            else:
                writer.close()
            assert path.read_bytes() == expected.read_bytes()
    finally:
        rk.set_num_threads(None)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_writer_reusing_the_buffers_of_one_before_writes_only_its_own_rows(tmp_path: Path, threads: int) -> None:
    # Closed writers leave their encoding buffers to the next: long rows first,
    # so that the short rows after them are encoded over stale bytes.
    rk.set_num_threads(threads)
    try:
        rk.write_examples(tmp_path / "long.tfrecord", {"blob": np.full(30_000, b"x" * 200), "n": np.arange(30_000)})
        rows = 40_000
        short = {"n": np.arange(rows) * 3, "s": np.char.mod(b"w%d", np.arange(rows) % 97)}
        [path] = rk.write_examples(tmp_path / "short.tfrecord", short)
    finally:
        rk.set_num_threads(None)
    expected = [rk.encode_example({"n": int(n), "s": bytes(s)}) for n, s in zip(short["n"], short["s"])]
    assert list(rk.TFRecordReader(path)) == expected


def test_writers_in_several_threads_at_once_each_write_their_own_rows(tmp_path: Path) -> None:
    # Writers made and closed at the same time in several Python threads take
    # and leave the process's spare encoding buffers concurrently.
    def rows_of(k: int) -> dict:
        n = 20_000 + 3_000 * k
        return {"k": np.full(n, k), "i": np.arange(n), "s": np.char.mod(b"%d" + b"-" * k, np.arange(n))}

    failures: list[BaseException] = []

    def write(k: int) -> None:
        try:
            for round in range(3):
                rk.write_examples(tmp_path / f"w{k}-{round}.tfrecord", rows_of(k))
        except BaseException as error:  # raised below, on the test's thread
            failures.append(error)

    writers = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert not failures, failures
    for k in range(4):
        cols = rows_of(k)
        expected = [rk.encode_example({"i": int(i), "k": k, "s": bytes(s)}) for i, s in zip(cols["i"], cols["s"])]
        for round in range(3):
            assert list(rk.TFRecordReader(tmp_path / f"w{k}-{round}.tfrecord")) == expected, (k, round)


def test_columns_sharing_splits_are_each_checked_against_their_values(tmp_path: Path) -> None:
    # One splits array shared by several columns is scanned once; its ends
    # are still checked against each column's values.
    from recordkit import _native

    def write(columns) -> None:
        writer = _native.RecordWriter(str(tmp_path / "d"), name="d", format="tfrecord", compression="none")
        try:
            writer.write_columns(3, columns, "tensorflow", False)
        finally:
            writer.close()

    falling = np.array([0, 2, 1, 3])
    with pytest.raises(ValueError, match="row splits must rise"):
        write([("a", "int64_list", np.arange(3), falling, None), ("b", "int64_list", np.arange(3), falling, None)])
    shared = np.arange(4)
    with pytest.raises(ValueError, match=r'column "b": row splits must rise from 0 to the number of values \(2\)'):
        write([("a", "int64_list", np.arange(3), shared, None), ("b", "int64_list", np.arange(2), shared, None)])
    write([("a", "int64_list", np.arange(3), shared, None), ("b", "float_list", np.ones(3, np.float32), shared, None)])
    assert list(rk.TFRecordReader(tmp_path / "d")) == [rk.encode_example({"a": i, "b": 1.0}) for i in range(3)]


def test_rows_of_a_list_are_read_by_range_as_a_slice_would_be() -> None:
    rows = [1, 2, [3, 4], None, 5]
    for start, stop in ((0, None), (1, 3), (2, 99), (4, 2), (9, None)):
        whole = _column_from_rows(rows[start:stop])
        ranged = _column_from_rows(rows, start, stop)
        assert whole[0] == ranged[0] and all(
            (a is None and b is None) or np.array_equal(a, b) for a, b in zip(whole[1:], ranged[1:])), (start, stop)


@pytest.mark.parametrize("threads", [1, 2])
def test_batches_bounded_by_bytes_end_once_their_records_reach_the_bound(tmp_path: Path, threads: int) -> None:
    from recordkit.columnar import example_column_batches

    path = tmp_path / "sizes.tfrecord"
    sizes = [10, 10, 5000, 10, 10, 10, 9000, 9000, 10]
    rk.write_examples(path, {"v": np.array([b"x" * n for n in sizes], dtype=object)})
    rk.set_num_threads(threads)
    try:
        batches = list(example_column_batches([path], [("v", "string")], 4, max_bytes=5000))
    finally:
        rk.set_num_threads(None)
    # A batch ends with the record that takes it to 5000 bytes (records hold a few
    # bytes more than their value), or at 4 records; never empty.
    assert [rows for rows, _ in batches] == [3, 4, 1, 1]
    assert [len(v) for _, [(values, _, _)] in batches for v in values] == sizes


@pytest.mark.parametrize("threads", [1, 2, 7])
def test_counts_are_one_number_broadcast_only_where_every_record_holds_the_same(tmp_path: Path, threads: int) -> None:
    from recordkit.columnar import example_column_batches

    # 30 000 records (parsed in runs on several threads): "dense" in all of them,
    # "late" missing from one record of the second batch, "ragged" of 1 or 2 values.
    n = 30_000
    path = tmp_path / "counts.tfrecord"
    with rk.TFRecordWriter(path) as writer:
        for i in range(n):
            writer.write(rk.encode_example({"dense": [i], "late": None if i == 25_000 else [1.5],
                                            "ragged": [i] * (1 + i % 2)}))
    requests = [("dense", "int64"), ("late", "float32"), ("ragged", "int64")]
    rk.set_num_threads(threads)
    try:
        batches = list(example_column_batches([path], requests, 20_000))
    finally:
        rk.set_num_threads(None)
    assert [rows for rows, _ in batches] == [20_000, 10_000]
    (_, first), (_, second) = batches
    expected = {"dense": np.ones(n, np.int64), "late": np.ones(n, np.int64), "ragged": 1 + np.arange(n) % 2}
    expected["late"][25_000] = -1
    for k, name in enumerate(expected):
        counts = np.concatenate([first[k][1], second[k][1]])
        np.testing.assert_array_equal(counts, expected[name], err_msg=name)
    # One number broadcast (no array of a count per record) exactly where uniform says so.
    for (values, counts, uniform), broadcast in zip(first + second, [True, True, False, True, False, False]):
        assert (counts.strides == (0,)) == broadcast and (uniform == 1) == broadcast
        assert not counts.flags.writeable or not broadcast


def test_numpy_and_pandas_times_are_written_as_counts_of_their_unit(tmp_path: Path) -> None:
    # As Arrow's are: int64 counts since the epoch, with a warning. pandas' NaT is a missing
    # feature; NumPy's, with no mask to say it is missing, is an error naming its row.
    days = np.array(["1970-01-02", "2020-01-01"], "datetime64[D]")
    with pytest.warns(UserWarning) as caught:
        rk.write_examples(tmp_path / "d.tfrecord", {"d": days, "gap": days - days[0]})
    assert sorted(str(w.message).split(" values")[0] for w in caught) == [
        "column 'd': datetime64[D]", "column 'gap': timedelta64[D]"]
    assert all("are stored as int64 counts of their unit" in str(w.message) for w in caught)
    rows = [rk.decode_example(r) for r in rk.TFRecordReader(tmp_path / "d.tfrecord")]
    assert [int(r["d"][0]) for r in rows] == [1, 18262] and [int(r["gap"][0]) for r in rows] == [0, 18261]
    with pytest.raises(ValueError, match="^column 'd', row 1: NaT, which a record cannot hold"):
        rk.write_examples(tmp_path / "n.tfrecord", {"d": np.array(["2020-01-01", "NaT"], "datetime64[s]")})
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    frame = pd.DataFrame({"at": pd.to_datetime(["1970-01-01 00:00:01", None]).as_unit("s"),
                          "took": pd.to_timedelta([3, None], unit="s").as_unit("ms")})
    with pytest.warns(UserWarning) as caught:
        rk.write_examples(tmp_path / "p.tfrecord", frame)
    assert [str(w.message).split(" values")[0] for w in caught] == ["column 'at': timestamp[s]",
                                                                     "column 'took': duration[ms]"]
    rows = [rk.decode_example(r) for r in rk.TFRecordReader(tmp_path / "p.tfrecord")]
    assert [{k: v.tolist() for k, v in r.items()} for r in rows] == [{"at": [1], "took": [3000]}, {}]
    assert not (tmp_path / "n.tfrecord").exists()


def test_rows_no_feature_can_hold_are_refused_naming_the_row(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^column 'a', row 1: lists within the row's list differ in length"):
        rk.write_examples(tmp_path / "r.tfrecord", {"a": [[[1, 2], [3, 4]], [[1, 2], [3]]]})
    with pytest.raises(TypeError, match=r"^column 'a', row 2: a tf.train.Feature holds ints, floats, bytes or str, "
                                        r"not \{'x': 1\} \(dict\)"):
        rk.write_examples(tmp_path / "r.tfrecord", {"a": np.array([b"p", b"q", {"x": 1}], dtype=object)})
    with pytest.raises(TypeError, match=r"^column 'a' mixes kinds of values: strings \(first in row 0\), "
                                        r"ints \(first in row 1\)"):
        rk.write_examples(tmp_path / "r.tfrecord", {"a": [[b"p"], [3], [b"q"]]})
    assert not list(tmp_path.iterdir())


def _written(tmp_path: Path, column: object) -> list:
    path = tmp_path / "out.tfrecord"
    rk.write_examples(path, {"a": column})
    return [rk.decode_example(record).get("a") for record in rk.TFRecordReader(path)]


@pytest.mark.parametrize("column", [
    [memoryview(b"\x89PNG"), bytearray(b"ab")],
    [bytearray(b"\x89PNG"), bytearray(b"ab")],  # of unequal lengths
    [bytearray(b"\x89PNG"), b"ab"],  # mixed with bytes
    [[memoryview(b"\x89PNG")], [b"a", bytearray(b"b")]],
    np.array([memoryview(b"\x89PNG"), b"ab"], dtype=object),
])
def test_byte_buffers_are_written_as_bytes_never_as_their_byte_values(tmp_path: Path, column: object) -> None:
    first, second = _written(tmp_path, column)
    assert first == [b"\x89PNG"]
    assert b"".join(second) == b"ab"


def test_a_buffer_of_wider_items_is_refused_naming_the_row(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"column 'a', row 1: a buffer of 1-D items of 4 bytes"):
        _written(tmp_path, [b"x", memoryview(np.arange(2, dtype=np.int32))])


def test_a_column_that_mixes_kinds_names_the_first_row_of_each(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"column 'a' mixes kinds of values: ints \(first in row 0\), "
                                        r"strings \(first in row 1\), floats \(first in row 2\)"):
        _written(tmp_path, [1, "x", 2.5])


def test_subclasses_of_plain_types_are_written_as_their_base_type(tmp_path: Path) -> None:
    class Name(str):
        def encode(self, *args: object) -> bytes:  # never called: read as the str it is
            raise AssertionError

    class Count(int):
        pass

    assert _written(tmp_path, [Name("cat"), [Name("a"), "b"]]) == [[b"cat"], [b"a", b"b"]]
    assert [list(v) for v in _written(tmp_path, [Count(3), [Count(4), 5]])] == [[3], [4, 5]]
    with pytest.raises(ValueError, match=r"column 'a', row 1: value 1180591620717411303424 does not fit an int64"):
        _written(tmp_path, [Count(1), Count(1 << 70)])


@pytest.mark.parametrize("column", [["ok", "\ud800"], [["ok"], ["\ud800"]], np.array(["ok", "\ud800"])])
def test_a_string_with_no_utf8_form_is_named_by_column_and_row(tmp_path: Path, column: object) -> None:
    with pytest.raises(ValueError, match=r"column 'a', row 1: '\\ud800' has no UTF-8 form"):
        _written(tmp_path, column)
