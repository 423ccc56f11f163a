"""rk.convert, rk.infer_schema and rk.feature_stats as library calls (the CLI tests run the command)."""

from __future__ import annotations

import io
import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

import recordkit as rk
from conftest import fresh_seed
from recordkit.stats import shorten_title
from recordkit.conversion import detect_format, parse_size


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_sizes_and_formats() -> None:
    assert parse_size("100MB") == 100_000_000 and parse_size("1.5 GiB") == 3 * 2**29 and parse_size("512") == 512
    with pytest.raises(ValueError):
        parse_size("lots")
    assert detect_format("a/train.tfrecord.gz") == "tfrecord" and detect_format("x.PARQUET") == "parquet"
    assert detect_format("data/part-00003") == "ofrecord"
    with pytest.raises(ValueError, match="--to ofrecord"):
        detect_format("out/somewhere", output=True)


def test_shard_size_rotates_and_small_outputs_stay_one_file(tmp_path: Path) -> None:
    source = jsonl(tmp_path / "t.jsonl", [{"id": i, "pad": "x" * 100} for i in range(50)])
    assert rk.convert(source, tmp_path / "one.tfrecord") == [str(tmp_path / "one.tfrecord")]
    shards = rk.convert(source, tmp_path / "s.tfrecord", shard_size="1kB")
    assert len(shards) > 3 and shards[0].endswith(f"s-00000-of-{len(shards):05d}.tfrecord")
    sizes = [Path(s).stat().st_size for s in shards]
    assert all(1000 <= size < 1200 for size in sizes[:-1]), sizes
    assert sum(rk.count_records(s) for s in shards) == 50


def test_more_shards_than_rows_and_no_rows(tmp_path: Path) -> None:
    source = jsonl(tmp_path / "t.jsonl", [{"id": i} for i in range(2)])
    shards = rk.convert(source, tmp_path / "s.tfrecord", shards=5)
    assert [rk.count_records(s) for s in shards] == [0, 0, 1, 0, 1]
    assert [int(rk.decode_example(r)["id"][0]) for s in shards for r in rk.TFRecordReader(s)] == [0, 1]
    (tmp_path / "empty.csv").write_text("a,b\n")
    [out] = rk.convert(tmp_path / "empty.csv", tmp_path / "empty.tfrecord")
    assert rk.count_records(out) == 0


def test_feature_selection_keeps_order(tmp_path: Path) -> None:
    source = jsonl(tmp_path / "t.jsonl", [{"a": 1, "b": 2.5, "c": "x"}])
    rk.convert(source, tmp_path / "t.csv", features=["c", "a"])
    assert (tmp_path / "t.csv").read_text().splitlines() == ["c,a", "x,1"]
    with pytest.raises(ValueError, match="no feature named 'z'"):
        rk.convert(source, tmp_path / "u.csv", features=["z"])
    assert not (tmp_path / "u.csv").exists()


def test_float64_narrowing_is_announced(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"x": [0.1, 0.2]}), tmp_path / "t.parquet")
    with pytest.warns(UserWarning, match="float64 .* stored as float32"):
        rk.convert(tmp_path / "t.parquet", tmp_path / "t.tfrecord")


def test_sequence_examples_copy_between_record_formats_but_have_no_table(tmp_path: Path) -> None:
    records = [rk.encode_sequence_example({"id": i}, {"tokens": [[1, 2], [3]]}) for i in range(3)]
    with rk.TFRecordWriter(tmp_path / "s.tfrecord") as writer:
        writer.write_many(records)
    [out] = rk.convert(tmp_path / "s.tfrecord", tmp_path / "copy.tfrecord.gz", output_compression="gzip")
    assert list(rk.TFRecordReader(out)) == records
    with pytest.raises(ValueError, match="SequenceExamples have no table form"):
        rk.convert(tmp_path / "s.tfrecord", tmp_path / "s.parquet")
    assert not (tmp_path / "s.parquet").exists()


