"""Engines benchmark: recordkit inside Ray Data and Dask, against Ray Data's own reader.

1. `recordkit.ray.read_tfrecords` against `ray.data.read_tfrecords` (which
   imports TensorFlow, checks no CRC and builds one Arrow table per record) on
   the same shards of tutorial-schema records, both materialized on the same
   local cluster (`ray.init(num_cpus=<every core>)`). Target: >= 30 x.
   Also recordkit alone on a larger set, in records/s.
2. `recordkit.dask.read_tfrecords(...).compute()` with the threaded and the
   process schedulers, in records/s, and `to_tfrecords` back.
3. Spark (`local[<every core>]`): `spark.read.format("tfrecord")` counted and
   summed, and written back, in records/s.

Both readers get the shards as files named `*.tfrecords` (the extension Ray's
reader looks for). Each figure is the best of `--repeats` runs, the two Ray
readers' runs interleaved.

Usage: python benchmarks/bench_engines.py [--records N] [--shards K] [--repeats R]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(__file__))
from _common import DATA, best_of_each, require_release_build  # noqa: E402
from bench_examples import tutorial_columns  # noqa: E402

import recordkit as rk  # noqa: E402


def shards(records: int, count: int) -> list[str]:
    """`count` shards of the tutorial's records, `records` in all."""
    folder = DATA / f"engines-{records}-{count}"
    if not folder.exists():
        warnings.filterwarnings("ignore", message="column 'feature3': float64")
        staging = DATA / f".engines-{records}-{count}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        columns = tutorial_columns(records)
        bounds = [records * i // count for i in range(count + 1)]
        for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
            rk.write_examples(staging / f"train-{i:05d}.tfrecords", {k: v[lo:hi] for k, v in columns.items()})
        staging.rename(folder)
    return sorted(str(p) for p in folder.iterdir())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--large", type=int, default=1_000_000, help="records for recordkit's own throughput figures")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    require_release_build()
    DATA.mkdir(exist_ok=True)

    import ray

    import recordkit.ray

    cpus = os.cpu_count() or 1
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    print(f"recordkit {rk.__version__}; Ray {ray.__version__}; {cpus} CPUs")
    files = shards(args.records, args.shards)

    def ours(paths: list[str]) -> int:
        return recordkit.ray.read_tfrecords(paths).materialize().count()

    def theirs(paths: list[str]) -> int:
        return ray.data.read_tfrecords(paths).materialize().count()

    contenders, names = [lambda: ours(files)], ["recordkit.ray.read_tfrecords"]
    try:
        import tensorflow  # noqa: F401  (Ray's reader imports it in its tasks)

        contenders.append(lambda: theirs(files))
        names.append("ray.data.read_tfrecords (TensorFlow)")
    except ImportError:
        print("TensorFlow is not installed: Ray's own reader cannot run")
    timed = best_of_each(contenders, args.repeats)
    print(f"\n1. {args.records:,} tutorial records in {args.shards} shards -> materialized Ray Dataset")
    for name, (seconds, count) in zip(names, timed):
        assert count == args.records, (name, count)
        print(f"   {name:<40}{seconds:8.2f} s  {args.records / seconds:12,.0f} records/s")
    if len(timed) > 1:
        print(f"   ratio: {timed[1][0] / timed[0][0]:.1f} x (target >= 30 x)")

    large = shards(args.large, args.shards)
    (seconds, count), = best_of_each([lambda: ours(large)], args.repeats)
    print(f"   recordkit alone, {args.large:,} records: {seconds:.2f} s  {count / seconds:,.0f} records/s")
    ray.shutdown()

    import dask

    import recordkit.dask

    print(f"\n2. Dask: {args.large:,} records in {args.shards} shards, {cpus} partitions")
    for scheduler in ("threads", "processes"):
        with dask.config.set(scheduler=scheduler):
            ddf = recordkit.dask.read_tfrecords(large, npartitions=cpus)
            (seconds, frame), = best_of_each([ddf.compute], args.repeats)
            assert len(frame) == args.large
            print(f"   read, {scheduler:<10} scheduler: {seconds:6.2f} s  {args.large / seconds:12,.0f} records/s")
            out = tempfile.mkdtemp(dir=DATA)
            start = time.perf_counter()
            recordkit.dask.to_tfrecords(ddf, out)
            seconds = time.perf_counter() - start
            shutil.rmtree(out)
            print(f"   read + write, {scheduler:<10}: {seconds:6.2f} s  {args.large / seconds:12,.0f} records/s")

    from pyspark.sql import SparkSession

    import recordkit.spark

    spark = (SparkSession.builder.master(f"local[{cpus}]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", str(cpus)).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(recordkit.spark.TFRecordDataSource)
    folder = os.path.dirname(large[0])
    print(f"\n3. Spark {spark.version}: {args.large:,} records in {args.shards} shards, local[{cpus}]")

    def spark_read() -> int:
        df = spark.read.format("tfrecord").option("partitions", cpus).load(folder)
        row = df.selectExpr("count(*) AS n", "sum(feature1) AS s").collect()[0]
        return row.n

    (seconds, count), = best_of_each([spark_read], args.repeats)
    assert count == args.large
    print(f"   read (count and sum): {seconds:6.2f} s  {count / seconds:12,.0f} records/s")
    out = tempfile.mkdtemp(dir=DATA)

    def spark_write() -> None:
        spark.read.format("tfrecord").option("partitions", cpus).load(folder).write.format("tfrecord").mode(
            "overwrite").save(out)

    (seconds, _), = best_of_each([spark_write], args.repeats)
    assert rk.read_table(out, columns=["feature1"]).num_rows == args.large
    shutil.rmtree(out)
    print(f"   read + write:         {seconds:6.2f} s  {args.large / seconds:12,.0f} records/s")
    spark.stop()


if __name__ == "__main__":
    main()
