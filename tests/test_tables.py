"""rk.read_table / rk.read_batches: Arrow from Rust's buffers, equal to parse_example's values."""

from __future__ import annotations

import warnings

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recordkit as rk
from conftest import PEAK_RSS_MB, table_rows

pa = pytest.importorskip("pyarrow")


def _write(path: Path, rows: list[dict]) -> Path:
    with rk.TFRecordWriter(path) as writer:
        writer.write_many(rk.encode_example(row) for row in rows)
    return path


def _write_records(path: Path, records: list[bytes]) -> Path:
    with rk.TFRecordWriter(path) as writer:
        writer.write_many(records)
    return path


ROWS = [
    {"id": i, "score": [0.5 * i, 1.0], "name": f"n{i}".encode(),
     "tags": np.array([b"t"] * (i % 3), object), "ids": np.arange(i % 4)}
    for i in range(50)
]
SPEC = {
    "id": rk.FixedLenFeature([], "int64"),
    "score": rk.FixedLenFeature([2], "float32"),
    "name": rk.FixedLenFeature([], "string"),
    "tags": rk.VarLenFeature("string"),
    "ids": rk.VarLenFeature("int64"),
}


def _as_lists(parsed: dict, batch: int) -> dict[str, list]:
    """parse_example's outputs as one Python value per row."""
    out = {}
    for name, value in parsed.items():
        if isinstance(value, rk.SparseArray):
            rows: list[list] = [[] for _ in range(batch)]
            for (row, _), v in zip(value.indices.tolist(), value.values.tolist()):
                rows[row].append(v)
            out[name] = rows
        else:
            out[name] = value.tolist()
    return out


@pytest.mark.parametrize("batch_size", [7, 65536])
def test_values_equal_parse_example_for_every_kind(tmp_path: Path, batch_size: int) -> None:
    path = _write(tmp_path / "t.tfrecord", ROWS)
    table = rk.read_table(path, SPEC) if batch_size == 65536 else rk.read_batches(path, SPEC, batch_size=batch_size).read_all()
    records = list(rk.TFRecordReader(path))
    expected = _as_lists(rk.parse_example(records, SPEC), len(records))
    assert table.num_rows == 50
    for name in SPEC:
        assert table.column(name).to_pylist() == expected[name], name
    assert table.schema.field("id").type == pa.int64()
    assert table.schema.field("score").type == pa.list_(pa.float32(), 2)
    assert table.schema.field("name").type == pa.large_binary()
    assert table.schema.field("tags").type == pa.large_list(pa.large_binary())


STRUCTURED = {
    "sparse": rk.SparseFeature(index_key="sp_idx", value_key="sp_val", dtype="float32", size=10),
    "grid": rk.SparseFeature(index_key=["gx", "gy"], value_key="gv", dtype="string", size=[4, 4]),
    "nested": rk.RaggedFeature("int64", value_key="nv", partitions=[rk.RaggedFeature.RowSplits("ns")]),
    "pairs": rk.RaggedFeature("string", value_key="pv", partitions=[rk.RaggedFeature.ValueRowIds("pr"),
                                                                   rk.RaggedFeature.UniformRowLength(2)]),
}


def _structured_rows(n: int) -> list[dict]:
    rows = []
    for i in range(n):
        k = i % 3
        rows.append({
            "sp_idx": np.arange(k) * 3 + 1, "sp_val": np.arange(k, dtype=np.float32) + i,
            "gx": np.arange(k) % 4, "gy": (np.arange(k) + i) % 4, "gv": np.array([b"g%d" % j for j in range(k)], object),
            "nv": np.arange(k + 1), "ns": np.array([0, 1, k + 1]),
            "pv": np.array([b"p%d" % j for j in range(2 * k)], object), "pr": np.arange(k) // 2,
        })
    return rows


def test_ragged_and_sparse_features_equal_parse_example(tmp_path: Path) -> None:
    path = _write(tmp_path / "s.tfrecord", _structured_rows(40))
    records = list(rk.TFRecordReader(path))
    expected = rk.parse_example(records, STRUCTURED)
    for batch_size in (7, 1000):
        table = rk.read_batches(path, STRUCTURED, batch_size=batch_size).read_all()
        for name in STRUCTURED:
            assert table.column(name).to_pylist() == table_rows(STRUCTURED[name], expected[name], len(records)), (name, batch_size)
    assert table.schema.field("nested").type == pa.large_list(pa.large_list(pa.int64()))
    assert table.schema.field("pairs").type == pa.large_list(pa.large_list(pa.list_(pa.large_binary(), 2)))
    # A partition that does not cover the values names the record in the file, not in the batch.
    bad = _structured_rows(20)
    bad[15]["ns"] = np.array([0, 5])
    with pytest.raises(rk.ParseError, match="Index: 15") as caught:
        rk.read_batches(_write(tmp_path / "bad.tfrecord", bad), {"nested": STRUCTURED["nested"]}, batch_size=4).read_all()
    assert caught.value.index == 15


def _sequence_records(n: int) -> list[bytes]:
    return [
        rk.encode_sequence_example(
            {"id": np.array([i]), "who": [b"w%d" % i]},
            {"tokens": [np.arange(j + i % 2) for j in range(i % 4)],
             **({"frames": [np.full(2, i, np.float32)] * (i % 3)} if i % 5 != 3 else {})},
        )
        for i in range(n)
    ]


