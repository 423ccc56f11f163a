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
        ".train-N-of-N.tfrecord.recordkit-set", "train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"]
    assert sum(rk.count_records(p) for p in rk.list_files(str(tmp_path / "out" / "*.tfrecord"))) == 1000


def test_resharding_leaves_other_names_alone(tmp_path: Path) -> None:
    rk.write_examples(tmp_path / "train.tfrecord", rows(10), shards=3)
    rk.write_examples(tmp_path / "eval.tfrecord", rows(10), shards=3)
    rk.write_examples(tmp_path / "train.tfrecord.gz", rows(10), shards=3, compression="gzip")
    rk.write_examples(tmp_path / "train.tfrecord", rows(10), shards=2)
    names = sorted(n for n in os.listdir(tmp_path) if not n.startswith("."))
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
    assert sorted(os.listdir(tmp_path / "ds")) == [".part-N.recordkit-set", "part-00000", "part-00001"]
    assert sum(1 for _ in rk.Dataset(tmp_path / "ds")) == 1000


def test_convert_with_fewer_shards_replaces_the_old_set(tmp_path: Path) -> None:
    source = tmp_path / "table.tfrecord"
    rk.write_examples(source, rows(1000))
    for shards in ("3", "2"):
        subprocess.run([sys.executable, "-m", "recordkit", "convert", str(source),
                        str(tmp_path / "out" / "train.tfrecord"), "--shards", shards], check=True)
    assert len([n for n in os.listdir(tmp_path / "out") if not n.startswith(".")]) == 2
    assert sum(rk.count_records(p) for p in rk.list_files(tmp_path / "out")) == 1000
    for parts in (4, 2):
        rk.convert(source, tmp_path / "of", destination_format="ofrecord", shards=parts)
    assert sorted(os.listdir(tmp_path / "of")) == [".part-N.recordkit-set", "part-00000", "part-00001"]


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
        f".recordkit-convert-{os.getpid()}-0badc0de-00000", ".t-N-of-N.tfrecord.recordkit-set",
        "t-00000-of-00002.tfrecord", "t-00001-of-00002.tfrecord"]


# --- a set is committed as a set ---------------------------------------------------------

_KILLED_BETWEEN_RENAMES = """
import os, sys
import numpy as np
import recordkit as rk

real_replace, renames = os.replace, []
def replace(src, dst):
    if not os.path.basename(dst).startswith("."):  # a file of the set, not the manifest
        if len(renames) == int(sys.argv[3]):
            os._exit(137)  # as kill -9 between two renames: nothing is cleaned up
        renames.append(dst)
    real_replace(src, dst)
os.replace = replace
if sys.argv[2] == "examples":
    rk.write_examples(sys.argv[1] + "/train.tfrecord", {"id": np.arange(100, 130)}, shards=3)
else:
    rk.write_ofrecord_parts([b"new"] * 30, sys.argv[1], num_parts=3)
"""


@pytest.mark.parametrize("writer", ["examples", "ofrecord"])
@pytest.mark.parametrize("renamed", [0, 1, 2])
def test_a_writer_killed_between_renames_leaves_no_readable_mix(tmp_path: Path, writer: str, renamed: int) -> None:
    if writer == "examples":
        rk.write_examples(tmp_path / "train.tfrecord", rows(20), shards=3)  # the old set: same names
    else:
        rk.write_ofrecord_parts([b"old"] * 20, tmp_path, num_parts=3)
    run = subprocess.run([sys.executable, "-c", _KILLED_BETWEEN_RENAMES, str(tmp_path), writer, str(renamed)])
    assert run.returncode == 137
    for source in (str(tmp_path), f"{tmp_path}/*"):
        if renamed == 0:  # nothing renamed yet: every file is old, and the manifest already new
            with pytest.raises(ValueError, match="did not finish"):
                rk.list_files(source)
        else:
            with pytest.raises(ValueError, match="did not finish"):
                list(rk.Dataset(source))
    # Writing the set again repairs it.
    rk.write_examples(tmp_path / "train.tfrecord", rows(10), shards=3) if writer == "examples" else \
        rk.write_ofrecord_parts([b"again"] * 10, tmp_path, num_parts=3)
    assert sum(1 for _ in rk.Dataset(tmp_path)) == 10


def test_a_rewrite_that_fails_mid_way_leaves_the_old_set_whole(tmp_path: Path) -> None:
    rk.write_ofrecord_parts([b"old"] * 30, tmp_path, num_parts=3)

    def records():  # a full disk, as the writer sees it
        yield from [b"new"] * 500
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        rk.write_ofrecord_parts(records(), tmp_path, num_parts=2)
    assert sorted(rk.Dataset(tmp_path)) == [b"old"] * 30
    assert sorted(n for n in os.listdir(tmp_path) if not n.startswith(".")) == ["part-00000", "part-00001", "part-00002"]


