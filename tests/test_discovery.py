"""Finding files: what a folder listing reads and passes over, and one format rule for every reader."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import recordkit as rk
from recordkit.discovery import is_listed_record_file

SPEC = {"id": rk.FixedLenFeature([], "int64")}


@pytest.mark.parametrize("name, verdict", [
    ("train-00000-of-00002.tfrecord", True), ("data", True), ("part-00003", True), ("x.tfrecord.gz", True),
    (".train.tfrecord.tmp-1-ab", False), ("_SUCCESS", False), ("a.tfrecord.idx", False),
    ("images.labels.json", False), ("README.md", None), ("meta.json", None), ("rows.csv", None),
    ("LICENSE", None),
])
def test_what_a_listing_does_with_each_name(name: str, verdict: bool | None) -> None:
    assert is_listed_record_file(name) is verdict


def test_a_folder_passes_over_side_files_quietly_and_other_files_with_a_warning(tmp_path: Path) -> None:
    rk.write_examples(tmp_path / "train.tfrecord", {"id": np.arange(5)})
    (tmp_path / "train.labels.json").write_text(json.dumps({"cat": 0}))
    rk.build_index(tmp_path / "train.tfrecord")
    assert rk.list_files(tmp_path) == [str(tmp_path / "train.tfrecord")]  # no warning: pytest turns them into errors
    (tmp_path / "README.md").write_text("# my data\n")
    (tmp_path / "stats.json").write_text("{}")
    with pytest.warns(UserWarning, match=r"passed over 2 file\(s\) that are not record files \(README.md, stats.json\)"):
        assert rk.list_files(tmp_path) == [str(tmp_path / "train.tfrecord")]
    with pytest.warns(UserWarning, match="README.md"):
        assert rk.count_records(tmp_path) == 5
    assert rk.list_files(tmp_path / "README.md") == [str(tmp_path / "README.md")]  # named, it is read


def test_the_readmes_image_folder_output_reads_back_as_a_folder(tmp_path: Path) -> None:
    images = Path(__file__).parent.parent / "docs" / "images"
    for label in ("cat", "bridge"):
        (tmp_path / "photos" / label).mkdir(parents=True)
        (tmp_path / "photos" / label / f"{label}.jpg").write_bytes((images / f"{label}.jpg").read_bytes())
    out = tmp_path / "out"
    rk.convert(tmp_path / "photos", out / "images.tfrecord")
    assert (out / "images.labels.json").exists()
    assert rk.count_records(out) == 2
    assert rk.read_table(out).num_rows == 2
    run = subprocess.run([sys.executable, "-m", "recordkit", "inspect", str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "image_raw" in run.stdout and "warning" not in run.stderr


def test_every_reader_finds_ofrecord_part_folders_by_the_same_rule(tmp_path: Path) -> None:
    rk.write_ofrecords(tmp_path / "parts", {"id": np.arange(6)}, num_parts=2)
    folder = tmp_path / "parts"
    batches = list(rk.read_examples(folder, SPEC, batch_size=4))
    assert sorted(int(i) for batch in batches for i in batch["id"]) == list(range(6))
    assert rk.count_records(folder) == 6
    assert sorted(rk.read_table(folder).column("id").to_pylist()) == list(range(6))
    assert sum(1 for _ in rk.Dataset(folder)) == 6
    stats = rk.feature_stats(folder)
    assert stats.records == 6
    with pytest.raises(rk.DataLossError, match="is this even a TFRecord file"):
        next(rk.read_examples(folder, SPEC, format="tfrecord"))
    with pytest.raises(ValueError, match='format must be "auto", "tfrecord" or "ofrecord"'):
        rk.read_examples(folder, SPEC, format="parquet")


def test_a_glob_of_other_files_warns_and_finds_nothing(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    with pytest.warns(UserWarning, match="notes.txt"), pytest.raises(FileNotFoundError, match="no record file"):
        rk.list_files(f"{tmp_path}/*")