def test_sequence_examples_give_context_columns_and_lists_of_steps(tmp_path: Path) -> None:
    records = _sequence_records(30)
    path = tmp_path / "seq.tfrecord"
    with rk.TFRecordWriter(path) as writer:
        writer.write_many(records)
    context = {"id": rk.FixedLenFeature([], "int64"), "who": rk.VarLenFeature("string")}
    lists = {"tokens": rk.VarLenFeature("int64"), "frames": rk.FixedLenSequenceFeature([2], "float32", allow_missing=True)}
    out_context, out_lists, lengths = rk.parse_sequence_example(records, context, lists)
    steps = [rk.decode_sequence_example(r)[1].get("tokens", []) for r in records]
    for batch_size in (4, 65536):
        table = rk.read_batches(path, context, sequence_features=lists, batch_size=batch_size).read_all()
        for name, spec in context.items():
            assert table.column(name).to_pylist() == table_rows(spec, out_context[name], len(records))
        assert table.column("frames").to_pylist() == table_rows(lists["frames"], out_lists["frames"], 30, lengths["frames"])
        assert table.column("tokens").to_pylist() == [[s.tolist() for s in r] for r in steps]
    assert table.schema.field("frames").type == pa.large_list(pa.list_(pa.float32(), 2))
    assert table.schema.field("tokens").type == pa.large_list(pa.large_list(pa.int64()))
    # Inferred: feature lists are lists of lists, a missing one is null.
    inferred = rk.read_table(path)
    assert inferred.column_names == ["id", "who", "frames", "tokens"]
    assert inferred.schema.field("frames").type == pa.large_list(pa.large_list(pa.float32()))
    assert inferred.column("frames").to_pylist()[:4] == [[], [[1.0, 1.0]], [[2.0, 2.0]] * 2, None]
    assert inferred.column("id").to_pylist() == list(range(30))
    # A required feature list, missing from record 3: named by its index in the file, not the batch.
    with pytest.raises(rk.ParseError, match="Index: 3. Feature list 'frames' is required") as caught:
        rk.read_batches(path, sequence_features={"frames": rk.FixedLenSequenceFeature([2], "float32")},
                        batch_size=2).read_all()
    assert caught.value.index == 3
    with pytest.raises(rk.ParseError, match="Index: 1. Number of values != expected"):
        rk.read_table(path, sequence_features={"frames": rk.FixedLenSequenceFeature([3], "float32", allow_missing=True)})
    with pytest.raises(TypeError, match="RaggedFeature feature lists, not SparseFeature"):
        rk.read_table(path, sequence_features={"tokens": rk.SparseFeature("i", "tokens", "int64", 5)})


RAGGED_LISTS = {
    # Each step partitioned as a record would be: by row splits, and by row ids with pairs.
    "nested": rk.RaggedFeature("int64", value_key="nv", partitions=[rk.RaggedFeature.RowSplits("ns")]),
    "pairs": rk.RaggedFeature("string", value_key="pv", partitions=[rk.RaggedFeature.ValueRowIds("pr"),
                                                                   rk.RaggedFeature.UniformRowLength(2)]),
    "plain": rk.RaggedFeature("float32", value_key="fv"),
}


def _ragged_sequence_records(n: int) -> list[bytes]:
    records = []
    for i in range(n):
        steps = i % 4  # records 0, 4, 8, ... have no steps; record 5 lacks the feature lists altogether
        lists = {
            "nv": [np.arange(j + 2) for j in range(steps)], "ns": [np.array([0, 1, j + 2]) for j in range(steps)],
            "pv": [[b"p%d" % k for k in range(2 * (j % 2 + 1))] for j in range(steps)],
            "pr": [np.array([0] * (j % 2 + 1)) for j in range(steps)],
            "fv": [np.full(j, i / 2, np.float32) for j in range(steps)],
        }
        records.append(rk.encode_sequence_example({"id": np.array([i])}, {} if i == 5 else lists))
    return records


def test_ragged_feature_lists_are_lists_of_steps_partitioned_as_records(tmp_path: Path) -> None:
    records = _ragged_sequence_records(23)
    path = _write_records(tmp_path / "ragged.tfrecord", records)
    _, expected, _ = rk.parse_sequence_example(records, None, RAGGED_LISTS)
    for batch_size in (4, 65536):
        table = rk.read_batches(path, sequence_features=RAGGED_LISTS, batch_size=batch_size).read_all()
        for name in RAGGED_LISTS:
            assert table.column(name).to_pylist() == expected[name].to_list(), (name, batch_size)
    assert table.column("nested").to_pylist()[2] == [[[0], [1]], [[0], [1, 2]]]
    assert table.schema.field("nested").type == pa.large_list(pa.large_list(pa.large_list(pa.int64())))
    assert table.schema.field("pairs").type == pa.large_list(
        pa.large_list(pa.large_list(pa.list_(pa.large_binary(), 2))))
    assert table.schema.field("plain").type == pa.large_list(pa.large_list(pa.float32()))
    # A partition that does not cover its step's values names the record in the file, not in the batch.
    bad = _ragged_sequence_records(23)
    bad[14] = rk.encode_sequence_example({}, {"nv": [np.arange(3)], "ns": [np.array([0, 5])]})
    with pytest.raises(rk.ParseError, match="Index: 14, step 0") as caught:
        rk.read_batches(_write_records(tmp_path / "bad.tfrecord", bad), sequence_features={"nested": RAGGED_LISTS["nested"]},
                        batch_size=4).read_all()
    assert caught.value.index == 14
    # A partition with fewer steps than the values.
    bad[14] = rk.encode_sequence_example({}, {"nv": [np.arange(3)] * 2, "ns": [np.array([0, 3])]})
    with pytest.raises(rk.ParseError, match="Index: 14. values and partitions are not aligned"):
        rk.read_batches(_write_records(tmp_path / "bad2.tfrecord", bad), sequence_features={"nested": RAGGED_LISTS["nested"]},
                        batch_size=4).read_all()


