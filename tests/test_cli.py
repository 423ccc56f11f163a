"""The recordkit command, run as a user runs it: a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import recordkit as rk
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
