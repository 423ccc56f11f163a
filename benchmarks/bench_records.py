"""Record-layer benchmark: recordkit vs TensorFlow 2.21 on the same files, same process.

1. Raw iteration in Python over 1 M records of ~100 B: recordkit's
   `for r in TFRecordReader(path)` vs TensorFlow's
   `TFRecordDataset(path).batch(1024)` with each batch's records iterated one
   by one. Target: >= 3 x TensorFlow.
2. Read + CRC-verify throughput over 4 000 records of 150 KB (600 MB) from
   the page cache: every record delivered to Python as bytes, every CRC
   checked. Target: >= 3 GB/s, taken in a fresh process without TensorFlow
   (loading it changes how malloc returns memory).

Usage: python benchmarks/bench_records.py [--small N] [--large N] [--repeats R]
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import DATA, best_of, best_of_each, best_time_without_tensorflow, import_tensorflow, require_release_build, warm  # noqa: E402

import recordkit as rk  # noqa: E402


def make_small(path, count: int) -> None:
    rng = np.random.default_rng(0)
    blob = rng.bytes(count * 128)
    sizes = rng.integers(80, 121, size=count)
    starts = rng.integers(0, count * 128 - 121, size=count)
    with rk.TFRecordWriter(path) as writer:
        writer.write_many(blob[s : s + n] for s, n in zip(starts.tolist(), sizes.tolist()))


def make_large(path, count: int, size: int) -> None:
    rng = np.random.default_rng(1)
    pool = rng.bytes(size * 8)
    with rk.TFRecordWriter(path) as writer:
        writer.write_many(pool[(i % 7) * size // 7 :][:size] for i in range(count))


def ensure(path, make, *args) -> None:
    if not path.exists():
        print(f"making {path.name} ...", flush=True)
        make(path, *args)


def rk_iterate(path) -> int:
    n = 0
    for _ in rk.TFRecordReader(path):
        n += 1
    return n


def rk_bytes(path) -> int:
    total = 0
    for record in rk.TFRecordReader(path):
        total += len(record)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=1_000_000, help="records in the small-record file")
    parser.add_argument("--large", type=int, default=4_000, help="records in the 150 KB-record file")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    require_release_build()
    DATA.mkdir(exist_ok=True)
    small = DATA / f"small-{args.small}.tfrecord"
    large = DATA / f"large-{args.large}.tfrecord"
    ensure(small, make_small, args.small)
    ensure(large, make_large, args.large, 150_000)
    tf = import_tensorflow()
    print(f"recordkit {rk.__version__} ({rk._native.build_profile}); "
          f"TensorFlow {tf.__version__ if tf else 'not installed'}; {os.cpu_count()} CPUs")

    rows = []
    small_label = f"raw iteration, {args.small:,} x ~100 B"
    large_label = f"read + verify, {args.large:,} x 150 KB"
    warm(small)

    def tf_iterate() -> int:
        count = 0
        for batch in tf.data.TFRecordDataset(str(small)).batch(1024):
            for _ in batch.numpy():
                count += 1
        return count

    timings = best_of_each([lambda: rk_iterate(small)] + ([tf_iterate] if tf else []), args.repeats)
    t_rk, n = timings[0]
    assert n == args.small
    rows.append((small_label, "recordkit", t_rk, n / t_rk, "records/s"))
    if tf:
        t_tf, n_tf = timings[1]
        assert n_tf == n
        rows.append((small_label, "TensorFlow .batch(1024)", t_tf, n / t_tf, "records/s"))
        iteration_ratio = t_tf / t_rk

    warm(large)
    size = large.stat().st_size

    def tf_bytes() -> int:
        total = 0
        for batch in tf.data.TFRecordDataset(str(large)).batch(64):
            for record in batch.numpy():
                total += len(record)
        return total

    timings = best_of_each([lambda: rk_bytes(large)] + ([tf_bytes] if tf else []), args.repeats)
    t_rk_large, payload = timings[0]
    rows.append((large_label, "recordkit", t_rk_large, size / t_rk_large / 1e9, "GB/s"))
    t_alone = best_time_without_tensorflow("bench_records", f"rk_bytes({str(large)!r})", args.repeats)
    rows.append((large_label + ", alone", "recordkit, no TensorFlow", t_alone, size / t_alone / 1e9, "GB/s"))
    t_count, _ = best_of(lambda: rk.count_records(large), args.repeats)
    rows.append(("count (framing only)", "recordkit", t_count, size / t_count / 1e9, "GB/s"))
    if tf:
        t_tf_large, tf_payload = timings[1]
        assert tf_payload == payload
        rows.append((large_label, "TensorFlow .batch(64)", t_tf_large, size / t_tf_large / 1e9, "GB/s"))

    print()
    print(f"{'work':44} {'reader':26} {'best s':>8} {'rate':>12}")
    for work, who, seconds, rate, unit in rows:
        shown = f"{rate / 1e6:.2f} M {unit}" if unit == "records/s" else f"{rate:.2f} {unit}"
        print(f"{work:44} {who:26} {seconds:8.3f} {shown:>14}")
    print()
    gbps = size / t_alone / 1e9
    if tf:
        print(f"raw iteration: recordkit is {iteration_ratio:.1f} x TensorFlow (target >= 3): "
              f"{'MET' if iteration_ratio >= 3 else 'NOT MET'}")
        print(f"150 KB records: recordkit is {t_tf_large / t_rk_large:.1f} x TensorFlow")
    print(f"read + verify, without TensorFlow loaded: {gbps:.2f} GB/s from the page cache (target >= 3): {'MET' if gbps >= 3 else 'NOT MET'}")


if __name__ == "__main__":
    main()
