"""Arrow benchmark: recordkit's `read_table` vs TensorFlow 2.21 on the same file, same process.

1. 1 M tutorial-schema records -> a table: recordkit's `read_table(path, spec)`
   (a pyarrow Table) and its `.to_pandas()`, against TensorFlow's
   `TFRecordDataset(path).batch(1024).map(parse_example)` gathered into a pandas
   DataFrame, at TensorFlow's defaults (every core) and limited to one thread.
   Target: >= 20 x.
2. The string column: `read_table`'s large_binary column against the object
   array of `bytes` that `read_examples` builds, same records: the tutorial's
   `feature2` (five words, of which the object path makes one `bytes` object
   each per batch and hands out references, while Arrow copies every value)
   and 1 M distinct values (`images/%08d.jpg`). The column alone is
   the read less a read of the same file whose spec asks for a feature no
   record holds (which frames, checks and parses every record and builds no
   values); medians of alternating runs. Target, for the column: >= 2 x. The
   whole reads' ratio is printed beside it.
3. 150 KB records -> a table, in GB/s of payload, best of the repeats, each
   table dropped before the next read. Target: >= 3 GB/s. Beside it, the first
   read, and what filling as many bytes of new memory costs on this machine:
   on a VM that hands freed memory back to its host, new memory's first touch
   costs a host page fault, and bounds a first read whatever the reader does.
4. An Arrow table of the tutorial's 1 M rows -> TFRecord with `write_examples`,
   against TensorFlow writing the same records already serialized
   (`tf.io.TFRecordWriter.write` per record), each to a new file. Target: >= 10 x.
   Beside it, `rk.convert` of the same rows from a Parquet file (read, then
   written while the next chunk is read), printed for the record.

Usage: python benchmarks/bench_tables.py [--records N] [--large N] [--repeats R]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(__file__))
from _common import DATA, best_of_each, removal, setup, tensorflow_spec, tensorflow_writer, warm  # noqa: E402
from bench_examples import LARGE_SPEC, SPEC, fresh_file, large_file, tutorial_columns, tutorial_file  # noqa: E402

import recordkit as rk  # noqa: E402


def tf_to_pandas(tf, path, tf_spec, threads: int | None):
    import pandas as pd

    ds = tf.data.TFRecordDataset(str(path)).batch(1024).map(lambda b: tf.io.parse_example(b, tf_spec))
    if threads:
        options = tf.data.Options()
        options.threading.private_threadpool_size = threads
        ds = ds.with_options(options)
    parts = [{k: v.numpy() for k, v in batch.items()} for batch in ds]
    return pd.DataFrame({k: __import__("numpy").concatenate([p[k] for p in parts]) for k in tf_spec})


def rk_strings_as_objects(path, spec) -> int:
    """Reads `path` through `read_examples` (string features become object arrays
    of `bytes`); returns the number of batches."""
    return sum(1 for _ in rk.read_examples(path, spec, batch_size=65536))


def string_column(path, key: str, rounds: int) -> dict[str, float]:
    """Median seconds of each read of the string feature `key`, and of the reads
    that build no values, in alternating rounds."""
    spec = {key: rk.FixedLenFeature([], "string", default_value=b"")}
    nothing = {"absent": rk.VarLenFeature("string")}
    reads = {"table": lambda: rk.read_table(path, spec), "table, no values": lambda: rk.read_table(path, nothing),
             "objects": lambda: rk_strings_as_objects(path, spec),
             "objects, no values": lambda: rk_strings_as_objects(path, nothing)}
    times: dict[str, list[float]] = {name: [] for name in reads}
    for _ in range(rounds):
        for name, read in reads.items():
            start = time.perf_counter()
            read()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    args, tf = setup(__doc__, repeats=3)
    print(f"recordkit {rk.__version__}; TensorFlow {tf.__version__ if tf else 'not installed'}; {os.cpu_count()} CPUs")

    path = tutorial_file(args.records)
    warm(path)
    contenders = [lambda: rk.read_table(path, SPEC), lambda: rk.read_table(path, SPEC).to_pandas()]
    names = ["read_table", "read_table().to_pandas()"]
    if tf:
        tf_spec = tensorflow_spec(tf, SPEC)
        contenders += [lambda: tf_to_pandas(tf, path, tf_spec, None), lambda: tf_to_pandas(tf, path, tf_spec, 1)]
        names += ["TensorFlow -> pandas (defaults)", "TensorFlow -> pandas (1 thread)"]
    timed = best_of_each(contenders, args.repeats)
    print(f"\n1. {args.records:,} tutorial records -> table")
    for name, (seconds, _) in zip(names, timed):
        print(f"   {name:<34}{seconds:8.3f} s  {args.records / seconds / 1e6:6.2f} M records/s")
    if tf:
        for i, view in ((2, "TensorFlow at its defaults"), (3, "TensorFlow on one thread")):
            print(f"   ratio vs {view}: read_table {timed[i][0] / timed[0][0]:.1f} x, "
                  f"to_pandas {timed[i][0] / timed[1][0]:.1f} x (target >= 20 x)")

    import numpy as np

    distinct = fresh_file(DATA / f"distinct-strings-{args.records}.tfrecord",
                          {"name": np.char.mod(b"images/%08d.jpg", np.arange(args.records)),
                           "label": np.arange(args.records)})
    rounds = max(args.repeats, 11)
    print(f"\n2. the string column: large_binary against an object array of bytes (medians of {rounds} rounds)")
    for title, file, key in (("the tutorial's feature2 (five words)", path, "feature2"),
                             (f"{args.records:,} distinct values", distinct, "name")):
        warm(file)
        t = string_column(file, key, rounds)
        table, objects = t["table"] - t["table, no values"], t["objects"] - t["objects, no values"]
        print(f"   {title}: the column {1e3 * table:.1f} ms against {1e3 * objects:.1f} ms: "
              f"{objects / table:.1f} x (target >= 2 x); the whole read {t['table']:.3f} s against "
              f"{t['objects']:.3f} s: {t['objects'] / t['table']:.1f} x")

    large = large_file(args.large)
    warm(large)
    # On a VM whose balloon takes back the memory its guest frees (free page
    # reporting), the first touch of new memory is the host's page fault, not
    # recordkit's work: the first read is printed apart, beside the cost of
    # touching as many new bytes, and the repeats drop each table before the
    # next read, so that they reuse the memory the process has just had.
    def read_large() -> int:
        return rk.read_table(large, LARGE_SPEC).column("image").nbytes

    start = time.perf_counter()
    payload = read_large()
    first = time.perf_counter() - start
    (seconds, _), = best_of_each([read_large], args.repeats)
    time.sleep(3)  # past the balloon's delay: the freed table is the host's again
    start = time.perf_counter()
    touched = np.ones(payload, np.uint8)
    touch = time.perf_counter() - start
    del touched
    print(f"\n3. {args.large:,} records of 150 KB -> table: {payload / seconds / 1e9:.2f} GB/s (target >= 3 GB/s)"
          f"\n   the first read, into new memory: {payload / first / 1e9:.2f} GB/s; filling as many bytes "
          f"of new memory (np.ones): {payload / touch / 1e9:.2f} GB/s")

    import pyarrow as pa

    arrow = pa.table({k: pa.array(v) for k, v in tutorial_columns(args.records).items()})
    # feature3 is float64, as the tutorial makes it: stored as float32, as TensorFlow would.
    warnings.filterwarnings("ignore", message="column 'feature3': float64")
    # As in bench_examples.py: each run writes a new file, the previous output
    # deleted first, outside the timing, for both contenders.
    out, tf_out = DATA / "arrow-written.tfrecord", DATA / "tf-written.tfrecord"

    import pyarrow.parquet as pq

    parquet, converted = DATA / "tutorial.parquet", DATA / "converted" / "t.tfrecord"
    pq.write_table(arrow, parquet)
    shards: list[str] = []

    def convert() -> None:
        shards[:] = rk.convert(parquet, converted)  # past 100 MB: two shards, as convert cuts them

    def remove_shards() -> None:
        for shard in converted.parent.glob("*.tfrecord"):
            shard.unlink()

    contenders = [lambda: rk.write_examples(out, arrow), convert]
    setups = [removal(out), remove_shards]
    if tf:
        contenders.append(tensorflow_writer(tf, list(rk.TFRecordReader(path)), tf_out))
        setups.append(removal(tf_out))
    timed = best_of_each(contenders, args.repeats, setups)
    assert b"".join(open(shard, "rb").read() for shard in shards) == out.read_bytes()
    line = f"\n4. Arrow table of {args.records:,} rows -> a new TFRecord file: {timed[0][0]:.3f} s"
    if tf:
        assert tf_out.read_bytes() == out.read_bytes()
        line += f"; TensorFlow's writer {timed[2][0]:.3f} s: {timed[2][0] / timed[0][0]:.1f} x (target >= 10 x)"
    print(line)
    line = f"   rk.convert from Parquet (read and written): {timed[1][0]:.3f} s"
    if tf:
        line += f": {timed[2][0] / timed[1][0]:.1f} x TensorFlow's writer"
    print(line)


if __name__ == "__main__":
    main()