def test_ofrecords_give_their_five_kinds(tmp_path: Path) -> None:
    rows = [{"d": np.array([0.5, i], np.float64), "i": np.array([i], np.int32), "l": np.array([i << 40]),
             "f": np.array([i / 4], np.float32), "s": [b"x%d" % i]} for i in range(20)]
    del rows[3]["d"]
    folder = tmp_path / "of"
    folder.mkdir()
    for part in range(2):
        with rk.OFRecordWriter(folder / f"part-{part}") as writer:
            for row in rows[10 * part : 10 * part + 10]:
                writer.write(rk.encode_ofrecord(row))
    table = rk.read_table(folder)
    assert dict(zip(table.column_names, map(str, table.schema.types))) == {
        "d": "large_list<item: double>", "f": "float", "i": "int32", "l": "int64", "s": "large_binary"}
    assert table.column("d").to_pylist()[2:5] == [[0.5, 2.0], None, [0.5, 4.0]]
    assert table.column("i").to_pylist() == list(range(20))
    assert table.column("l").to_pylist() == [i << 40 for i in range(20)]
    spec = {"l": rk.FixedLenFeature([], "int64"), "s": rk.FixedLenFeature([], "string"), "f": rk.VarLenFeature("float32")}
    by_spec = rk.read_table(folder, spec)
    assert by_spec.column("s").to_pylist() == [b"x%d" % i for i in range(20)]
    assert by_spec.column("f").to_pylist() == [[i / 4] for i in range(20)]
    # Field 3 is double_list in an OFRecord: the same bytes read as TensorFlow's int64_list are a type error.
    with pytest.raises(rk.ParseError, match="Data types don't match. Data type: double but expected type: int64"):
        rk.read_table(folder, {"d": rk.VarLenFeature("int64")})
    with pytest.raises(ValueError, match="no feature lists"):
        rk.read_table(folder, sequence_features={"d": rk.VarLenFeature("float32")})


def test_records_without_columns_are_still_rows(tmp_path: Path) -> None:
    # Found by the fuzzer: with no column to read, the table had no rows either.
    path = tmp_path / "empty-examples.tfrecord"
    with rk.TFRecordWriter(path) as writer:
        writer.write_many([b""] * 5)
    assert rk.read_table(path).num_rows == 5
    assert [b.num_rows for b in rk.read_batches(path, batch_size=2)] == [2, 2, 1]
    with rk.OFRecordWriter(tmp_path / "part-0") as writer:
        writer.write(rk.encode_example({"label": 1}))  # an Example as an OFRecord: a feature with no kind
    assert rk.read_table(tmp_path / "part-0").num_rows == 1


def test_defaults_fill_missing_fixed_features_and_errors_match_parse_example(tmp_path: Path) -> None:
    rows = [{"x": 1, "s": b"a"}, {}, {"x": 3, "s": b"c"}]
    path = _write(tmp_path / "t.tfrecord", [{k: v for k, v in r.items()} for r in rows])
    spec = {"x": rk.FixedLenFeature([], "int64", default_value=-1),
            "s": rk.FixedLenFeature([], "string", default_value=b"?"),
            "v": rk.FixedLenFeature([2], "float32", default_value=[9.0, 8.0])}
    table = rk.read_table(path, spec)
    assert table.column("x").to_pylist() == [1, -1, 3]
    assert table.column("s").to_pylist() == [b"a", b"?", b"c"]
    assert table.column("v").to_pylist() == [[9.0, 8.0]] * 3
    with pytest.raises(rk.ParseError, match="Feature: x .* is required") as caught:
        rk.read_table(path, {"x": rk.FixedLenFeature([], "int64")})
    assert caught.value.index == 1
    with pytest.raises(rk.ParseError, match="Values size: 1 but output shape: \\[2\\]"):
        rk.read_table(path, {"x": rk.FixedLenFeature([2], "int64", default_value=[0, 0])})


def test_inferred_schema_is_stable_when_the_first_records_lack_a_feature(tmp_path: Path) -> None:
    rows = [{"id": i} for i in range(30)] + [
        {"id": i, "late": i * 2, "words": np.array([b"a", b"b"][: i % 3], object)} for i in range(30, 60)
    ]
    path = _write(tmp_path / "t.tfrecord", rows)
    reader = rk.read_batches(path, batch_size=8)  # several batches: the type must not change between them
    batches = list(reader)
    assert len({b.schema for b in batches}) == 1
    table = pa.Table.from_batches(batches)
    assert table.schema.field("id").type == pa.int64()
    assert table.schema.field("late").type == pa.int64()  # one value wherever present: a scalar
    assert table.column("late").to_pylist() == [None] * 30 + [i * 2 for i in range(30, 60)]
    assert table.column("words").to_pylist() == [None] * 30 + [[b"a", b"b"][: i % 3] for i in range(30, 60)]


def test_a_record_breaking_the_inferred_type_names_the_feature_record_and_fix(tmp_path: Path) -> None:
    rows = [{"x": i} for i in range(20)] + [{"x": [1, 2]}]
    path = _write(tmp_path / "t.tfrecord", rows)
    with pytest.raises(rk.ParseError, match=r"Key: x, Index: 20\..*VarLenFeature") as caught:
        rk.read_table(path, infer_from=10)
    assert caught.value.key == "x" and caught.value.index == 20 and str(path) in str(caught.value)
    assert rk.read_table(path, {"x": rk.VarLenFeature("int64")}).column("x").to_pylist()[-1] == [1, 2]
    # Another kind than the sample's: named with the file, and the way to read the rest.
    path = _write(tmp_path / "k.tfrecord", [{"x": i, "y": i} for i in range(20)] + [{"x": b"s", "y": 20}])
    with pytest.raises(rk.ParseError, match=rf"^{re.escape(str(path))}: Key: x, Index: 20\. Data types don't match.*"
                                            r"first 10 records reads 'x' as int64.*leave it out with columns=\)$"):
        rk.read_table(path, infer_from=10)
    assert rk.read_table(path, infer_from=10, columns=["y"]).column("y").to_pylist() == list(range(21))