def test_schema_spec_and_stats(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match="'maybe': float64"):
        rk.write_examples(tmp_path / "t.tfrecord", {
            "label": np.arange(10), "tokens": [[1] * (i % 3) for i in range(10)], "maybe": [None if i % 2 else 1.5 for i in range(10)]})
    schema = rk.infer_schema(tmp_path / "t.tfrecord")
    spec = schema.to_spec()
    assert isinstance(spec["label"], rk.FixedLenFeature) and spec["label"].shape == ()
    assert isinstance(spec["tokens"], rk.VarLenFeature) and isinstance(spec["maybe"], rk.VarLenFeature)
    assert schema.features["maybe"].present == 5 and schema.features["tokens"].max_values == 2
    assert rk.parse_example(list(rk.TFRecordReader(tmp_path / "t.tfrecord")), spec)["label"].tolist() == list(range(10))
    assert not rk.infer_schema(tmp_path / "t.tfrecord", limit=4).complete
    stats = rk.feature_stats(tmp_path / "t.tfrecord")
    assert stats.records == 10 and stats["label"].mean == 4.5 and stats["label"].quantiles[0.5] == 4.5
    assert stats["maybe"].missing == 5 and stats["tokens"].values_per_record == {"min": 0, "mean": 0.9, "max": 2}


