"""Dataset benchmark: recordkit's streaming pipeline vs tf.data on the same shards, same process.

1. The tutorial's four-feature records (1 M, in 4 shards): recordkit's
   `Dataset(shards, spec).shuffle(10_000).batch(1024).prefetch(2)` against
   tf.data's `interleave(TFRecordDataset, cycle_length=4) -> shuffle(10_000)
   -> batch(1024) -> map(parse_example) -> prefetch(AUTOTUNE)`, both with
   every thread they want. Target: >= 10 x.
2. The same recordkit pipeline through a PyTorch DataLoader (`ds.loader()`:
   `batch_size=None`, recordkit batches) with 0 and with 2 workers, each
   worker reading its own half: epochs of one loader each, its persistent workers
   started (and an epoch run) before the timing, as a training run's epochs after
   its first. Target: 2 workers at least as fast as 0.

Usage: python benchmarks/bench_dataset.py [--records N] [--repeats R]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from _common import DATA, best_of_each, import_tensorflow, require_release_build, tensorflow_spec, warm  # noqa: E402
from bench_examples import SPEC, tutorial_columns  # noqa: E402

import recordkit as rk  # noqa: E402

SHARDS = 4
BUFFER = 10_000
BATCH = 1024


def make_shards(records: int) -> list[str]:
    base = DATA / f"dataset-{records}.tfrecord"
    names = rk.shard_names(base, SHARDS)
    if not all(os.path.exists(name) for name in names):
        rk.write_examples(base, tutorial_columns(records), shards=SHARDS)
    for name in names:
        warm(name)  # type: ignore[arg-type]
    return names


def recordkit_pipeline(shards: list[str]) -> rk.Dataset:
    return rk.Dataset(shards, features=SPEC).shuffle(BUFFER, seed=0).batch(BATCH).prefetch(2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    require_release_build()
    DATA.mkdir(exist_ok=True)
    shards = make_shards(args.records)
    tf = import_tensorflow()
    try:
        import torch
    except ImportError:
        torch = None
    print(f"recordkit {rk.__version__} ({rk._native.build_profile}); TensorFlow {tf.__version__ if tf else 'not installed'}; "
          f"torch {torch.__version__ if torch else 'not installed'}; {os.cpu_count()} CPUs")

    def run_recordkit() -> int:
        return sum(len(batch["feature0"]) for batch in recordkit_pipeline(shards))

    contenders = [run_recordkit]
    if tf:
        tf_spec = tensorflow_spec(tf, SPEC)

        def run_tensorflow() -> int:
            files = tf.data.Dataset.from_tensor_slices(shards).shuffle(SHARDS, seed=0)
            ds = files.interleave(tf.data.TFRecordDataset, cycle_length=SHARDS, num_parallel_calls=tf.data.AUTOTUNE)
            ds = ds.shuffle(BUFFER, seed=0).batch(BATCH)
            ds = ds.map(lambda b: tf.io.parse_example(b, tf_spec), num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
            return sum(int(batch["feature0"].shape[0]) for batch in ds)

        contenders.append(run_tensorflow)
    timings = best_of_each(contenders, args.repeats)
    t_rk, n = timings[0]
    assert n == args.records, n
    print(f"shuffle(10k) + batch(1024) + parse, {SHARDS} shards of {n:,} records: recordkit {t_rk:.3f} s = {n / t_rk / 1e6:.2f} M records/s")
    ratio = None
    if tf:
        t_tf, n_tf = timings[1]
        assert n_tf == n, n_tf
        ratio = t_tf / t_rk
        print(f"shuffle(10k) + batch(1024) + parse, tf.data: {t_tf:.3f} s = {n / t_tf / 1e6:.3f} M records/s  -> {ratio:.1f} x")

    loader_times = {}
    if torch:
        loaders = [recordkit_pipeline(shards).loader(num_workers=workers) for workers in (0, 2)]
        epochs = [lambda loader=loader: sum(int(batch["feature0"].shape[0]) for batch in loader) for loader in loaders]
        for epoch in epochs:
            epoch()  # the workers start, and the files are counted, before the timing
        timings = best_of_each(epochs, args.repeats)
        for workers, (seconds, count) in zip((0, 2), timings):
            assert count == args.records, count
            loader_times[workers] = seconds
            print(f"PyTorch DataLoader, {workers} workers: {seconds:.3f} s = {count / seconds / 1e6:.2f} M records/s")

    print()
    if ratio is not None:
        print(f"dataset pipeline: {ratio:.1f} x tf.data (target >= 10): {'MET' if ratio >= 10 else 'NOT MET'}")
    if loader_times:
        speedup = loader_times[0] / loader_times[2]
        print(f"DataLoader 2 workers vs 0: {speedup:.2f} x (target >= 1): {'MET' if speedup >= 1 else 'NOT MET'}")


if __name__ == "__main__":
    main()
