"""recordkit.spark: Spark 4's Python data source reads and writes through recordkit, on local[2]."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

import recordkit as rk
from conftest import damage_record, tensorflow_ids, uneven_shards

pytest.importorskip("pyspark")
pytest.importorskip("pyspark.sql.datasource")
rks = pytest.importorskip("recordkit.spark")

# PySpark's own warnings about the pandas it finds, from inside PySpark.
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    import shutil

    if shutil.which("java") is None:
        pytest.skip("local Spark needs Java 17 or newer")
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(rks.TFRecordDataSource)
    yield session
    session.stop()


@pytest.mark.parametrize("compression", [None, "gzip", "zlib"])
def test_every_record_read_once_and_written_back(spark: Any, tmp_path: Path, compression: str | None) -> None:
    total = uneven_shards(tmp_path / "in", compression)
    df = spark.read.format("tfrecord").option("partitions", 5).load(str(tmp_path / "in"))
    rows = df.select("id", "tags").collect()
    assert sorted(r.id for r in rows) == list(range(total))  # each record once, counted one by one
    assert {r.id: r.tags for r in rows}[6] == [0, 1]
    options = {} if compression is None else {"compression": compression}
    df.write.format("tfrecord").options(**options).mode("overwrite").save(str(tmp_path / "out"))
    back = rk.read_table(tmp_path / "out")
    assert sorted(back.column("id").to_pylist()) == list(range(total))
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]


def test_a_large_file_is_split_into_partitions(spark: Any, tmp_path: Path) -> None:
    total = uneven_shards(tmp_path, sizes=(60000,))
    df = spark.read.format("tfrecord").option("partitions", 4).load(str(tmp_path))
    assert df.rdd.getNumPartitions() == 4
    counts = df.rdd.mapPartitions(lambda rows: [sum(1 for _ in rows)]).collect()
    assert sum(counts) == total and min(counts) > 0


def test_a_spark_schema_narrows_and_casts(spark: Any, tmp_path: Path) -> None:
    uneven_shards(tmp_path, sizes=(10,))
    rows = spark.read.format("tfrecord").schema("id long, name string").load(str(tmp_path)).collect()
    assert [(r.id, r.name) for r in rows] == [(i, f"r{i}") for i in range(10)]
    with pytest.raises(Exception, match="not in the records"):
        spark.read.format("tfrecord").schema("id long, nope string").load(str(tmp_path)).collect()


def test_a_bound_spec_reads_with_tensorflow_rules(spark: Any, tmp_path: Path) -> None:
    uneven_shards(tmp_path, sizes=(10,))
    spec = {"id": rk.FixedLenFeature([], "int64"), "tags": rk.VarLenFeature("int64")}
    spark.dataSource.register(rks.data_source(spec, name="tfrecord_spec"))
    rows = spark.read.format("tfrecord_spec").load(str(tmp_path)).collect()
    assert [(r.id, r.tags) for r in rows] == [(i, list(range(i % 4))) for i in range(10)]


def test_a_damaged_record_fails_the_job_with_its_offset(spark: Any, tmp_path: Path) -> None:
    uneven_shards(tmp_path, sizes=(5000, 20000))
    offset = damage_record(tmp_path / "part-00001.tfrecord", 12345)
    with pytest.raises(Exception) as error:
        spark.read.format("tfrecord").option("partitions", 4).load(str(tmp_path)).count()
    message = str(error.value)
    assert "DataLossError" in message and f"corrupted record at {offset}:" in message
    assert "record 12345 of" in message and "part-00001.tfrecord" in message
    skipped = spark.read.format("tfrecord").option("on_error", "skip").load(str(tmp_path)).select("id").collect()
    assert sorted(r.id for r in skipped) == [i for i in range(25000) if i != 5000 + 12345]  # only when asked


def test_a_failed_write_leaves_nothing_new(spark: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    df = spark.createDataFrame([([1.0, 2.0],)] * 30 + [([1.0, None],)], "x array<double>").repartition(3)
    spark.createDataFrame([([5.0],)], "x array<double>").write.format("tfrecord").mode("overwrite").save(str(out))
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(Exception, match="null"):
        df.write.format("tfrecord").mode("overwrite").save(str(out))
    assert sorted(p.name for p in out.iterdir()) == before  # the older set stands, nothing staged is left
    assert rk.read_table(out).column("x").to_pylist() == [5.0]  # one value: inferred as a scalar


def test_tensorflow_reads_what_spark_wrote(spark: Any, tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    total = uneven_shards(tmp_path / "in")
    spark.read.format("tfrecord").load(str(tmp_path / "in")).write.format("tfrecord").mode("overwrite").save(
        str(tmp_path / "out"))
    files = sorted(str(p) for p in (tmp_path / "out").glob("*.tfrecord"))
    ids = tensorflow_ids(files)
    assert sorted(ids) == list(range(total))


_NOT_ON_PATH = """
import sys
import numpy as np
from pyspark.sql import SparkSession
import recordkit as rk
import recordkit.spark

rk.write_examples("in.tfrecord", {"id": np.arange(5)})
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
spark.dataSource.register(recordkit.spark.TFRecordDataSource)
print(sorted(row.id for row in spark.read.format("tfrecord").load("in.tfrecord").collect()))
spark.stop()
"""


def test_a_python_that_is_not_on_path_runs_the_workers_too(tmp_path: Path) -> None:
    import os
    import shutil
    import subprocess
    import sys

    if shutil.which("java") is None:
        pytest.skip("local Spark needs Java 17 or newer")
    # PATH without this Python's folder (nor pyenv's shims): its python3, if any, is another Python.
    here = os.path.realpath(os.path.dirname(sys.executable))
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                           if p and os.path.realpath(p) != here and "shims" not in p)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    run = subprocess.run([sys.executable, "-c", _NOT_ON_PATH], cwd=tmp_path, capture_output=True, text=True,
                         env=dict(env, PATH=path), timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == "[0, 1, 2, 3, 4]"