def test_utf8_strings_and_invalid_utf8_named(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.tfrecord", [{"s": "héllo"}, {"s": b"ok"}, {"s": b"\xff\xfe"}])
    spec = {"s": rk.FixedLenFeature([], "string")}
    with pytest.raises(rk.ParseError, match=r"Key: s, Index: 2\. .*not valid UTF-8"):
        rk.read_table(path, spec, strings="utf8")
    good = rk.read_table(_write(tmp_path / "g.tfrecord", [{"s": "héllo"}, {"s": b"ok"}]), spec, strings="utf8")
    assert good.schema.field("s").type == pa.large_string()
    assert good.column("s").to_pylist() == ["héllo", "ok"]
    assert rk.read_table(path, spec, columns=["s"]).column("s").to_pylist()[2] == b"\xff\xfe"  # binary: as stored


def test_unsupported_specs_and_unknown_columns_are_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.tfrecord", ROWS[:2])
    with pytest.raises(TypeError, match="FixedLenSequenceFeature"):
        rk.read_table(path, {"r": rk.FixedLenSequenceFeature([], "int64", allow_missing=True)})
    with pytest.raises(ValueError, match="not in the spec"):
        rk.read_table(path, SPEC, columns=["nope"])


def test_pandas_from_the_table(tmp_path: Path) -> None:
    pytest.importorskip("pandas")
    path = _write(tmp_path / "t.tfrecord", ROWS)
    frame = rk.read_table(path, {"id": SPEC["id"], "name": SPEC["name"]}).to_pandas()
    assert frame["id"].tolist() == list(range(50)) and frame["name"][3] == b"n3"


_STREAM = PEAK_RSS_MB + textwrap.dedent(
    """
    import sys
    import pyarrow.compute
    import recordkit as rk, recordkit.tables  # imported first: modules are not what is measured
    spec = {"blob": rk.FixedLenFeature([], "string"), "id": rk.FixedLenFeature([], "int64")}
    before = peak_rss_mb()
    rows, at_ten = 0, None
    for i, batch in enumerate(rk.read_batches(sys.argv[1], spec, batch_size=500)):
        rows += batch.num_rows
        at_ten = peak_rss_mb() if i == 10 else at_ten
    print(rows, peak_rss_mb() - before, peak_rss_mb() - at_ten)
    """
)


def test_streaming_memory_is_bounded_by_the_batch(tmp_path: Path) -> None:
    path = tmp_path / "big.tfrecord"
    blob = np.random.default_rng(0).bytes(20_000)
    with rk.TFRecordWriter(path) as writer:  # 10 000 records of 20 KB: 200 MB, 40 batches of 10 MB
        for i in range(10_000):
            writer.write(rk.encode_example({"blob": blob, "id": i}))
    out = subprocess.run([sys.executable, "-c", _STREAM, str(path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows, grown_mb, after_ten_batches_mb = map(int, out.stdout.split())
    assert rows == 10_000
    # A few batch-sized buffers (with reading ahead: the batch Python holds, the one
    # the worker has ready, the one it is making) and up to 16 MiB of mapped pages not
    # yet released, and nothing that grows with the file: the last 30 batches add next
    # to nothing. Measured: 77 MB on one thread, 96 MB reading ahead.
    assert grown_mb < 120, f"peak RSS grew {grown_mb} MB while streaming 200 MB"
    assert after_ten_batches_mb < 25, f"peak RSS grew {after_ten_batches_mb} MB over the last 150 MB of the file"


def test_polars_and_duckdb_take_the_arrow_directly(tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    duckdb = pytest.importorskip("duckdb")
    path = _write(tmp_path / "t.tfrecord", ROWS)
    spec = {"id": SPEC["id"], "name": SPEC["name"], "ids": SPEC["ids"]}
    frame = pl.from_arrow(rk.read_table(path, spec))
    assert frame["id"].to_list() == list(range(50)) and frame["ids"][5].to_list() == [0]
    # DuckDB scans the stream of record batches as it arrives.
    stream = rk.read_batches(path, spec, batch_size=16)  # noqa: F841 - DuckDB finds it by its name
    (total, longest), = duckdb.sql("SELECT sum(id), max(len(ids)) FROM stream").fetchall()
    assert (total, longest) == (sum(range(50)), 3)
    # And back: polars -> TFRecord -> read_table gives the same columns.
    rk.write_examples(tmp_path / "back.tfrecord", frame.select("id", "name").to_arrow())
    again = rk.read_table(tmp_path / "back.tfrecord", {"id": SPEC["id"], "name": SPEC["name"]})
    assert again.column("id").to_pylist() == frame["id"].to_list()
    assert again.column("name").to_pylist() == frame["name"].to_list()


def test_parquet_to_tfrecord_to_read_table_gives_the_table_back(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    original = pa.table({
        "id": pa.array([1, None, 3, 4], pa.int64()),
        "score": pa.array([0.5, 1.5, None, -2.0], pa.float32()),
        "tokens": pa.array([[1, 2], None, [], [7]], pa.large_list(pa.int64())),
        "blob": pa.array([b"\x00\xff", b"", None, b"x"], pa.large_binary()),
        "text": pa.array(["héllo", None, "", "z"], pa.large_string()),
        "words": pa.array([["a"], ["b", "c"], None, []], pa.large_list(pa.large_string())),
    })
    pq.write_table(original, tmp_path / "in.parquet")
    rk.convert(tmp_path / "in.parquet", tmp_path / "out.tfrecord")
    text_columns = ["id", "score", "tokens", "text", "words"]
    back = rk.read_table(tmp_path / "out.tfrecord", strings="utf8", columns=text_columns)
    for name in text_columns:
        assert back.column(name).to_pylist() == original.column(name).to_pylist(), name
    blob = rk.read_table(tmp_path / "out.tfrecord", columns=["blob"]).column("blob").to_pylist()
    assert blob == [b"\x00\xff", b"", None, b"x"]


def test_write_examples_takes_every_arrow_string_form_without_python_objects(tmp_path: Path) -> None:
    words = ["a", "", "héllo", None]
    chunked = pa.chunked_array([pa.array(["x", "y"]), pa.array([None, "z"])])
    table = pa.table({
        "string": pa.array(words, pa.string()),
        "large_string": pa.array(words, pa.large_string()),
        "binary": pa.array([w.encode() if w is not None else None for w in words], pa.binary()),
        "string_view": pa.array(words, pa.string_view()),
        "dictionary": pa.array(words).dictionary_encode(),
        "chunked": chunked,
        "lists": pa.array([["p", "q"], [], None, ["r"]], pa.list_(pa.string())),
        "fixed": pa.array([["a", "b"]] * 4, pa.list_(pa.large_binary(), 2)),
        "sliced": pa.array(["s0", "s1", "s2", "s3", "s4", "s5"]).slice(2, 4),
        "fixed_size_binary": pa.array([b"ab", b"cd", None, b"ef"], pa.binary(2)),  # hashes, UUIDs
        "fixed_size_binary_lists": pa.array([[b"ab"], [], [b"cd", b"ef"], None], pa.list_(pa.binary(2))),
    })
    rk.write_examples(tmp_path / "t.tfrecord", table)
    back = rk.read_table(tmp_path / "t.tfrecord", strings="utf8")
    def text(value: object) -> object:
        if isinstance(value, list):
            return [text(v) for v in value]
        return value.decode() if isinstance(value, bytes) else value

    for name in table.column_names:
        assert back.column(name).to_pylist() == text(table.column(name).to_pylist()), name
    # Polars frames, DuckDB relations and record batch readers go in as they are.
    pl = pytest.importorskip("polars")
    duckdb = pytest.importorskip("duckdb")
    frame = pl.DataFrame({"w": ["a", "bb"], "n": [1, 2]})
    for source in (frame, duckdb.sql("SELECT * FROM frame"), pa.table(frame.to_arrow()).to_reader()):
        rk.write_examples(tmp_path / "p.tfrecord", source)
        assert rk.read_table(tmp_path / "p.tfrecord", strings="utf8").to_pydict() == {"n": [1, 2], "w": ["a", "bb"]}


def test_tables_read_with_fixed_shapes_are_written_back_as_they_were_read(tmp_path: Path) -> None:
    # read_table gives FixedLenFeature([2, 2]) and a RaggedFeature ending in UniformRowLength as
    # fixed-size lists within lists: written back, they are the records they were read from.
    path = tmp_path / "m.tfrecord"
    rk.write_examples(path, {"m": np.arange(12).reshape(3, 2, 2), "r": [[1, 2, 3, 4], [], [5, 6]]})
    table = rk.read_table(path, {"m": rk.FixedLenFeature([2, 2], "int64"),
                                 "r": rk.RaggedFeature("int64", partitions=[rk.RaggedFeature.UniformRowLength(2)])})
    assert pa.types.is_fixed_size_list(table.schema.field("m").type.value_type)
    rk.write_examples(tmp_path / "back.tfrecord", table)
    assert (tmp_path / "back.tfrecord").read_bytes() == path.read_bytes()


def test_every_arrow_list_layout_is_written_row_by_row(tmp_path: Path) -> None:
    # Null rows of fixed-size lists (their values left out), list views whose ranges go back
    # and skip values, fixed-size lists within lists, and a table sliced past its first rows.
    view = pa.ListViewArray.from_arrays([3, 0, 1, 0], [1, 3, 0, 0], pa.array([1, 2, 3, 4]),
                                        mask=pa.array([False, False, True, False]))
    table = pa.table({
        "fixed": pa.array([[1, 2], None, [3, 4], [5, 6]], pa.list_(pa.int64(), 2)),
        "words": pa.array([["x", "y"], None, ["z", "w"], ["v", "u"]], pa.list_(pa.string(), 2)),
        "grid": pa.array([[[1, 2], [3, 4]], None, [[5, 6], [7, 8]], [[9, 9], [9, 9]]],
                         pa.list_(pa.list_(pa.int64(), 2), 2)),
        "pairs": pa.array([[[0.5, 1.5]], [], None, [[2.5, 3.5], [4.5, 5.5]]], pa.large_list(pa.list_(pa.float32(), 2))),
        "view": view,
    })
    expected = [
        {"fixed": [1, 2], "words": [b"x", b"y"], "grid": [1, 2, 3, 4], "pairs": [0.5, 1.5], "view": [4]},
        {"pairs": [], "view": [1, 2, 3]},
        {"fixed": [3, 4], "words": [b"z", b"w"], "grid": [5, 6, 7, 8]},
        {"fixed": [5, 6], "words": [b"v", b"u"], "grid": [9, 9, 9, 9], "pairs": [2.5, 3.5, 4.5, 5.5], "view": []},
    ]
    for start in (0, 1):
        rk.write_examples(tmp_path / "l.tfrecord", table.slice(start))
        rows = [{k: list(v) for k, v in rk.decode_example(r).items()} for r in rk.TFRecordReader(tmp_path / "l.tfrecord")]
        assert rows == expected[start:], start


@pytest.mark.parametrize("column, message", [
    (pa.array([[[1, 2], [3]], [[4]]]), r"list<item: list<item: int64>> holds lists of varying length within a row.*"
                                       r"RaggedFeature"),
    (pa.array([[[1]]], pa.large_list(pa.large_list(pa.int64()))), r"large_list<.*> holds lists of varying length"),
    (pa.array([{"x": 1}, {"x": 2}]), r"Arrow struct<x: int64> values cannot be stored.*Table.flatten\(\)"),
    (pa.array([[{"x": 1}]]), "Arrow struct<x: int64> values cannot be stored"),
    (pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64())),
     "Arrow map<string, int64> values cannot be stored.*keys and its values as list columns"),
    (pa.array([1, 2], pa.decimal128(5, 2)), r"Arrow decimal128\(5, 2\) values cannot be stored.*cast the column"),
])
def test_arrow_values_no_feature_holds_are_refused_naming_their_type(tmp_path: Path, column, message) -> None:
    for source in (pa.table({"a": column, "n": pa.array(range(len(column)))}),
                   pa.table({"a": column}).to_reader()):
        with pytest.raises(TypeError, match=f"^column 'a': {message}"):
            rk.write_examples(tmp_path / "x.tfrecord", source)
        assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("column, message", [
    (pa.array([[[1, 2], [3]], [[4]]]), r"list<element: list<element: int64>> holds lists of varying length"),
    (pa.array([{"x": 1}, {"x": 2}]), r"Arrow struct<x: int64> values cannot be stored.*Table.flatten\(\)"),
    (pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64())), "Arrow map<string, int64.*> values cannot be stored"),
    (pa.array([1, 2], pa.decimal128(5, 2)), r"Arrow decimal128\(5, 2\) values cannot be stored.*cast the column"),
])
def test_convert_refuses_the_parquet_columns_write_examples_refuses_alike(tmp_path: Path, column, message) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"n": pa.array(range(len(column))), "a": column}), tmp_path / "in.parquet")
    with pytest.raises(TypeError, match=f"^column 'a': {message}"):
        rk.convert(tmp_path / "in.parquet", tmp_path / "out.tfrecord")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]


