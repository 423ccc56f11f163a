"""recordkit.ray: Ray Data reads and writes through recordkit, on a local two-CPU cluster."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

import recordkit as rk
from conftest import damage_record, tensorflow_ids, uneven_shards

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")
rkr = pytest.importorskip("recordkit.ray")

# Ray's own modules warn about Ray's own settings.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray")


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def test_a_large_file_is_split_into_read_tasks(tmp_path: Path) -> None:
    total = uneven_shards(tmp_path, sizes=(60000,))
    source = rkr.TFRecordDatasource(rk.tables.TableScan(tmp_path), min_bytes_per_task=1 << 16)
    tasks = source.get_read_tasks(6)
    assert len(tasks) == 6
    assert sum(task.metadata.num_rows for task in tasks) == total
    ids = np.concatenate([t.column("id").to_numpy() for task in tasks for t in task()])
    assert (ids == np.arange(total)).all()


def test_compressed_files_are_read_whole_and_tasks_group_files(tmp_path: Path) -> None:
    total = uneven_shards(tmp_path, "gzip")
    tasks = rkr.TFRecordDatasource(rk.tables.TableScan(tmp_path)).get_read_tasks(2)
    assert len(tasks) == 2
    ids = np.concatenate([t.column("id").to_numpy() for task in tasks for t in task()])
    assert (ids == np.arange(total)).all()


@pytest.mark.parametrize("compression", [None, "gzip", "zlib"])
def test_every_record_read_once_and_written_back(cluster: None, tmp_path: Path, compression: str | None) -> None:
    total = uneven_shards(tmp_path / "in", compression)
    ds = rkr.read_tfrecords(tmp_path / "in", include_paths=True, min_bytes_per_task=1 << 16)
    table = ds.to_arrow_refs()
    import pyarrow as pa

    table = pa.concat_tables(ray.get(table))
    ids = table.column("id").to_numpy()
    assert len(ids) == total and (np.sort(ids) == np.arange(total)).all()  # each record once, counted one by one
    assert set(table.column("path").to_pylist()) == {str(p) for p in sorted((tmp_path / "in").iterdir())[1:]}
    assert table.schema.field("tags").type == pa.large_list(pa.int64())
    written = rkr.write_tfrecords(ds.drop_columns(["path"]), tmp_path / "out", compression=compression)
    assert written and all(os.path.exists(p) for p in written)
    back = rk.read_table(tmp_path / "out")
    assert sorted(back.column("id").to_pylist()) == list(range(total))
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]


def test_a_damaged_record_fails_the_job_with_its_offset(cluster: None, tmp_path: Path) -> None:
    uneven_shards(tmp_path, sizes=(5000, 20000))
    offset = damage_record(tmp_path / "part-00001.tfrecord", 12345)
    with pytest.raises(rk.DataLossError) as error:
        rkr.read_tfrecords(tmp_path, min_bytes_per_task=1 << 16).materialize()
    message = str(error.value)  # Ray's RayTaskError(DataLossError): the task's error, its message kept
    assert f"corrupted record at {offset}:" in message and "record 12345 of" in message
    assert "part-00001.tfrecord" in message


def test_a_failed_write_leaves_nothing(cluster: None, tmp_path: Path) -> None:
    import pyarrow as pa

    good = pa.table({"x": pa.array(np.arange(100, dtype=np.uint64))})
    bad = pa.table({"x": pa.array(np.array([1, 2**63], np.uint64))})  # beyond an int64_list
    ds = ray.data.from_arrow([good, good, bad, good])
    with pytest.raises(Exception, match="does not fit an int64"):
        rkr.write_tfrecords(ds, tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []


def test_tensorflow_reads_what_ray_wrote(cluster: None, tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    total = uneven_shards(tmp_path / "in")
    written = rkr.write_tfrecords(rkr.read_tfrecords(tmp_path / "in"), tmp_path / "out")
    ids = tensorflow_ids(written)
    assert sorted(ids) == list(range(total))


def test_ofrecord_parts_through_the_datasource(tmp_path: Path) -> None:
    rk.write_ofrecords(tmp_path, {"x": np.arange(3000, dtype=np.int64), "y": np.arange(3000.0)}, num_parts=3)
    tasks = rkr.TFRecordDatasource(rk.tables.TableScan(tmp_path), include_paths=True,
                                   min_bytes_per_task=1 << 10).get_read_tasks(3)
    assert len(tasks) == 3 and {task.metadata.input_files[0][-10:] for task in tasks} == {
        "part-00000", "part-00001", "part-00002"}
    tables = [t for task in tasks for t in task()]
    assert np.concatenate([t.column("x").to_numpy() for t in tables]).tolist() == list(range(3000))
    assert str(tables[0].schema.field("y").type) == "double"
