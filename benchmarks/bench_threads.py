"""Every core, every input: recordkit and TensorFlow 2.21 both at their defaults, same process.

1. Small records: read + verify + parse the tutorial's 1 M records into NumPy
   columns (`read_examples`), against `TFRecordDataset(...).batch(1024)
   .map(parse_example)` at tf.data's defaults (every core). Target: >= 20 x.
2. 150 KB records, the same. Target: >= 4 x.
3. `write_examples` of the tutorial's rows from NumPy arrays, object arrays,
   Python lists (the words as bytes, and as str; each value in a list of its
   own, which is the same record) and pandas DataFrames (its
   strings Arrow-backed, pandas 3's default; as `string[python]`; as an object
   column of str), each to a new file, against
   `tf.io.TFRecordWriter.write` of the same records already serialized.
   Target: >= 10 x for every input. Then (3b) the NumPy rows gzip-compressed
   (deflated in blocks on every core), against TensorFlow's gzip writer, and
   (3c) rows with lists, an embedding of 3 floats and 0-5 int tags, given as
   Python lists, as NumPy (2-D), and as rows that are NumPy arrays, against
   TensorFlow writing the same records. Target: >= 10 x. Beside each write, its
   CPU time (user and kernel: the kernel's copy into the page cache is part of
   it) and Python's thread's share: a write whose cores are all busy can go no
   faster than its CPU time over the cores. Below each, the same write on one
   thread (TensorFlow's writer is one Python loop at its defaults too): its CPU
   time is the work itself, without what a second thread adds, and that work
   spread over every core with none idle is the most the write could reach.
4. Scaling: parse throughput with `rk.set_num_threads(n)` for n = 1, 2, ...
   up to the cores. Target: 2 threads >= 1.7 x one. Each count's fastest run
   also shows its CPU time, so that the speed-up splits into the work the
   threads add and the cores they keep busy.
5. What the machine allows, without recordkit: the same work alone and on
   every core at once, each thread's speed against one thread's. Work that
   stays in a core's own caches (SHA-256 of 32 KB) against copies of 8 MB
   (the size of a batch, in the shared L3) and of 64 MB (main memory): where
   copies slow each other down, so does parsing, which reads and writes
   every byte of a batch.

Beside each figure at the defaults, the single-thread view: recordkit with
one thread against TensorFlow limited to one (tf.data's private thread pool
and its ops' intra-op parallelism set to 1).

Usage: python benchmarks/bench_threads.py [--records N] [--large N] [--repeats R]
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import (  # noqa: E402
    DATA, best_of_each, fastest_of_each, removal, setup, tensorflow_spec, tensorflow_writer, warm)
from bench_examples import LARGE_SPEC, SPEC, large_file, rk_parse, tutorial_columns, tutorial_file  # noqa: E402

import recordkit as rk  # noqa: E402


def tf_parse(tf, path, spec, batch: int, one_thread: bool) -> int:
    tf_spec = tensorflow_spec(tf, spec)
    ds = tf.data.TFRecordDataset(str(path)).batch(batch).map(lambda b: tf.io.parse_example(b, tf_spec))
    if one_thread:
        options = tf.data.Options()
        options.threading.private_threadpool_size = 1
        options.threading.max_intra_op_parallelism = 1
        ds = ds.with_options(options)
    key = next(iter(spec))
    return sum(int(b[key].shape[0]) for b in ds)


def settle() -> None:
    """A pause before each run, outside the timing: a precaution, so that no run
    starts while threads of the one before (TensorFlow's pools) wind down."""
    time.sleep(0.3)


def with_threads(count: int | None, fn):
    def run():
        rk.set_num_threads(count)
        try:
            return fn()
        finally:
            rk.set_num_threads(None)
    return run


def main() -> None:
    args, tf = setup(__doc__, repeats=5)
    cores = os.cpu_count() or 1
    print(f"recordkit {rk.__version__}: {rk.get_num_threads()} threads by default; "
          f"TensorFlow {tf.__version__ if tf else 'not installed'}; {cores} CPUs")

    path = tutorial_file(args.records)
    large = large_file(args.large)

    for title, file, spec, batch, target in ((f"1. {args.records:,} tutorial records -> NumPy columns", path, SPEC,
                                              65536, 20),
                                             (f"2. {args.large:,} records of 150 KB -> NumPy columns", large,
                                              LARGE_SPEC, 16, 4)):
        warm(file)
        contenders = [with_threads(None, lambda: rk_parse(file, spec, batch)),
                      with_threads(1, lambda: rk_parse(file, spec, batch))]
        if tf:
            contenders += [lambda: tf_parse(tf, file, spec, 1024 if batch > 16 else 16, False),
                           lambda: tf_parse(tf, file, spec, 1024 if batch > 16 else 16, True)]
        timed = best_of_each(contenders, args.repeats, [settle] * len(contenders))
        records = timed[0][1]
        print(f"\n{title}")
        for name, (seconds, n) in zip(["recordkit (defaults)", "recordkit (1 thread)", "TensorFlow (defaults)",
                                       "TensorFlow (1 thread)"], timed):
            assert n == records, (name, n, records)
            print(f"   {name:<24}{seconds:8.3f} s  {records / seconds / 1e6:7.3f} M records/s  "
                  f"{os.path.getsize(file) / seconds / 1e9:6.2f} GB/s")
        if tf:
            print(f"   at the defaults: {timed[2][0] / timed[0][0]:.1f} x (target >= {target} x); "
                  f"one thread each: {timed[3][0] / timed[1][0]:.1f} x")

    # 3. writing from each kind of input, each run to a new file.
    warnings.filterwarnings("ignore", message="column '(feature3|embedding)': float64")
    columns = tutorial_columns(args.records)
    lists = {k: v.tolist() for k, v in columns.items()}
    words = columns["feature2"].astype(str)  # the same bytes as str: the records are the same
    inputs = {"NumPy arrays": columns, "object arrays": dict(columns, feature2=columns["feature2"].astype(object)),
              "Python lists": lists, "lists, str words": dict(lists, feature2=words.tolist()),
              # a one-value list is the same record as the value
              "lists of lists": {k: [[x] for x in v] for k, v in lists.items()}}
    try:
        import pandas as pd

        # Its strings as pandas 3 stores them by default (Arrow-backed), as Python
        # objects (string[python]), and as an object column of str.
        for name, strings in (("pandas DataFrame", pd.array(words, dtype="string")),
                              ("pandas string[python]", pd.array(words, dtype="string[python]")),
                              ("pandas object column", pd.Series(words.astype(object), dtype=object))):
            inputs[name] = pd.DataFrame(dict(columns, feature2=strings))
    except ImportError:
        pass
    out, tf_out = DATA / "threads-written.tfrecord", DATA / "threads-written-tf.tfrecord"

    def remove(target):
        def setup() -> None:
            removal(target)()
            settle()
        return setup

    def writes(title: str, inputs: dict, records: Path) -> None:
        """Each input written with `write_examples`, against TensorFlow writing
        `records`' records (the same, already serialized), each to a new file."""
        contenders = [(lambda c=c: rk.write_examples(out, c)) for c in inputs.values()]
        contenders += [with_threads(1, lambda c=c: rk.write_examples(out, c)) for c in inputs.values()]
        setups = [remove(out)] * len(contenders)
        if tf:
            contenders.append(tensorflow_writer(tf, list(rk.TFRecordReader(records)), tf_out))
            setups.append(remove(tf_out))
        runs = fastest_of_each(contenders, args.repeats, setups)
        print(f"\n{title}")
        print(f"   (CPU: the process's, user and kernel, in the fastest run; busy: CPU / wall; main: Python's thread's;\n"
              f"   CPU / {cores}: the write's time were all {cores} cores busy throughout)")
        for name, run, alone in zip(inputs, runs, runs[len(inputs):]):
            line = f"   from {name:<22}{run.wall:8.3f} s"
            if tf:
                line += f"  {runs[-1].wall / run.wall:5.1f} x TensorFlow's writer ({runs[-1].wall:.3f} s; target >= 10 x)"
            line += (f"  CPU {1e3 * run.cpu:4.0f} ms, busy {run.cpu / run.wall:4.2f}, main {1e3 * run.main_cpu:3.0f} ms;"
                     f" CPU / {cores}: {1e3 * run.cpu / cores:3.0f} ms")
            if tf:
                line += f" ({runs[-1].wall / (run.cpu / cores):4.1f} x)"
            print(line)
            line = f"     {'one thread':<25}{alone.wall:8.3f} s"
            if tf:
                line += f"  {runs[-1].wall / alone.wall:5.1f} x"
            line += f"  CPU {1e3 * alone.cpu:4.0f} ms, its work over {cores} cores: {1e3 * alone.cpu / cores:3.0f} ms"
            if tf:
                line += f" ({runs[-1].wall / (alone.cpu / cores):4.1f} x)"
            print(line)
        if tf:
            print(f"   {'TensorFlow writer':<27}{runs[-1].wall:8.3f} s  CPU {1e3 * runs[-1].cpu:4.0f} ms")
        if tf:
            assert out.read_bytes() == tf_out.read_bytes()

    writes(f"3. write_examples of {args.records:,} tutorial rows to a new file", inputs, path)

    # 3b. the same rows gzip-compressed: deflated in 1 MiB blocks on every core.
    gz_out, tf_gz_out = DATA / "threads-written.tfrecord.gz", DATA / "threads-written-tf.tfrecord.gz"
    contenders = [with_threads(None, lambda: rk.write_examples(gz_out, columns, compression="gzip")),
                  with_threads(1, lambda: rk.write_examples(gz_out, columns, compression="gzip"))]
    setups = [remove(gz_out)] * 2
    if tf:
        contenders.append(tensorflow_writer(tf, list(rk.TFRecordReader(path)), tf_gz_out, "GZIP"))
        setups.append(remove(tf_gz_out))
    timed = best_of_each(contenders, args.repeats, setups)
    print("\n3b. the same from NumPy arrays, gzip-compressed")
    for name, (seconds, _) in zip(("recordkit (defaults)", "recordkit (1 thread)"), timed):
        line = f"   {name:<24}{seconds:8.3f} s"
        if tf:
            line += f"  {timed[-1][0] / seconds:5.1f} x TensorFlow's gzip writer ({timed[-1][0]:.3f} s)"
        print(line)
    print(f"   {cores} threads vs 1: {timed[1][0] / timed[0][0]:.2f} x")
    if tf:
        assert list(rk.TFRecordReader(gz_out)) == list(rk.TFRecordReader(tf_gz_out))

    # 3c. rows of lists: the tutorial's rows with an embedding of 3 floats and 0-5
    # int tags a row, the lists given as Python lists, as NumPy (2-D) or as rows
    # that are NumPy arrays; against TensorFlow writing the same records.
    rng = np.random.default_rng(2)
    embedding = rng.standard_normal((args.records, 3)).astype(np.float32)
    tags = [rng.integers(0, 1000, k).tolist() for k in rng.integers(0, 6, args.records)]
    listed = {"Python lists": dict(lists, embedding=embedding.tolist(), tags=tags),
              "NumPy, embedding 2-D": dict(columns, embedding=embedding, tags=tags),
              "rows of NumPy arrays": dict(columns, embedding=list(embedding), tags=[np.array(t) for t in tags])}
    with_lists = DATA / "threads-rows-with-lists.tfrecord"
    rk.write_examples(with_lists, listed["NumPy, embedding 2-D"])
    writes(f"3c. write_examples of {args.records:,} rows with lists (an embedding of 3 floats, 0-5 tags)",
           listed, with_lists)

    # 4. scaling with the thread count, and why it stops.
    counts = sorted({1, 2, cores} | {c for c in (4, 8, 16) if c <= cores})
    print(f"\n4. parse throughput by thread count ({args.records:,} tutorial records)")
    print("   CPU: the process's CPU time in the fastest run; busy: CPU / wall, the cores kept busy;")
    print("   main: the calling thread's CPU (the work only it does: Python objects, NumPy and Arrow assembly;")
    print("   with more than one thread, also the batches it frames and parses while it waits for the next).")
    for label, parse in (("read_examples (NumPy columns, strings as objects)", lambda: rk_parse(path, SPEC, 65536)),
                         ("read_table (Arrow)", lambda: rk.read_table(path, SPEC).num_rows)):
        runs = fastest_of_each([with_threads(c, parse) for c in counts], args.repeats, [settle] * len(counts))
        print(f"   {label}")
        one_wall, one_cpu = runs[0].wall, runs[0].cpu
        for count, run in zip(counts, runs):
            print(f"   {count:>5} threads: {args.records / run.wall / 1e6:6.2f} M records/s  "
                  f"{one_wall / run.wall:4.2f} x one   CPU {1e3 * run.cpu:5.0f} ms ({run.cpu / one_cpu:4.2f} x one)  "
                  f"busy {run.cpu / run.wall:4.2f}  main {1e3 * run.main_cpu:4.0f} ms")
        if len(counts) > 1:
            wall, cpu = runs[1].wall, runs[1].cpu
            # wall(1) / wall(2) = (CPU(1) / CPU(2)) * (busy(2) / busy(1)): work added, against cores kept busy.
            print(f"   2 threads vs 1: {one_wall / wall:.2f} x (target >= 1.7 x) = {one_cpu / cpu:.2f} "
                  f"(1 / the CPU added) x {(cpu / wall) / (one_cpu / one_wall):.2f} (the cores kept busy)")

    # 5. the machine alone: how much each thread keeps of its speed when every core works.
    print(f"\n5. each thread's speed with {cores} threads at once, against one thread alone (no recordkit)")
    for name, make_work in (("SHA-256 of 32 KB (in a core's caches)", hash_work),
                            ("copies of 8 MB (the shared L3)", lambda: copy_work(8 << 20)),
                            ("copies of 64 MB (main memory)", lambda: copy_work(64 << 20))):
        alone = min(side_by_side(make_work, 1) for _ in range(args.repeats))
        together = min(side_by_side(make_work, cores) for _ in range(args.repeats))
        print(f"   {name:<40}{alone / together:5.2f} x")


def hash_work():
    """SHA-256 of a 32 KB buffer, again and again (hashlib releases the GIL for it)."""
    data = bytes(32 << 10)
    return lambda: [hashlib.sha256(data).digest() for _ in range(6000)]


def copy_work(size: int):
    """Copies of ``size`` bytes into another buffer, 1 GiB in all (NumPy releases the GIL for them);
    both buffers are written once before, so that no page is first touched while timed."""
    source, target = np.full(size, 1, np.uint8), np.full(size, 0, np.uint8)
    return lambda: [np.copyto(target, source) for _ in range((1 << 30) // size)]


def side_by_side(make_work, threads: int) -> float:
    """Seconds the slowest of ``threads`` threads took to do its own ``make_work()`` once, all
    started together."""
    works, barrier, taken = [make_work() for _ in range(threads)], threading.Barrier(threads), [0.0] * threads

    def run(i: int) -> None:
        barrier.wait()
        start = time.perf_counter()
        works[i]()
        taken[i] = time.perf_counter() - start
    pool = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return max(taken)


if __name__ == "__main__":
    main()