def test_convert_writes_the_parquet_columns_write_examples_writes(tmp_path: Path) -> None:
    # Parquet keeps what read_table gives for FixedLenFeature([2, 2]), fixed-size binary
    # (hashes, UUIDs) and a column of nulls only: converted, they are write_examples' records.
    table = pa.table({
        "grid": pa.array([[[1, 2], [3, 4]], [[5, 6], [7, 8]], None], pa.list_(pa.list_(pa.int64(), 2), 2)),
        "digest": pa.array([b"\x00" * 16, None, b"\xff" * 16], pa.binary(16)),
        "digests": pa.array([[b"ab", b"cd"], [], None], pa.list_(pa.binary(2))),
        "nothing": pa.nulls(3),
    })
    pytest.importorskip("pyarrow.parquet").write_table(table, tmp_path / "in.parquet")
    rk.convert(tmp_path / "in.parquet", tmp_path / "converted.tfrecord")
    rk.write_examples(tmp_path / "written.tfrecord", table)
    assert (tmp_path / "converted.tfrecord").read_bytes() == (tmp_path / "written.tfrecord").read_bytes()
    assert rk.read_table(tmp_path / "converted.tfrecord").to_pylist() == [
        {"grid": [1, 2, 3, 4], "digest": b"\x00" * 16, "digests": [b"ab", b"cd"]},
        {"grid": [5, 6, 7, 8], "digest": None, "digests": []},
        {"grid": None, "digest": b"\xff" * 16, "digests": None},
    ]


