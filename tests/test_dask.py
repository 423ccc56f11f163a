"""recordkit.dask: Dask DataFrames read and written through recordkit, on Dask's local schedulers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import recordkit as rk
from conftest import damage_record, tensorflow_ids, uneven_shards

dask = pytest.importorskip("dask")
pytest.importorskip("dask.dataframe")
rkd = pytest.importorskip("recordkit.dask")


@pytest.mark.parametrize(("scheduler", "compression"), [
    ("synchronous", None), ("synchronous", "gzip"), ("synchronous", "zlib"), ("threads", None), ("processes", "gzip"),
])
def test_every_record_read_once_and_written_back(tmp_path: Path, scheduler: str, compression: str | None) -> None:
    total = uneven_shards(tmp_path / "in", compression)
    with dask.config.set(scheduler=scheduler):
        ddf = rkd.read_tfrecords(tmp_path / "in", npartitions=7)
        frame = ddf.compute()
        assert sorted(frame["id"].tolist()) == list(range(total))  # each record once, counted one by one
        assert frame["id"].tolist() == list(range(total))  # and in file order
        assert [list(t) for t in frame["tags"][:5]] == [[], [0], [0, 1], [0, 1, 2], []]
        written = rkd.to_tfrecords(ddf, tmp_path / "out", compression=compression)
    back = rk.read_table(tmp_path / "out").to_pandas()
    assert back["id"].tolist() == list(range(total))
    assert back["name"].tolist() == [b"r%d" % i for i in range(total)]
    assert all(Path(p).exists() for p in written)
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]


def test_a_large_file_is_split_into_ranges(tmp_path: Path) -> None:
    total = uneven_shards(tmp_path, sizes=(60000,))
    ddf = rkd.read_tfrecords(tmp_path, npartitions=4)
    assert ddf.npartitions == 4
    parts = [len(part.compute(scheduler="synchronous")) for part in ddf.to_delayed()]
    assert sum(parts) == total and min(parts) > 0
    with dask.config.set(scheduler="synchronous"):
        assert sorted(ddf["id"].compute().tolist()) == list(range(total))
        assert ddf[["id"]].compute().columns.tolist() == ["id"]


def test_a_damaged_record_fails_the_job_with_its_offset(tmp_path: Path) -> None:
    uneven_shards(tmp_path, sizes=(5000, 20000))
    offset = damage_record(tmp_path / "part-00001.tfrecord", 12345)
    with dask.config.set(scheduler="threads"), pytest.raises(rk.DataLossError) as error:
        rkd.read_tfrecords(tmp_path, npartitions=4).compute()
    assert error.value.offset == offset and error.value.path.endswith("part-00001.tfrecord")


def test_a_failed_write_leaves_nothing(tmp_path: Path) -> None:
    import dask.dataframe as dd
    import pandas as pd

    good = pd.DataFrame({"x": np.array([1, 2, 3], np.uint64)})
    bad = pd.DataFrame({"x": np.array([1, 2**63, 3], np.uint64)})  # beyond an int64_list
    ddf = dd.from_map(lambda frame: frame, [good, good, bad, good])
    with dask.config.set(scheduler="threads"), pytest.raises(ValueError, match="does not fit an int64"):
        rkd.to_tfrecords(ddf, tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []


def test_tensorflow_reads_what_dask_wrote(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    total = uneven_shards(tmp_path / "in")
    with dask.config.set(scheduler="synchronous"):
        written = rkd.to_tfrecords(rkd.read_tfrecords(tmp_path / "in", npartitions=3), tmp_path / "out")
    ids = tensorflow_ids(written)
    assert ids == list(range(total))


def test_ofrecord_parts_and_remote_files(tmp_path: Path) -> None:
    fsspec = pytest.importorskip("fsspec")
    rk.write_ofrecords(tmp_path / "of", {"x": np.arange(5000, dtype=np.int32), "y": np.arange(5000.0)}, num_parts=3)
    with dask.config.set(scheduler="synchronous"):
        frame = rkd.read_tfrecords(tmp_path / "of", npartitions=4).compute()
    assert frame["x"].tolist() == list(range(5000)) and str(frame["y"].dtype) == "double[pyarrow]"
    uneven_shards(tmp_path / "local", sizes=(300, 200))
    fs = fsspec.filesystem("memory")
    for name in ("part-00000.tfrecord", "part-00001.tfrecord"):
        fs.pipe(f"memory://rk-dask/{name}", (tmp_path / "local" / name).read_bytes())
    with dask.config.set(scheduler="synchronous"):
        remote = rkd.read_tfrecords("memory://rk-dask/*.tfrecord", npartitions=4)
        assert remote.npartitions == 2  # remote files are read whole
        assert remote["id"].compute().tolist() == list(range(500))


def test_empty_partitions_write_no_file(tmp_path: Path) -> None:
    import dask.dataframe as dd
    import pandas as pd

    frames = [pd.DataFrame({"x": np.arange(3)}), pd.DataFrame({"x": np.arange(0)}), pd.DataFrame({"x": np.arange(2)})]
    with dask.config.set(scheduler="synchronous"):
        written = rkd.to_tfrecords(dd.from_map(lambda frame: frame, frames), tmp_path / "out")
    assert [Path(p).name[-14:] for p in written] == ["00000.tfrecord", "00002.tfrecord"]
    assert rk.read_table(tmp_path / "out").column("x").to_pylist() == [0, 1, 2, 0, 1]


def test_skipping_damage_only_when_asked(tmp_path: Path) -> None:
    total = uneven_shards(tmp_path, sizes=(5000, 20000))
    damage_record(tmp_path / "part-00001.tfrecord", 12345)
    with dask.config.set(scheduler="synchronous"), pytest.warns(rk.DataLossWarning, match="part-00001.tfrecord"):
        ddf = rkd.read_tfrecords(tmp_path, npartitions=4, on_error="skip")
        ids = ddf["id"].compute().tolist()
    assert ddf.npartitions == 2  # whole files: a count taken before the damage cannot place a cut
    assert ids == [i for i in range(total) if i != 5000 + 12345]
