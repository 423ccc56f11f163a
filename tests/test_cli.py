"""The recordkit command, run as a user runs it: a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import recordkit as rk

REPO = Path(__file__).resolve().parent.parent
from conftest import load_cases


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "recordkit", *args], capture_output=True, text=True, timeout=120)


CASES = {c["id"]: c for c in load_cases()}


def test_count_matches_the_corpus(conformance_dir: Path) -> None:
    result = run("count", str(conformance_dir / "tutorial.tfrecord.gz"), str(conformance_dir / "part-00000"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["989", str(conformance_dir / "tutorial.tfrecord.gz"), "40", str(conformance_dir / "part-00000"), "1029", "total"]


@pytest.mark.parametrize("case_id", ["bad-data-crc", "bad-length", "bad-length-crc", "truncated-payload", "truncated-footer", "truncated-gzip"])
def test_verify_reports_tensorflows_offsets(conformance_dir: Path, case_id: str) -> None:
    case = CASES[case_id]
    result = run("verify", str(conformance_dir / case["file"]))
    assert result.returncode == 1
    offset = case["error"]["message"].rsplit(" ", 1)[-1]
    assert f"offset {offset}:" in result.stdout, result.stdout


def test_verify_passes_intact_files_and_flags_the_partial_header(conformance_dir: Path) -> None:
    assert run("verify", str(conformance_dir / "tutorial.tfrecord"), str(conformance_dir / "varlen.tfrecord")).returncode == 0
    # TensorFlow stops silently here; recordkit names the record the file ends in (record 59 starts at 5911).
    result = run("verify", str(conformance_dir / "truncated-header.tfrecord"))
    assert result.returncode == 1 and "offset 5911:" in result.stdout, result.stdout


def test_cat_json_lines(conformance_dir: Path) -> None:
    result = run("head", str(conformance_dir / "tutorial.tfrecord"), "-n", "3", "--features", "feature2,feature3")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == 3 and set(lines[0]) == {"feature2", "feature3"}
    assert lines[0]["feature2"] == ["cat"] and lines[0]["feature3"] == [-1.1479694]
    edge = json.loads(run("cat", str(conformance_dir / "edge.tfrecord"), "--limit", "1").stdout)
    assert {"base64": "AP/+"} in edge["b"] and "nan" in edge["f"]


def test_cat_text_and_other_record_kinds(conformance_dir: Path) -> None:
    text = run("cat", str(conformance_dir / "tutorial.tfrecord"), "--limit", "1", "--format", "text").stdout
    assert text.startswith("features {") and 'value: "cat"' in text
    sequence = json.loads(run("head", str(conformance_dir / "sequence.tfrecord"), "-n", "1").stdout)
    assert set(sequence) == {"context", "feature_lists"}
    of = json.loads(run("head", str(conformance_dir / "part-00000"), "-n", "1").stdout)
    assert set(of) == {"feature0", "feature1", "feature2", "feature3", "d", "i32"}


def test_index_subcommand(tmp_path: Path) -> None:
    path = tmp_path / "a.tfrecord"
    rk.write_examples(path, {"x": list(range(5))})
    result = run("index", str(path))
    assert result.returncode == 0 and result.stdout.strip() == str(path) + ".idx"
    assert len((tmp_path / "a.tfrecord.idx").read_text().splitlines()) == 5


def test_errors_are_one_line(tmp_path: Path) -> None:
    result = run("count", str(tmp_path / "missing.tfrecord"))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "missing.tfrecord" in result.stderr
    assert "Traceback" in run("--debug", "count", str(tmp_path / "missing.tfrecord")).stderr
    assert "example:" in run("cat", "--help").stdout


@pytest.mark.parametrize("case_id", ["bad-data-crc", "bad-length", "truncated-payload", "truncated-gzip"])
def test_salvage_keeps_exactly_the_intact_records(conformance_dir: Path, tmp_path: Path, case_id: str) -> None:
    case = CASES[case_id]
    out = tmp_path / "fixed.tfrecord"
    result = run("salvage", str(conformance_dir / case["file"]), str(out))
    assert result.returncode == 0, result.stderr
    kept = list(rk.TFRecordReader(out))
    intact = list(rk.TFRecordReader(conformance_dir / "tutorial.tfrecord"))
    # Everything before the damage, and (uncompressed) everything after the damaged record.
    assert kept[: case["count"]] == intact[: case["count"]]
    if case["compression"] is None and case_id != "truncated-payload":
        assert kept == intact[: case["count"]] + intact[case["count"] + 1 :]
    assert f"kept {len(kept)} records" in result.stdout


def test_tensorflow_reads_salvaged_files(conformance_dir: Path, tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    out = tmp_path / "fixed.tfrecord.gz"
    assert run("salvage", str(conformance_dir / "bad-data-crc.tfrecord"), str(out), "--output-compression", "gzip").returncode == 0
    records = [r.numpy() for r in tf.data.TFRecordDataset(str(out), compression_type="GZIP")]
    assert records == list(rk.TFRecordReader(out)) and len(records) == 988


# --- inspect, stats, convert ------------------------------------------------------------------


def test_inspect_json_kinds(conformance_dir: Path) -> None:
    result = run("inspect", str(conformance_dir / "tutorial.tfrecord.gz"), "--json")
    assert result.returncode == 0, result.stderr
    schema = json.loads(result.stdout)
    assert schema["container"] == "example" and schema["records"] == 989 and schema["complete"]
    assert {name: f["kind"] for name, f in schema["features"].items()} == {
        "feature0": "int64", "feature1": "int64", "feature2": "bytes", "feature3": "float"}
    assert schema["features"]["feature2"]["present"] == 989 and schema["features"]["feature2"]["text"]
    sequence = json.loads(run("inspect", str(conformance_dir / "sequence.tfrecord"), "--json").stdout)
    assert sequence["container"] == "sequence_example" and sequence["sequence_features"]
    oneflow = json.loads(run("inspect", str(conformance_dir / "part-00000"), "--json", "--all").stdout)
    assert oneflow["container"] == "ofrecord" and oneflow["records"] == 40


def test_inspect_prints_a_spec_that_parses_the_file(conformance_dir: Path) -> None:
    result = run("inspect", str(conformance_dir / "varlen.tfrecord"))
    assert result.returncode == 0, result.stderr
    source = result.stdout.split("# a parse spec for these records:\n", 1)[1]
    namespace: dict = {"rk": rk}
    exec(source, namespace)
    records = list(rk.TFRecordReader(conformance_dir / "varlen.tfrecord"))
    parsed = rk.parse_example(records, namespace["features"])
    assert set(parsed) == set(namespace["features"])


def test_stats_plot_is_a_real_image(conformance_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    import struct

    png = tmp_path / "tutorial.png"
    result = run("stats", str(conformance_dir / "tutorial.tfrecord"), "--plot", str(png))
    assert result.returncode == 0, result.stderr
    assert "feature3 (float): present in 989" in result.stdout and '"goat" x' in result.stdout
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 600 and height >= 300
    html = tmp_path / "tutorial.html"
    assert run("stats", str(conformance_dir / "tutorial.tfrecord"), "--plot", str(html)).returncode == 0
    assert html.read_text().count("<svg") == 4


def test_stats_json(conformance_dir: Path) -> None:
    stats = json.loads(run("stats", str(conformance_dir / "tutorial.tfrecord"), "--json").stdout)
    assert stats["records"] == 989
    assert stats["features"]["feature1"]["min"] == 0 and stats["features"]["feature1"]["max"] == 4
    assert {name for name, _ in stats["features"]["feature2"]["top"]} == {"cat", "dog", "chicken", "horse", "goat"}


def test_convert_parquet_to_tfrecord_and_back(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table({
        "id": pa.array([1, 2, None, 4, 5], pa.int64()),
        "name": ["a", "bé", None, "d", ""],
        "raw": pa.array([b"\x00\xff", b"x", b"", None, b"z"], pa.binary()),
        "score": pa.array([0.5, 1.25, 2.0, None, -3.5], pa.float32()),
        "tokens": pa.array([[1, 2], [], None, [3], [4, 5, 6]], pa.list_(pa.int64())),
    })
    pq.write_table(table, tmp_path / "t.parquet")
    result = run("convert", str(tmp_path / "t.parquet"), str(tmp_path / "out" / "train.tfrecord"), "--shards", "3")
    assert result.returncode == 0, result.stderr
    shards = [str(tmp_path / "out" / f"train-{i:05d}-of-00003.tfrecord") for i in range(3)]
    assert result.stdout.split() == shards
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if not p.name.startswith(".")) == [Path(s).name for s in shards]
    assert run("convert", str(tmp_path / "out" / "train-*.tfrecord"), str(tmp_path / "back.parquet")).returncode == 0
    assert pq.read_table(tmp_path / "back.parquet").equals(table)


def test_convert_image_folder_parses_with_the_tutorial_description(tmp_path: Path) -> None:
    images = Path(__file__).resolve().parent.parent / "docs" / "images"
    for name in ("cat", "bridge"):
        (tmp_path / "photos" / name).mkdir(parents=True)
        (tmp_path / "photos" / name / f"{name}.jpg").write_bytes((images / f"{name}.jpg").read_bytes())
    result = run("convert", str(tmp_path / "photos"), str(tmp_path / "images.tfrecord"))
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "images.labels.json").read_text()) == {"bridge": 0, "cat": 1}
    description = {  # the tutorial's image_feature_description
        "height": rk.FixedLenFeature([], "int64"),
        "width": rk.FixedLenFeature([], "int64"),
        "depth": rk.FixedLenFeature([], "int64"),
        "label": rk.FixedLenFeature([], "int64"),
        "image_raw": rk.FixedLenFeature([], "string"),
    }
    parsed = [rk.parse_single_example(r, description) for r in rk.TFRecordReader(tmp_path / "images.tfrecord")]
    assert [(int(p["label"]), rk.image_shape(p["image_raw"].item())) for p in parsed] == [
        (0, (int(parsed[0]["height"]), int(parsed[0]["width"]), 3)), (1, (int(parsed[1]["height"]), int(parsed[1]["width"]), 3))]
    assert parsed[1]["image_raw"].item() == (images / "cat.jpg").read_bytes()


def test_convert_csv_jsonl_npz_and_ofrecord(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("id,score,name\n1,0.5,cat\n2,,dog\n3,2.25,\n")
    assert run("convert", str(tmp_path / "t.csv"), str(tmp_path / "t.tfrecord.gz"), "--output-compression", "gzip").returncode == 0
    decoded = [rk.decode_example(r) for r in rk.TFRecordReader(tmp_path / "t.tfrecord.gz")]
    assert sorted(decoded[1]) == ["id", "name"]  # the empty score cell is a missing feature
    assert decoded[1]["id"].tolist() == [2] and decoded[1]["name"] == [b"dog"]
    assert run("convert", str(tmp_path / "t.tfrecord.gz"), str(tmp_path / "t.jsonl")).returncode == 0
    assert [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()] == [
        {"id": 1, "name": "cat", "score": 0.5}, {"id": 2, "name": "dog"}, {"id": 3, "score": 2.25}]
    assert run("convert", str(tmp_path / "t.jsonl"), str(tmp_path / "of"), "--to", "ofrecord", "--shards", "2").returncode == 0
    assert sorted(p.name for p in (tmp_path / "of").iterdir() if not p.name.startswith(".")) == ["part-00000", "part-00001"]
    assert run("convert", str(tmp_path / "of"), str(tmp_path / "t.npz")).returncode == 0
    import numpy as np

    arrays = np.load(tmp_path / "t.npz")
    assert arrays["id"].tolist() == [1, 2, 3] and arrays["name.row_splits"].tolist() == [0, 1, 2, 2]
    assert run("convert", str(tmp_path / "t.npz"), str(tmp_path / "t2.csv")).returncode == 0
    assert (tmp_path / "t2.csv").read_text().splitlines()[0] == "id,name,score"


def test_convert_failure_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "photos" / "cat").mkdir(parents=True)
    (tmp_path / "photos" / "cat" / "a.jpg").write_bytes(b"not an image")
    result = run("convert", str(tmp_path / "photos"), str(tmp_path / "out.tfrecord"))
    assert result.returncode == 2 and "a.jpg" in result.stderr and len(result.stderr.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["photos"]
    assert run("convert", str(tmp_path / "photos"), str(tmp_path / "x.unknown")).stderr.count("\n") == 1


def test_records_that_are_not_examples_are_counted_not_fatal(conformance_dir: Path, tmp_path: Path) -> None:
    path = str(conformance_dir / "zero-length.tfrecord")  # records b"", b"x", b"", and an Example
    schema = json.loads(run("inspect", path, "--json").stdout)
    assert schema["records"] == 4 and schema["undecodable"] == 1 and schema["features"]["feature2"]["present"] == 1
    refused = run("convert", path, str(tmp_path / "t.parquet"))
    assert refused.returncode == 2 and "record 1" in refused.stderr and not (tmp_path / "t.parquet").exists()
    copied = run("convert", path, str(tmp_path / "t.tfrecord.gz"), "--output-compression", "gzip")
    assert copied.returncode == 0, copied.stderr
    assert list(rk.TFRecordReader(tmp_path / "t.tfrecord.gz")) == list(rk.TFRecordReader(path))


def test_convert_refuses_files_that_are_not_images(tmp_path: Path) -> None:
    images = Path(__file__).resolve().parent.parent / "docs" / "images"
    (tmp_path / "photos" / "cat").mkdir(parents=True)
    (tmp_path / "photos" / "cat" / "cat.jpg").write_bytes((images / "cat.jpg").read_bytes())
    (tmp_path / "photos" / "cat" / "notes.txt").write_text("not an image")
    result = run("convert", str(tmp_path / "photos"), str(tmp_path / "out.tfrecord"))
    assert result.returncode == 2 and "notes.txt" in result.stderr and not (tmp_path / "out.tfrecord").exists()


# --- rough edges a first hour finds -----------------------------------------------------


def test_debug_works_before_and_after_the_subcommand(tmp_path: Path) -> None:
    for args in (["--debug", "count", str(tmp_path / "absent")], ["count", str(tmp_path / "absent"), "--debug"]):
        result = run(*args)
        assert result.returncode != 0 and "Traceback" in result.stderr, args
    plain = run("count", str(tmp_path / "absent"))
    assert "Traceback" not in plain.stderr and plain.stderr.count("\n") == 1


@pytest.mark.parametrize("args, complaint", [
    (["stats", "--limit", "-5"], "must be at least 1"),
    (["stats", "--plot", "out.jpg"], ".png"),
    (["head", "-n", "-1"], "must be at least 0"),
    (["inspect", "--limit", "0"], "must be at least 1"),
    (["convert", "--shards", "0"], "must be at least 1"),
])
def test_option_values_are_checked_before_any_work(tmp_path: Path, args: list[str], complaint: str) -> None:
    # The source does not exist: a command that did any work before checking its
    # options would complain about the missing file instead.
    path = tmp_path / "absent.tfrecord"
    extra = [str(tmp_path / "out.tfrecord")] if args[0] == "convert" else []
    result = run(*args, str(path), *extra)
    assert result.returncode == 2 and complaint in result.stderr and "islice" not in result.stderr, result.stderr
    assert not (tmp_path / "out.jpg").exists() and not (tmp_path / "out.tfrecord").exists()


def test_a_malformed_json_lines_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text('{"a": 1}\n{"a": \n')
    result = run("convert", str(tmp_path / "t.jsonl"), str(tmp_path / "t.tfrecord"))
    assert result.returncode == 2 and f"{tmp_path / 't.jsonl'}:2: not valid JSON" in result.stderr


@pytest.mark.parametrize("layout", ["stray file", "no class folders"])
def test_files_that_are_not_images_in_an_image_folder_are_reported_as_such(tmp_path: Path, layout: str) -> None:
    photos = tmp_path / "photos"
    jpeg = (REPO / "docs" / "images" / "cat.jpg").read_bytes()
    if layout == "stray file":
        (photos / "cat").mkdir(parents=True)
        (photos / "cat" / "a.jpg").write_bytes(jpeg)
        (photos / "labels.txt").write_text("cat\n")
        expected = "labels.txt: a file beside the class folders"
    else:
        photos.mkdir()
        (photos / "a.jpg").write_bytes(jpeg)
        expected = "put them in one subfolder per class"
    result = run("convert", str(photos), str(tmp_path / "out.tfrecord"))
    assert result.returncode == 2 and expected in result.stderr and "truncated record" not in result.stderr, result.stderr


def test_convert_offers_only_what_it_writes_and_compression_means_the_input(tmp_path: Path) -> None:
    assert "invalid choice: 'images'" in run("convert", "a.tfrecord", "b", "--to", "images").stderr
    with rk.TFRecordWriter(tmp_path / "g.data", compression="gzip") as writer:
        writer.write_many([b"a", b"b"])
    out = run("convert", str(tmp_path / "g.data"), str(tmp_path / "z.tfrecord"), "--compression", "gzip",
              "--output-compression", "zlib", "--from", "tfrecord")
    assert out.returncode == 0, out.stderr
    assert rk.TFRecordReader(tmp_path / "z.tfrecord").compression == "zlib"
    assert list(rk.TFRecordReader(tmp_path / "z.tfrecord")) == [b"a", b"b"]


def test_content_wins_over_the_suffix_when_detecting_compression(tmp_path: Path) -> None:
    with rk.TFRecordWriter(tmp_path / "z.tfrecord.zz", compression="zlib") as writer:
        writer.write_many([b"a", b"b"])
    os.rename(tmp_path / "z.tfrecord.zz", tmp_path / "z.tfrecord.gz")  # a ZLIB stream named .gz
    assert list(rk.TFRecordReader(tmp_path / "z.tfrecord.gz")) == [b"a", b"b"]
    assert run("count", str(tmp_path / "z.tfrecord.gz")).stdout.strip() == "2"


def test_verify_and_salvage_lines_give_the_record_and_the_offset_once(tmp_path: Path) -> None:
    path = tmp_path / "v.tfrecord"
    rk.write_examples(path, {"a": list(range(5))})
    data = bytearray(path.read_bytes())
    data[40] ^= 1  # inside the second record's header
    path.write_bytes(bytes(data))
    verify = run("verify", str(path))
    [line] = verify.stdout.splitlines()
    assert line == f"{path}: record 1, offset 30: corrupted record: the length field fails its CRC (30 bytes skipped)"
    salvage = run("salvage", str(path), str(tmp_path / "f.tfrecord"))
    assert salvage.stdout.splitlines()[-1] == f"kept 4 records; skipped 30 bytes in 1 damaged region -> {tmp_path / 'f.tfrecord'}"
    one = tmp_path / "one.tfrecord"
    rk.write_examples(one, {"a": [1]})
    assert run("verify", str(one)).stdout.strip() == f"{one}: OK, 1 record"


def test_salvage_of_a_file_with_no_record_fails_and_writes_nothing(tmp_path: Path) -> None:
    picture = Path(__file__).parent.parent / "docs" / "images" / "cat.jpg"
    result = run("salvage", str(picture), str(tmp_path / "out.tfrecord"))
    assert result.returncode == 1
    assert "no intact record" in result.stderr and "nothing written" in result.stderr
    assert not (tmp_path / "out.tfrecord").exists()
    empty = tmp_path / "empty.tfrecord"
    empty.write_bytes(b"")
    assert run("salvage", str(empty), str(tmp_path / "copy.tfrecord")).returncode == 0  # nothing lost: nothing there


def test_cat_and_head_cut_long_values_and_show_their_length(tmp_path: Path) -> None:
    image = bytes(range(255, -1, -1)) * 20  # not UTF-8
    rk.write_examples(tmp_path / "i.tfrecord", {"image": [image], "name": ["é" * 80]})
    line = json.loads(run("head", str(tmp_path / "i.tfrecord")).stdout)
    assert line["image"][0]["bytes"] == 5120 and len(line["image"][0]["cut"]["base64"]) == 136  # 100 bytes
    assert line["name"][0] == {"cut": "é" * 50, "bytes": 160}  # whole characters
    assert json.loads(run("head", str(tmp_path / "i.tfrecord"), "--max-bytes", "0").stdout)["name"] == ["é" * 80]
    text = run("cat", str(tmp_path / "i.tfrecord"), "--format", "text", "--max-bytes", "4").stdout
    assert 'value: "\\377\\376\\375\\374"  # 5120 bytes, first 4 shown' in text
    assert run("head", str(tmp_path / "i.tfrecord"), "--max-bytes", "-1").returncode == 2