def test_arrow_times_are_written_as_counts_of_their_unit_with_a_warning(tmp_path: Path) -> None:
    table = pa.table({"at": pa.array([0, None, 86_400], pa.timestamp("s")),
                      "days": pa.array([[1, 2], [], None], pa.list_(pa.date32()))})
    with pytest.warns(UserWarning) as caught:
        rk.write_examples(tmp_path / "t.tfrecord", table)
    assert [str(w.message) for w in caught] == [
        f"column {name!r}: {kind} values are stored as int64 counts of their unit (tf.train.Example has no time type)"
        for name, kind in (("at", "timestamp[s]"), ("days", "date32[day]"))]
    rows = [rk.decode_example(r) for r in rk.TFRecordReader(tmp_path / "t.tfrecord")]
    assert [list(r.get("at", [])) for r in rows] == [[0], [], [86_400]]
    assert [list(r["days"]) if "days" in r else None for r in rows] == [[1, 2], [], None]


def test_arguments_that_would_read_nothing_or_crash_are_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "a.tfrecord", ROWS[:5])
    for bad in (0, -3):  # a schema inferred from no record has no column: every value would be dropped
        with pytest.raises(ValueError, match=f"^infer_from must be at least 1, not {bad}"):
            rk.read_table(path, infer_from=bad)
    with pytest.raises(ValueError, match="^limit must be at least 1"):
        rk.infer_schema(path, limit=0)
    message = r"^features must be a mapping of feature name to spec, e.g. .*, not list$"
    for read in (lambda: rk.read_table(path, ["id"]), lambda: rk.read_batches(path, ["id"]),
                 lambda: next(iter(rk.read_examples(path, ["id"]))), lambda: rk.parse_example([], ["id"]),
                 lambda: rk.Dataset(path, features=["id"])):
        with pytest.raises(TypeError, match=message):
            read()
    with pytest.raises(TypeError, match="^sequence_features must be a mapping .* not tuple$"):
        rk.read_table(path, sequence_features=("id",))
    with pytest.raises(TypeError, match="^context_features must be a mapping .* not list$"):
        rk.parse_sequence_example([], context_features=["id"])
    # A batch size that is not a positive integer, refused before reading starts (a float
    # failed inside the first batch, with Python's own message).
    spec = {"id": rk.FixedLenFeature([], "int64")}
    for bad, error, message in ((2.5, TypeError, "an integer, not float 2.5"), (True, TypeError, "an integer, not bool"),
                                (0, ValueError, "at least 1, not 0")):
        for read in (lambda: rk.read_batches(path, batch_size=bad), lambda: rk.Dataset(path).batch(bad),
                     lambda: next(rk.read_examples(path, spec, batch_size=bad))):
            with pytest.raises(error, match=f"^batch_size must be {message}"):
                read()
    assert rk.read_batches(path, batch_size=np.int64(2)).read_all().num_rows == 5
    # A lone column name, whose letters would be read as names, and a name asked for twice.
    with pytest.raises(TypeError, match=r"^columns must be a list of feature names, e.g. \['id'\], not a single name"):
        rk.read_table(path, columns="id")
    with pytest.raises(ValueError, match=r"^columns names \['id'\] more than once"):
        rk.read_table(path, spec, columns=["id", "id"])


