"""Shard sets and OneFlow part folders: a rewrite replaces the old set, and readers refuse ambiguity."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import recordkit as rk


def rows(n: int) -> dict[str, np.ndarray]:
    return {"id": np.arange(n)}


def test_resharding_with_fewer_shards_replaces_the_old_set(tmp_path: Path) -> None:
    rk.write_examples(tmp_path / "out" / "train.tfrecord", rows(1000), shards=3)
    rk.write_examples(tmp_path / "out" / "train.tfrecord", rows(1000), shards=2)
    assert sorted(os.listdir(tmp_path / "out")) == [
        "train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"]
    assert sum(rk.count_records(p) for p in rk.list_files(str(tmp_path / "out" / "*.tfrecord"))) == 1000


def test_resharding_leaves_other_names_alone(tmp_path: Path) -> None:
    rk.write_examples(tmp_path / "train.tfrecord", rows(10), shards=3)
    rk.write_examples(tmp_path / "eval.tfrecord", rows(10), shards=3)
    rk.write_examples(tmp_path / "train.tfrecord.gz", rows(10), shards=3, compression="gzip")
    rk.write_examples(tmp_path / "train.tfrecord", rows(10), shards=2)
    names = sorted(os.listdir(tmp_path))
    assert sum(n.startswith("eval-") for n in names) == 3
    assert sum(n.endswith(".gz") for n in names) == 3
    assert sum(n.startswith("train-") and n.endswith(".tfrecord") for n in names) == 2


def test_writing_one_shard_by_name_keeps_its_siblings(tmp_path: Path) -> None:
    for i in range(3):
        rk.write_examples(tmp_path / f"t-{i:05d}-of-00003.tfrecord", rows(2))
    assert len(os.listdir(tmp_path)) == 3


def test_ofrecord_parts_with_fewer_parts_replace_the_old_folder(tmp_path: Path) -> None:
    rk.write_ofrecords(tmp_path / "ds", rows(1000), num_parts=4)
    rk.write_ofrecords(tmp_path / "ds", rows(1000), num_parts=2)
    assert sorted(os.listdir(tmp_path / "ds")) == ["part-00000", "part-00001"]
    assert sum(1 for _ in rk.Dataset(tmp_path / "ds")) == 1000


def test_convert_with_fewer_shards_replaces_the_old_set(tmp_path: Path) -> None:
    source = tmp_path / "table.tfrecord"
    rk.write_examples(source, rows(1000))
    for shards in ("3", "2"):
        subprocess.run([sys.executable, "-m", "recordkit", "convert", str(source),
                        str(tmp_path / "out" / "train.tfrecord"), "--shards", shards], check=True)
    assert len(os.listdir(tmp_path / "out")) == 2
    assert sum(rk.count_records(p) for p in rk.list_files(tmp_path / "out")) == 1000
    for parts in (4, 2):
        rk.convert(source, tmp_path / "of", destination_format="ofrecord", shards=parts)
    assert sorted(os.listdir(tmp_path / "of")) == ["part-00000", "part-00001"]


@pytest.mark.parametrize("source", ["{d}", "{d}/train-*.tfrecord"])
def test_two_complete_sets_of_one_name_are_refused(tmp_path: Path, source: str) -> None:
    for i in range(3):
        rk.write_examples(tmp_path / f"train-{i:05d}-of-00003.tfrecord", rows(1))
    for i in range(2):
        rk.write_examples(tmp_path / f"train-{i:05d}-of-00002.tfrecord", rows(1))
    with pytest.raises(ValueError, match=r"train-NNNNN-of-00002\.tfrecord and train-NNNNN-of-00003\.tfrecord"):
        rk.list_files(source.format(d=tmp_path))
    assert len(rk.list_files(str(tmp_path / "train-*-of-00003.tfrecord"))) == 3  # naming one set works


def test_at_n_finds_recordkit_shard_names(tmp_path: Path) -> None:
    paths = rk.write_examples(tmp_path / "out" / "train.tfrecord", rows(9), shards=3)
    assert rk.list_files(f"{tmp_path}/out/train@3") == paths
    assert rk.list_files(f"{tmp_path}/out/train.tfrecord@3") == paths
    with pytest.raises(FileNotFoundError, match=r"tried .*train-00000-of-00004, .*train-00000-of-00004\.tfrecord"):
        rk.list_files(f"{tmp_path}/out/train@4")


def test_staged_shards_of_a_killed_conversion_are_removed_by_the_next(tmp_path: Path) -> None:
    source = tmp_path / "in.tfrecord"
    rk.write_examples(source, rows(10))
    out = tmp_path / "out"
    out.mkdir()
    (out / ".recordkit-convert-999999999-0badc0de-00000").write_bytes(b"left by a killed conversion")
    (out / f".recordkit-convert-{os.getpid()}-0badc0de-00000").write_bytes(b"a live one's")
    rk.convert(source, out / "t.tfrecord", shards=2)
    assert sorted(p.name for p in out.iterdir()) == [
        f".recordkit-convert-{os.getpid()}-0badc0de-00000", "t-00000-of-00002.tfrecord", "t-00001-of-00002.tfrecord"]