def test_mixed_kinds_and_features_without_a_kind(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    with rk.TFRecordWriter(tmp_path / "mixed.tfrecord") as writer:
        writer.write(rk.encode_example({"x": 1}))
        writer.write(rk.encode_example({"x": 1.5}))
    assert rk.infer_schema(tmp_path / "mixed.tfrecord").features["x"].kind == "mixed"
    with pytest.raises(ValueError, match="different kinds"):
        rk.convert(tmp_path / "mixed.tfrecord", tmp_path / "mixed.parquet")
    # A Feature that sets no kind is present with no values: kept apart from a missing one.
    empty = rk.train.Example(features=rk.train.Features(feature={"e": rk.train.Feature(), "i": rk.int64_feature(1)}))
    with rk.TFRecordWriter(tmp_path / "kindless.tfrecord") as writer:
        writer.write(empty.SerializeToString())
        writer.write(rk.encode_example({"e": [b"x"], "i": 2}))
        writer.write(rk.encode_example({"i": 3}))
    info = rk.infer_schema(tmp_path / "kindless.tfrecord").features["e"]
    assert info.kindless and info.kind == "bytes" and info.present == 2
    rk.convert(tmp_path / "kindless.tfrecord", tmp_path / "kindless.parquet")
    table = pq.read_table(tmp_path / "kindless.parquet")
    assert table.column("e").to_pylist() == [[], ["x"], None] and table.column("i").to_pylist() == [1, 2, 3]
    assert pa.types.is_list(table.schema.field("e").type)


def test_output_compression_follows_the_suffix(tmp_path: Path) -> None:
    source = jsonl(tmp_path / "t.jsonl", [{"id": i} for i in range(3)])
    [gz] = rk.convert(source, tmp_path / "t.tfrecord.gz")
    assert Path(gz).read_bytes()[:2] == b"\x1f\x8b"
    [zz] = rk.convert(source, tmp_path / "t.tfrecord.zz")
    assert Path(zz).read_bytes()[0] == 0x78
    [plain] = rk.convert(source, tmp_path / "u.tfrecord.gz", output_compression="none")
    assert rk.TFRecordReader(plain, compression="none").compression == "none"
    assert [len(list(rk.TFRecordReader(p))) for p in (gz, zz)] == [3, 3]


def test_categorical_and_time_columns(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    frame = pd.DataFrame({"kind": pd.Categorical(["cat", "dog", "cat"]),
                          "at": pd.to_datetime(["2024-01-01", "2024-01-02", None]).as_unit("s")})
    frame.to_parquet(tmp_path / "t.parquet")
    with pytest.warns(UserWarning, match="'at': timestamp.* int64"):
        [out] = rk.convert(tmp_path / "t.parquet", tmp_path / "t.tfrecord")
    rows = [rk.decode_example(r) for r in rk.TFRecordReader(out)]
    assert [r["kind"] for r in rows] == [[b"cat"], [b"dog"], [b"cat"]]
    assert rows[0]["at"].tolist() == [1_704_067_200_000] and "at" not in rows[2]  # Parquet keeps ms


def test_stats_are_the_same_parsed_in_columns_or_record_by_record(conformance_dir: Path, tmp_path: Path) -> None:
    # One record that is not an Example sends the whole file down the record-by-record path.
    records = list(rk.TFRecordReader(conformance_dir / "varlen.tfrecord"))
    with rk.TFRecordWriter(tmp_path / "mixed.tfrecord") as writer:
        writer.write_many([b"x", *records])
    columns = rk.feature_stats(conformance_dir / "varlen.tfrecord")
    one_by_one = rk.feature_stats(tmp_path / "mixed.tfrecord")
    assert one_by_one.records == columns.records + 1 and columns.keys() == one_by_one.keys()
    for name, stats in columns.items():
        other = one_by_one[name].to_json()
        other["missing"] -= 1
        assert stats.to_json() == other, name


def test_stats_top_values_leave_out_long_strings(tmp_path: Path) -> None:
    # The long value is the most common, but only strings up to 64 bytes are counted as top values.
    column = [b"cat"] * 3 + [b"L" * 65] * 4 + [b"dog"] * 2 + [b"S" * 64]
    rk.write_examples(tmp_path / "t.tfrecord", {"s": column})
    with rk.TFRecordWriter(tmp_path / "mixed.tfrecord") as writer:  # one non-Example: record by record
        writer.write_many([b"x", *rk.TFRecordReader(tmp_path / "t.tfrecord")])
    for path in ("t.tfrecord", "mixed.tfrecord"):
        stats = rk.feature_stats(tmp_path / path)["s"]
        assert stats.top == [(b"cat", 3), (b"dog", 2), (b"S" * 64, 1)], path
        assert stats.lengths == {"min": 3, "mean": round((9 + 260 + 6 + 64) / 10, 1), "max": 65}, path


def test_stats_top_values_stay_bounded_with_many_distinct_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from recordkit import stats as stats_module

    monkeypatch.setattr(stats_module, "_TRACKED", 20)
    # 3000 unique IDs, among them three values repeated often enough to stand out.
    rng = np.random.default_rng(5)
    column = [b"id%d" % i for i in range(3000)] + [b"cat"] * 900 + [b"dog"] * 600 + [b"emu"] * 400
    column = [column[i] for i in rng.permutation(len(column))]
    rk.write_examples(tmp_path / "t.tfrecord", {"s": column})
    stats = rk.feature_stats(tmp_path / "t.tfrecord")["s"]
    assert [v for v, _ in stats.top[:3]] == [b"cat", b"dog", b"emu"]
    truth = {b"cat": 900, b"dog": 600, b"emu": 400}
    assert 0 < stats.top_error <= len(column) / 21  # Misra-Gries' bound: seen / (tracked + 1)
    for value, count in stats.top[:3]:
        assert truth[value] - stats.top_error <= count <= truth[value]
    assert stats.to_json()["top_error"] == stats.top_error
    # The summary itself never holds more than four times the tracked count after a batch.
    top = stats_module._TopValues()
    for start in range(0, len(column), 100):
        top.update(column[start:start + 100])
        assert len(top.counts) <= 4 * 20 + 100
    assert top.seen == len(column)
    monkeypatch.undo()
    exact = rk.feature_stats(tmp_path / "t.tfrecord")["s"]
    assert exact.top_error == 0 and exact.top[:3] == [(b"cat", 900), (b"dog", 600), (b"emu", 400)]


def test_npz_refuses_byte_strings_that_numpy_would_cut(tmp_path: Path) -> None:
    rk.write_examples(tmp_path / "t.tfrecord", {"raw": [b"ab\x00", b"c"]})
    with pytest.raises(ValueError, match="ending in NUL"):
        rk.convert(tmp_path / "t.tfrecord", tmp_path / "t.npz")
    assert not (tmp_path / "t.npz").exists()


def test_feature_stats_go_straight_to_plot_stats(tmp_path: Path) -> None:
    rk.write_examples(tmp_path / "t.tfrecord", {"label": np.arange(1000) * 7, "score": np.linspace(0, 1, 1000, dtype=np.float32)})
    stats = rk.feature_stats(tmp_path / "t.tfrecord")  # the README's call, as written
    assert stats.records == 1000 and set(stats) == {"label", "score"} and len(stats) == 2
    assert stats.to_json()["features"]["label"]["count"] == 1000
    page = rk.plot_stats(stats, tmp_path / "stats.html", title="a/very/long/path/" * 10)
    text = Path(page).read_text()
    shown = re.search(r"<title>(.*?)</title>", text)[1]
    assert len(shown) <= 80 and shown.endswith("…") and shown[:-1].split("/")[-1] in {"a", "very", "long", "path"}
    [label_chart] = [part for part in text.split("<figure>") if "label: values" in part]
    ticks = re.findall(r"font-size='10'>([^<]+)</text>", label_chart)[:-1]  # the last is "max bar"
    assert ticks and all(tick.isdigit() for tick in ticks), ticks  # integers get integer ticks
    with pytest.raises(ValueError, match="positive"):
        rk.feature_stats(tmp_path / "t.tfrecord", limit=-5)
    with pytest.raises(ValueError, match=r"\.png .*or \.html"):
        rk.plot_stats(stats, tmp_path / "stats.jpg")


def test_shorten_title_cuts_at_a_boundary() -> None:
    assert shorten_title("short") == "short"
    title = shorten_title("data/train-00000-of-00002.tfrecord, data/train-00001-of-00002.tfrecord, data/eval.tfrecord")
    assert len(title) <= 80 and title.endswith("…") and title[:-1].endswith(".tfrecord")


FLOAT64_SOURCES = {
    "numpy": lambda d: rk.write_examples(d / "o.tfrecord", {"x": np.array([0.1, 0.2]), "b": np.array([True, False])}),
    "pandas": lambda d: rk.write_examples(d / "o.tfrecord", pytest.importorskip("pandas").DataFrame({"x": [0.1, 0.2], "b": [True, False]})),
    "lists": lambda d: rk.write_examples(d / "o.tfrecord", {"x": [0.1, 0.2], "b": [True, False]}),
    "csv": lambda d: (d.joinpath("t.csv").write_text("x,b\n0.1,True\n0.2,FALSE\n"), rk.convert(d / "t.csv", d / "o.tfrecord")),
    "jsonl": lambda d: (d.joinpath("t.jsonl").write_text('{"x": 0.1, "b": true}\n{"x": 0.2, "b": false}\n'),
                        rk.convert(d / "t.jsonl", d / "o.tfrecord")),
    "parquet": lambda d: (pytest.importorskip("pyarrow.parquet").write_table(
        pytest.importorskip("pyarrow").table({"x": [0.1, 0.2], "b": [True, False]}), d / "t.parquet"),
        rk.convert(d / "t.parquet", d / "o.tfrecord")),
}


@pytest.mark.parametrize("source", sorted(FLOAT64_SOURCES))
def test_float64_narrowing_warns_once_per_column_and_bools_are_int64_from_every_source(tmp_path: Path, source: str) -> None:
    with pytest.warns(UserWarning) as caught:
        FLOAT64_SOURCES[source](tmp_path)
    messages = [str(w.message) for w in caught]
    assert messages == ["column 'x': float64 values are stored as float32 (tf.train.Example has no float64)"], messages
    assert not caught[0].filename.endswith("threading.py")  # warned on the caller's thread, not a writer's
    first = rk.decode_example(next(iter(rk.TFRecordReader(tmp_path / "o.tfrecord"))))
    assert first["b"].dtype == np.int64 and first["b"].tolist() == [1]
    assert first["x"].dtype == np.float32


def test_a_float64_column_warns_once_however_many_chunks(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("x\n" + "0.5\n" * 70_000)
    with pytest.warns(UserWarning) as caught:
        rk.convert(tmp_path / "t.csv", tmp_path / "o.tfrecord")
    assert len(caught) == 1


@pytest.mark.parametrize("source", ["numpy", "lists", "arrow", "csv"])
def test_a_value_beyond_float32_is_an_error_naming_column_and_row(tmp_path: Path, source: str) -> None:
    # Past one conversion chunk, so the row counts from the file's start; an
    # infinity before it is a value float32 holds, not the one named.
    big = [1.0] * 70_000 + [float("inf"), 1e300]
    if source == "csv":
        (tmp_path / "t.csv").write_text("x\n" + "".join(f"{v}\n" for v in big))
        write = lambda: rk.convert(tmp_path / "t.csv", tmp_path / "o.tfrecord")  # noqa: E731
    else:
        column = {"numpy": np.array(big), "lists": [[v] for v in big],
                  "arrow": pytest.importorskip("pyarrow").array(big)}[source]
        write = lambda: rk.write_examples(tmp_path / "o.tfrecord", {"x": column})  # noqa: E731
    with pytest.raises(ValueError, match=r"column 'x', row 70001: 1e\+300 is beyond float32's range"), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the first chunk's float64 warning comes before the error
        write()
    assert not (tmp_path / "o.tfrecord").exists()


@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
def test_an_integer_beyond_int64_is_an_error_naming_column_and_row(tmp_path: Path, suffix: str) -> None:
    values = [1] * 70_001 + [2**64 - 1]  # past one conversion chunk, so the row counts from the file's start
    lines = [f"{v}\n" if suffix == "csv" else f'{{"x": {v}}}\n' for v in values]
    (tmp_path / f"t.{suffix}").write_text(("x\n" if suffix == "csv" else "") + "".join(lines))
    with pytest.raises(ValueError, match=r"^column 'x', row 70001: value 18446744073709551615 does not fit an int64$"):
        rk.convert(tmp_path / f"t.{suffix}", tmp_path / "o.tfrecord")
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"t.{suffix}"]


@pytest.mark.parametrize("destination, options", [("new/sub/o.tfrecord", {}), ("new/sub/o.tfrecord", {"shards": 3}),
                                                  ("new/parts", {"destination_format": "ofrecord"})])
def test_a_failed_conversion_leaves_no_folder_it_made(tmp_path: Path, destination: str, options: dict) -> None:
    (tmp_path / "t.csv").write_text("x\n1\n" + f"{2**64 - 1}\n")
    with pytest.raises(ValueError, match="does not fit an int64"):
        rk.convert(tmp_path / "t.csv", tmp_path / destination, **options)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]
    (tmp_path / "new").mkdir()
    with pytest.raises(ValueError, match="does not fit an int64"):
        rk.convert(tmp_path / "t.csv", tmp_path / destination, **options)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "t.csv"] and not any((tmp_path / "new").iterdir())