def test_bad_string_offsets_are_refused_by_the_encoder() -> None:
    from recordkit import _native

    with pytest.raises(ValueError, match="do not lie within"):
        _native.encode_feature("bytes_offsets", (np.array([0, 5], np.int64), np.zeros(3, np.uint8)))
    with pytest.raises(ValueError, match="do not lie within"):
        _native.encode_feature("bytes_offsets", (np.array([2, 1], np.int64), np.zeros(3, np.uint8)))
    encoded = _native.encode_feature("bytes_offsets", (np.array([0, 1, 3], np.int64), np.frombuffer(b"abc", np.uint8)))
    assert _native.decode_feature(encoded) == ("bytes_list", [b"a", b"bc"])


_WRITE_STREAM = PEAK_RSS_MB + textwrap.dedent(
    """
    import sys
    import numpy as np
    import pyarrow as pa
    import recordkit as rk
    # Every batch shares one 10 MB buffer of 500 values of 20 KB, so making the
    # batches costs nothing and what is measured is the writer's own memory.
    data = pa.py_buffer(b"x" * 20_000 * 500)
    offsets = pa.py_buffer(np.arange(0, 20_000 * 501, 20_000, dtype=np.int32))
    def batches(n):  # n batches of 500 rows (10 MB each), made as they are asked for
        for b in range(n):
            blob = pa.Array.from_buffers(pa.binary(), 500, [None, offsets, data])
            yield pa.record_batch({"blob": blob, "id": pa.array(np.arange(b * 500, b * 500 + 500))})
    schema = pa.schema([("blob", pa.binary()), ("id", pa.int64())])
    path, shards, n = sys.argv[1], None if sys.argv[2] == "0" else int(sys.argv[2]), int(sys.argv[3])
    before = peak_rss_mb()
    paths = rk.write_examples(path, pa.RecordBatchReader.from_batches(schema, batches(n)), shards=shards)
    print(len(paths), peak_rss_mb() - before)
    """
)