def test_files_of_a_replaced_set_whose_removal_was_cut_short_are_left_out(tmp_path: Path) -> None:
    old = rk.write_examples(tmp_path / "train.tfrecord", rows(30), shards=3)
    kept = {p: Path(p).read_bytes() for p in old}
    rk.write_examples(tmp_path / "train.tfrecord", rows(10), shards=2)
    for path, data in kept.items():  # as if the writer died before removing them
        Path(path).write_bytes(data)
    with pytest.warns(UserWarning, match="left out 3 file.* older set .*removal was cut short"):
        assert sum(1 for _ in rk.Dataset(tmp_path)) == 10
    with pytest.warns(UserWarning, match="left out 3 file"):
        assert len(rk.list_files(f"{tmp_path}/train-*")) == 2
    with pytest.raises(FileNotFoundError, match="older set"):
        rk.list_files(f"{tmp_path}/train@3")


def test_fsync_flushes_every_file_of_a_set_the_manifest_and_the_folder(tmp_path: Path, fsynced: list[str]) -> None:
    rk.write_examples(tmp_path / "t.tfrecord", rows(10), shards=2, fsync=True)
    synced = [os.path.basename(p) for p in fsynced]
    assert sum(name.startswith(".t-0000") for name in synced) == 2  # each file, under its temporary name
    assert any(name.startswith(".t-N-of-N.tfrecord.recordkit-set.tmp-") for name in synced)  # the manifest
    assert synced.count(tmp_path.name) == 2  # the folder, after each rename
    fsynced.clear()
    rk.write_examples(tmp_path / "t.tfrecord", rows(10), shards=2)
    assert fsynced == []


def test_convert_fsync_flushes_shards_manifest_and_folder(tmp_path: Path, fsynced: list[str]) -> None:
    source = tmp_path / "in.tfrecord"
    rk.write_examples(source, rows(10))
    rk.convert(source, tmp_path / "out" / "t.tfrecord", shards=2, fsync=True)
    synced = [os.path.basename(p) for p in fsynced]
    assert sum(".recordkit-convert-" in name for name in synced) == 2  # each staged shard
    assert any(name.startswith(".t-N-of-N.tfrecord.recordkit-set.tmp-") for name in synced)
    assert synced[-1] == "out"  # the folder, after the renames
    fsynced.clear()
    rk.convert(source, tmp_path / "t.parquet", fsync=True)
    synced = [os.path.basename(p) for p in fsynced]
    assert len(synced) == 2 and synced[0].startswith(".t.parquet.tmp-") and synced[1] == tmp_path.name


def test_a_set_written_later_by_another_tool_is_never_dropped(tmp_path: Path) -> None:
    rk.write_examples(tmp_path / "train", rows(6), shards=3)  # recordkit's set, with its manifest
    for i in range(4):  # then TensorFlow writes a set of the same name, with no manifest
        with rk.TFRecordWriter(tmp_path / f"train-{i:05d}-of-00004") as writer:
            writer.write(rk.encode_example({"id": 100 + i}))
    for source in (tmp_path, f"{tmp_path}/train-*"):
        with pytest.raises(ValueError, match="train-NNNNN-of-00003 and train-NNNNN-of-00004"):
            rk.list_files(source)
    assert len(rk.list_files(f"{tmp_path}/train@4")) == 4
    assert len(rk.list_files(f"{tmp_path}/train@3")) == 3


def test_a_file_the_manifest_replaced_but_that_changed_since_is_not_left_out(tmp_path: Path) -> None:
    old = rk.write_examples(tmp_path / "train.tfrecord", rows(30), shards=3)
    rk.write_examples(tmp_path / "train.tfrecord", rows(10), shards=2)
    for path in old:  # a set of the old name written again, by something that keeps no manifest
        with rk.TFRecordWriter(path) as writer:
            writer.write(rk.encode_example({"id": 7}))
    with pytest.raises(ValueError, match="more than one shard set of one name"):
        rk.list_files(tmp_path)


def test_a_compression_suffix_is_not_part_of_a_sets_name(tmp_path: Path) -> None:
    for i in range(4):  # as a TensorFlow job that compressed one shard wrote them
        gz = i == 2
        with rk.TFRecordWriter(tmp_path / f"data-{i:05d}-of-00004.tfrecord{'.gz' if gz else ''}",
                               compression="gzip" if gz else None) as writer:
            writer.write(rk.encode_example({"id": i}))
    files = rk.list_files(tmp_path)
    assert [os.path.basename(f) for f in files] == [
        "data-00000-of-00004.tfrecord", "data-00001-of-00004.tfrecord", "data-00002-of-00004.tfrecord.gz",
        "data-00003-of-00004.tfrecord"]
    assert rk.count_records(tmp_path) == 4
    (tmp_path / "data-00001-of-00004.tfrecord").unlink()
    with pytest.raises(FileNotFoundError, match=r"data-NNNNN-of-00004.tfrecord is incomplete: 1 of 4 .*\(00001\)"):
        rk.list_files(tmp_path)


def test_a_shard_present_compressed_and_not_is_refused_not_read_twice(tmp_path: Path) -> None:
    rk.write_examples(tmp_path / "train.tfrecord", rows(10), shards=2)
    rk.convert(tmp_path / "train-00000-of-00002.tfrecord", tmp_path / "train-00000-of-00002.tfrecord.gz")
    assert len([n for n in os.listdir(tmp_path) if n.startswith("train-")]) == 3  # the copy left the set alone
    with pytest.raises(ValueError, match="holds shard train-00000-of-00002.tfrecord more than once"):
        rk.list_files(tmp_path)