def test_csv_booleans_mixed_with_numbers_stay_text(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("m,e\nTrue,\n1,\n")
    rk.convert(tmp_path / "t.csv", tmp_path / "o.tfrecord")
    assert rk.decode_example(next(iter(rk.TFRecordReader(tmp_path / "o.tfrecord")))) == {"m": [b"True"]}


def _parquet(tmp_path: Path, rows: int) -> Path:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rng = np.random.default_rng(fresh_seed())
    table = pa.table({
        "id": np.arange(rows),
        "name": pa.array([None if i % 7 == 3 else b"n%d" % v for i, v in enumerate(rng.integers(0, 1 << 30, rows))]),
        "score": rng.random(rows).astype(np.float32),
        "tags": pa.array([rng.integers(-9, 9, k).tolist() for k in rng.integers(0, 4, rows)]),
    })
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=rows // 3)
    return path


@pytest.mark.parametrize("options", [{}, {"shard_size": "40kB"}, {"shards": 3}])
def test_conversion_writes_the_same_bytes_at_every_thread_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                options: dict) -> None:
    # Chunks of about 4 kB: each is written on a helper thread while the next is read,
    # and shards are cut by size between writes, as with one thread.
    monkeypatch.setattr(rk.conversion, "CHUNK_BYTES", 4096)
    source = _parquet(tmp_path, 5000)
    outputs = []
    try:
        for count in (1, 2, 7):
            rk.set_num_threads(count)
            shards = rk.convert(source, tmp_path / f"out-{count}" / "t.tfrecord", **options)
            outputs.append([Path(s).read_bytes() for s in shards])
    finally:
        rk.set_num_threads(None)
    assert outputs[0] == outputs[1] == outputs[2]
    records = [r for data in outputs[0] for r in rk.TFRecordReader(io.BytesIO(data))]
    assert [int(rk.decode_example(r)["id"][0]) for r in records] == list(range(5000))
    if options:
        assert len(outputs[0]) > 2