@pytest.mark.parametrize("shards", [0, 3])
def test_writing_a_stream_holds_one_batch_at_a_time(tmp_path: Path, shards: int) -> None:
    grown = {}
    for batches in (20, 40):  # 200 MB, then 400 MB
        folder = tmp_path / str(batches)
        out = subprocess.run([sys.executable, "-c", _WRITE_STREAM, str(folder / "w.tfrecord"), str(shards), str(batches)],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        files, grown[batches] = map(int, out.stdout.split())
        assert files == max(shards, 1)
    # A few batch-sized buffers (the batch, its encoding, for shards the staging file's
    # pages and records being split) and nothing that grows with the stream.
    assert grown[20] < 150, f"peak RSS grew {grown[20]} MB while writing a 200 MB stream"
    assert grown[40] - grown[20] < 15, f"peak RSS grew {grown[20]} MB for 200 MB, {grown[40]} MB for 400 MB"
    assert not [p.name for p in folder.iterdir() if ".recordkit-convert-" in p.name]  # no staging file left
    back = rk.read_table(sorted(folder.glob("w*")), {"id": rk.FixedLenFeature([], "int64")})
    assert back.column("id").to_pylist() == list(range(20_000))


def test_a_stream_is_sharded_as_its_table_and_a_failing_stream_writes_nothing(tmp_path: Path) -> None:
    table = pa.table({"id": pa.array(range(1000)), "w": pa.array([f"w{i}" for i in range(1000)])})
    from_table = rk.write_examples(tmp_path / "t.tfrecord", table, shards=4)
    from_stream = rk.write_examples(tmp_path / "s.tfrecord", pa.RecordBatchReader.from_batches(
        table.schema, table.to_batches(max_chunksize=64)), shards=4)
    for a, b in zip(from_table, from_stream):
        assert Path(a).read_bytes() == Path(b).read_bytes()

    def failing() -> object:
        yield from table.to_batches(max_chunksize=100)[:3]
        raise OSError("the source went away")

    for shards in (None, 3):
        with pytest.raises(OSError, match="went away"):
            rk.write_examples(tmp_path / "f" / "x.tfrecord", pa.RecordBatchReader.from_batches(table.schema, failing()),
                              shards=shards)
        assert not (tmp_path / "f").exists() or not list((tmp_path / "f").iterdir())
    with pytest.raises(TypeError, match="not Int64Array"):
        rk.write_examples(tmp_path / "a.tfrecord", pa.array([1, 2]))  # an array is not a table
    first = table.to_batches()[0]
    rk.write_examples(tmp_path / "b.tfrecord", first)  # a RecordBatch is one
    assert rk.read_table(tmp_path / "b.tfrecord").num_rows == first.num_rows
    # A value that cannot be stored is named by its row in the whole stream, not in its batch.
    wide = pa.table({"x": pa.array([1.0] * 300 + [1e300])})
    with pytest.raises(ValueError, match="row 300"), pytest.warns(UserWarning, match="float32"):
        rk.write_examples(tmp_path / "o.tfrecord", pa.RecordBatchReader.from_batches(
            wide.schema, wide.to_batches(max_chunksize=100)))


def test_read_table_skips_damage_only_when_asked(tmp_path) -> None:
    from conftest import damage_record, uneven_shards

    total = uneven_shards(tmp_path, sizes=(300, 9000))
    offset = damage_record(tmp_path / "part-00001.tfrecord", 4321)
    with pytest.raises(rk.DataLossError) as error:
        rk.read_table(tmp_path, {"id": rk.FixedLenFeature([], "int64")})
    assert error.value.offset == offset
    with pytest.warns(rk.DataLossWarning, match=f"at offset {offset} .*after 4321 intact records"):
        table = rk.read_table(tmp_path, {"id": rk.FixedLenFeature([], "int64")}, on_error="skip")
    assert table.column("id").to_pylist() == [i for i in range(total) if i != 300 + 4321]
    with pytest.raises(ValueError, match='on_error must be "raise" or "skip"'):
        rk.read_table(tmp_path, on_error="ignore")  # type: ignore[arg-type]


def test_damage_in_the_sample_a_schema_is_inferred_from(tmp_path) -> None:
    # Without features the schema comes from the first records; damage there is
    # skipped with on_error="skip" (once warned, by the read), raised without.
    from conftest import damage_record

    rk.write_examples(tmp_path / "d.tfrecord", {"id": np.arange(500), "name": np.array([b"n"] * 500)})
    offset = damage_record(tmp_path / "d.tfrecord", 7)
    with pytest.raises(rk.DataLossError):
        rk.read_table(tmp_path / "d.tfrecord")
    with pytest.raises(rk.DataLossError):
        rk.infer_schema(tmp_path / "d.tfrecord")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = rk.read_table(tmp_path / "d.tfrecord", on_error="skip")
    assert table.column("id").to_pylist() == [i for i in range(500) if i != 7]
    [warned] = [str(w.message) for w in caught if w.category is rk.DataLossWarning]  # the read's, not the sample's too
    assert f"at offset {offset} " in warned and warned.endswith("after 7 intact records")
    with pytest.warns(rk.DataLossWarning, match=f"at offset {offset} "):
        schema = rk.infer_schema(tmp_path / "d.tfrecord", on_error="skip")
    assert sorted(schema.features) == ["id", "name"]


_NUMBERS = ["int8", "int16", "int32", "int64", "uint8", "uint32", "uint64", "float16", "float32", "float64", "bool"]


@given(dtype=st.sampled_from(_NUMBERS), data=st.data())
@settings(max_examples=150, deadline=None)
def test_numpy_to_arrow_is_pa_array(dtype: str, data: st.DataObject) -> None:
    """The pandas-free conversion gives pa.array's array, masked or not, strided or not."""
    from recordkit.tables import numpy_to_arrow

    n = data.draw(st.integers(0, 40))
    raw = np.frombuffer(data.draw(st.binary(min_size=n * 8, max_size=n * 8)), np.uint8)
    if dtype == "bool":
        values = raw[:n] % 2 == 1
    else:
        values = raw[: n * np.dtype(dtype).itemsize].view(dtype)
        if values.dtype.kind == "f":
            values = np.nan_to_num(values)  # Arrow's equals never finds NaN equal
    if data.draw(st.booleans()):
        values = np.repeat(values, 2)[::2]  # not contiguous: a view with a stride
    mask = data.draw(st.none() | st.lists(st.booleans(), min_size=len(values), max_size=len(values)).map(lambda m: np.array(m, bool)))
    got, want = numpy_to_arrow(values, mask=mask), pa.array(values, mask=mask)
    got.validate(full=True)
    assert got.type == want.type
    assert got.equals(want)
    assert numpy_to_arrow(values, pa.from_numpy_dtype(values.dtype)).equals(pa.array(values))


@given(values=st.lists(st.binary(max_size=12), max_size=8),
       type=st.sampled_from(["binary", "large_binary", "string", "large_string"]))
@settings(max_examples=100, deadline=None)
def test_bytes_to_arrow_is_pa_array(values: list[bytes], type: str) -> None:
    """The pandas-free conversion of a default's byte strings gives pa.array's array."""
    from recordkit.tables import _bytes_to_arrow

    arrow_type = getattr(pa, type)()
    if "string" in type:
        values = [v.decode("utf-8", "replace").encode() for v in values]  # Arrow's strings are UTF-8
    got, want = _bytes_to_arrow(values, arrow_type), pa.array(values, arrow_type)
    got.validate(full=True)
    assert got.type == want.type and got.equals(want)


def test_a_string_default_that_is_not_utf8_is_refused_as_utf8_and_kept_as_binary(tmp_path: Path) -> None:
    rk.write_examples(tmp_path / "d.tfrecord", {"id": [1, 2]})
    spec = {"id": rk.FixedLenFeature([], "int64"), "s": rk.FixedLenFeature([], "string", default_value=b"\xff")}
    with pytest.raises(ValueError, match="feature 's': its default value .* is not valid UTF-8"):
        rk.read_table(tmp_path / "d.tfrecord", spec, strings="utf8")
    assert rk.read_table(tmp_path / "d.tfrecord", spec, strings="binary")["s"].to_pylist() == [b"\xff", b"\xff"]
    assert rk.read_table(tmp_path / "d.tfrecord", dict(spec, s=rk.FixedLenFeature([], "string", default_value="é")),
                         strings="utf8")["s"].to_pylist() == ["é", "é"]


def test_first_calls_import_no_more_than_they_need(tmp_path: Path) -> None:
    """A process's first read_table does not import pandas (pa.array would, for
    0.3 s), even where a default fills a missing string feature, nor its first
    write_examples numpy.ma (17 ms)."""
    pytest.importorskip("pandas")
    path = _write(tmp_path / "t.tfrecord", ROWS)
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        import recordkit as rk
        rk.write_examples({str(tmp_path / "w.tfrecord")!r}, {{"x": [1, 2], "y": np.array([b"a", b"b"])}})
        print("numpy.ma" in sys.modules)
        rk.read_table({str(path)!r}, {{"id": rk.FixedLenFeature([], "int64"), "tags": rk.VarLenFeature("string"),
                                       "score": rk.FixedLenFeature([2], "float32"),
                                       "absent": rk.FixedLenFeature([], "string", default_value=b"?")}})
        print("pandas" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]
