"""Random access: index files (ours, DALI's, the tfrecord package's) and IndexedDataset."""

from __future__ import annotations

import importlib.util
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import recordkit as rk
from reference import frame_tfrecord, record_offsets


def make(path: Path, n: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    records = [rk.encode_example({"i": i, "blob": rng.randbytes(rng.randrange(0, 300))}) for i in range(n)]
    path.write_bytes(frame_tfrecord(records))
    return records


def test_index_format(tmp_path: Path) -> None:
    records = make(tmp_path / "a.tfrecord", 50)
    index_path = rk.build_index(tmp_path / "a.tfrecord")
    assert index_path == str(tmp_path / "a.tfrecord.idx")
    lines = Path(index_path).read_text().splitlines()
    offsets = record_offsets(records)
    assert lines == [f"{offsets[i]} {offsets[i + 1] - offsets[i]}" for i in range(50)]
    got_offsets, got_sizes = rk.read_index(index_path)
    assert got_offsets.tolist() == offsets[:-1] and int(got_sizes.sum()) == os.path.getsize(tmp_path / "a.tfrecord")


def test_random_access_equals_sequential_reading(tmp_path: Path) -> None:
    a = make(tmp_path / "a.tfrecord", 40, seed=1)
    b = make(tmp_path / "b.tfrecord", 0, seed=2)
    c = make(tmp_path / "c.tfrecord", 25, seed=3)
    everything = a + b + c
    ds = rk.IndexedDataset([tmp_path / "a.tfrecord", tmp_path / "b.tfrecord", tmp_path / "c.tfrecord"])
    assert len(ds) == 65
    order = list(range(65))
    random.Random(7).shuffle(order)
    assert [ds[i] for i in order] == [everything[i] for i in order]
    assert ds.__getitems__(order) == [everything[i] for i in order]
    assert ds[-1] == everything[-1]
    with pytest.raises(IndexError):
        ds[65]
    # The indexes were built on first use and cached beside the files.
    assert (tmp_path / "a.tfrecord.idx").exists() and (tmp_path / "c.tfrecord.idx").exists()


def test_parsed_items_and_batches(tmp_path: Path) -> None:
    make(tmp_path / "a.tfrecord", 30)
    spec = {"i": rk.FixedLenFeature([], "int64"), "blob": rk.FixedLenFeature([], "string")}
    ds = rk.IndexedDataset(tmp_path / "a.tfrecord", spec)
    assert ds[7]["i"].item() == 7
    assert ds.__getitems__([3, 1, 4])["i"].tolist() == [3, 1, 4]


def test_tfrecord_package_index_is_accepted(tmp_path: Path) -> None:
    if importlib.util.find_spec("tfrecord") is None:
        pytest.skip("the tfrecord package is not installed")
    records = make(tmp_path / "a.tfrecord", 20)
    # In its own process: its generated protos clash with TensorFlow's if both load in one.
    code = "import sys; from tfrecord.tools.tfrecord2idx import create_index; create_index(sys.argv[1], sys.argv[2])"
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "a.tfrecord"), str(tmp_path / "a.tfindex")], check=True)
    ds = rk.IndexedDataset(tmp_path / "a.tfrecord", index=tmp_path / "a.tfindex")
    assert [ds[i] for i in range(20)] == records
    rk.build_index(tmp_path / "a.tfrecord", tmp_path / "ours.idx")
    assert (tmp_path / "ours.idx").read_text().split() == (tmp_path / "a.tfindex").read_text().split()


def test_compressed_files_are_refused_clearly(tmp_path: Path) -> None:
    with rk.TFRecordWriter(tmp_path / "a.tfrecord.gz", compression="gzip") as writer:
        writer.write(b"x")
    for call in (lambda: rk.build_index(tmp_path / "a.tfrecord.gz"), lambda: rk.IndexedDataset(tmp_path / "a.tfrecord.gz")):
        with pytest.raises(ValueError, match="compressed"):
            call()


def test_damage_and_wrong_indexes_are_data_loss(tmp_path: Path) -> None:
    records = make(tmp_path / "a.tfrecord", 10)
    offsets = record_offsets(records)
    data = bytearray((tmp_path / "a.tfrecord").read_bytes())
    data[offsets[4] + 14] ^= 0xFF
    (tmp_path / "a.tfrecord").write_bytes(bytes(data))
    ds = rk.IndexedDataset(tmp_path / "a.tfrecord", index=rk.build_index(tmp_path / "a.tfrecord"))
    assert ds[3] == records[3]
    with pytest.raises(rk.DataLossError) as info:
        ds[4]
    assert (info.value.offset, info.value.record_index) == (offsets[4] + 12, 4)
    (tmp_path / "wrong.idx").write_text("1 50\n")
    with pytest.raises(rk.DataLossError):
        rk.IndexedDataset(tmp_path / "a.tfrecord", index=tmp_path / "wrong.idx")[0]
    (tmp_path / "bad.idx").write_text("not an index\n")
    with pytest.raises(ValueError, match="index"):
        rk.read_index(tmp_path / "bad.idx")
    assert rk.read_index(tmp_path / "wrong.idx")[0].tolist() == [1]


def test_many_files_are_indexed_together(tmp_path: Path) -> None:
    paths = [tmp_path / f"f{i}.tfrecord" for i in range(5)]
    for i, path in enumerate(paths):
        make(path, 10 * i, seed=i)
    written = rk.build_index(paths)
    assert written == [str(p) + ".idx" for p in paths]
    assert [len(rk.read_index(w)[0]) for w in written] == [0, 10, 20, 30, 40]
    with pytest.raises(ValueError, match="one index"):
        rk.build_index(paths, tmp_path / "x.idx")