def test_parquet_is_read_in_chunks_of_bytes_not_of_rows(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from recordkit.conversion import ParquetSource

    wide = tmp_path / "wide.parquet"
    pq.write_table(pa.table({"image": [bytes([i]) * (1 << 20) for i in range(40)]}), wide, compression="none")
    assert ParquetSource(str(wide))._chunk_rows() in (15, 16)  # 16 MiB of 1 MiB rows (and headers), not 8192
    narrow = _parquet(tmp_path, 3000)
    assert ParquetSource(str(narrow))._chunk_rows() == 65536
    [out] = rk.convert(wide, tmp_path / "wide.tfrecord")
    assert [rk.decode_example(r)["image"][0][:1] for r in rk.TFRecordReader(out)] == [bytes([i]) for i in range(40)]


def test_records_are_converted_in_chunks_of_bytes_not_of_rows(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    wide = tmp_path / "wide.tfrecord"
    rk.write_examples(wide, {"image": np.array([bytes([i]) * (1 << 20) for i in range(40)], dtype=object)})
    rk.convert(wide, tmp_path / "wide.parquet")
    groups = pq.ParquetFile(tmp_path / "wide.parquet").metadata
    # About 16 MiB of records a chunk (each chunk one row group), not 8192 records.
    assert [groups.row_group(i).num_rows for i in range(groups.num_row_groups)] == [16, 16, 8]
    column = pq.read_table(tmp_path / "wide.parquet").column("image").to_pylist()  # text: the bytes are UTF-8
    assert [(len(v), ord(v[0])) for v in column] == [(1 << 20, i) for i in range(40)]
    narrow = tmp_path / "narrow.tfrecord"
    rk.write_examples(narrow, {"id": np.arange(70_000)})
    rk.convert(narrow, tmp_path / "narrow.parquet")
    groups = pq.ParquetFile(tmp_path / "narrow.parquet").metadata
    assert [groups.row_group(i).num_rows for i in range(groups.num_row_groups)] == [65536, 70_000 - 65536]


def test_record_batches_end_at_a_count_or_once_they_hold_enough_bytes() -> None:
    from recordkit.conversion import record_batches

    records = [b"a" * n for n in (1, 1, 1, 9, 1, 20, 1)]
    assert [[len(r) for r in b] for b in record_batches(records, 3, 10)] == [[1, 1, 1], [9, 1], [20], [1]]
    assert list(record_batches([], 3, 10)) == []


def test_shard_counts_follow_the_bytes_written_after_compression(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import recordkit.conversion_sinks as sinks

    monkeypatch.setattr(sinks, "SHARD_BYTES", 1_000_000)  # the ~100 MB rule, scaled down
    monkeypatch.setattr(sinks, "PROBE_BYTES", 256 << 10)
    rng = np.random.default_rng(0)
    noise = tmp_path / "noise.tfrecord"  # incompressible: 3.3 MB before and after gzip
    rk.write_examples(noise, {"b": [rng.bytes(100) for _ in range(30_000)]})
    plain = tmp_path / "plain.tfrecord"  # compresses a hundredfold
    rk.write_examples(plain, {"b": [b"\0" * 100] * 30_000})

    one = rk.convert(plain, tmp_path / "a" / "plain.tfrecord.gz")
    assert one == [str(tmp_path / "a" / "plain.tfrecord.gz")]  # 3.3 MB of records, a few KB written: one file
    shards = rk.convert(noise, tmp_path / "b" / "noise.tfrecord.gz")
    sizes = [Path(p).stat().st_size for p in shards]
    assert len(shards) == 3 and max(sizes) - min(sizes) < 0.02 * max(sizes), sizes  # even, by rows
    assert sum(rk.count_records(p) for p in shards) == 30_000
    sized = rk.convert(noise, tmp_path / "c" / "noise.tfrecord.gz", shard_size=2_000_000)
    sizes = [Path(p).stat().st_size for p in sized]
    assert len(sized) == 2 and 1_900_000 < sizes[0] < 2_100_000, sizes  # sizes as written, after compression


def test_a_target_that_is_a_folder_is_refused_by_name_before_any_work(tmp_path: Path) -> None:
    (tmp_path / "out.tfrecord").mkdir()
    source = jsonl(tmp_path / "t.jsonl", [{"id": 1}])
    for write in (lambda: rk.convert(source, tmp_path / "out.tfrecord"),
                  lambda: rk.write_examples(tmp_path / "out.tfrecord", {"id": np.arange(3)}),
                  lambda: rk.TFRecordWriter(tmp_path / "out.tfrecord")):
        with pytest.raises(IsADirectoryError, match=re.escape(f"is a folder, not a file to write: name a file inside it: "
                                                                f"'{tmp_path / 'out.tfrecord'}'")):
            write()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.tfrecord", "t.jsonl"]  # no temporary file left
