"""Random access at streaming speed: `IndexedDataset` against its targets, and ArrayRecord / Grain where installed.

On the tutorial's 1 M records (an index built first, outside the timing):
- a batch of 1024 random indices, parsed (`ds[indices]`), in M records/s (target >= 3 M/s on 2 cores)
- a batch of 1024 contiguous indices, parsed (target >= 5 M/s)
- one item parsed, `ds[i]`, in microseconds (target <= 15 us)
- one raw record, `raw[i]` (no spec), in microseconds (target <= 3 us)
- `DataLoader(ds, batch_size=256, shuffle=True)` in one process, default collate (target >= 0.5 M/s),
  and the same with two workers (recorded)
- streaming the same file with `read_examples`, for scale.
Where `array_record` is installed, the same records in an ArrayRecord file, read in batches of 1024
random indices and one at a time; where `grain` is, `grain.MapDataset.source(ds).shuffle().batch()`
over `IndexedDataset` and over the ArrayRecord source.

Usage: python benchmarks/bench_random_access.py [--records N] [--repeats R]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import DATA, best_of, require_release_build, warm  # noqa: E402
from bench_examples import SPEC, tutorial_file  # noqa: E402

import recordkit as rk  # noqa: E402


def per_item(fn, items: int, repeats: int) -> float:
    """Microseconds per item: the best of `repeats` runs of `fn`, which handles `items` items."""
    seconds, _ = best_of(fn, repeats)
    return seconds / items * 1e6


def line(name: str, value: float, unit: str, target: str, met: bool | None) -> None:
    verdict = "" if met is None else ("MET" if met else "NOT MET")
    print(f"   {name:<56}{value:10.3f} {unit:<12}{target:<16}{verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    require_release_build()
    DATA.mkdir(exist_ok=True)
    path = tutorial_file(args.records)
    rk.build_index(path)
    warm(path)
    ds = rk.IndexedDataset(path, features=SPEC)
    raw = rk.IndexedDataset(path)
    n = len(ds)
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, n, 1024) for _ in range(200)]
    starts = rng.integers(0, n - 1024, 200)
    singles = rng.integers(0, n, 20_000).tolist()
    print(f"recordkit {rk.__version__}; {os.cpu_count()} CPUs; {n:,} tutorial records; best of {args.repeats}\n")

    random_rate = 1024 * len(batches) / best_of(lambda: [ds[b] for b in batches], args.repeats)[0] / 1e6
    line("batch of 1024 random indices, parsed", random_rate, "M records/s", ">= 3", random_rate >= 3)
    contiguous = [np.arange(s, s + 1024) for s in starts]
    contiguous_rate = 1024 * len(contiguous) / best_of(lambda: [ds[b] for b in contiguous], args.repeats)[0] / 1e6
    line("batch of 1024 contiguous indices, parsed", contiguous_rate, "M records/s", ">= 5", contiguous_rate >= 5)
    one = per_item(lambda: [ds[i] for i in singles[:5000]], 5000, args.repeats)
    line("one item parsed, ds[i]", one, "us", "<= 15", one <= 15)
    one_raw = per_item(lambda: [raw[i] for i in singles], len(singles), args.repeats)
    line("one raw record, raw[i]", one_raw, "us", "<= 3", one_raw <= 3)
    if importlib.util.find_spec("torch") is not None:
        from torch.utils.data import DataLoader

        def loader() -> int:
            return sum(len(b["feature0"]) for b in DataLoader(ds, batch_size=256, shuffle=True))

        seconds, got = best_of(loader, min(args.repeats, 2))
        line("DataLoader(ds, batch_size=256, shuffle=True)", got / seconds / 1e6, "M records/s", ">= 0.5",
             got / seconds / 1e6 >= 0.5)
        workers = DataLoader(ds, batch_size=256, shuffle=True, num_workers=2, persistent_workers=True)
        seconds, got = best_of(lambda: sum(len(b["feature0"]) for b in workers), min(args.repeats, 2))
        line("the same with num_workers=2 (recorded)", got / seconds / 1e6, "M records/s", "", None)
    else:
        print("   DataLoader: torch is not installed")
    stream = n / best_of(lambda: sum(len(b["feature0"]) for b in rk.read_examples(path, SPEC, batch_size=1024)),
                         args.repeats)[0] / 1e6
    line("streaming, read_examples(batch_size=1024)", stream, "M records/s", "(for scale)", None)

    array_source = None
    if importlib.util.find_spec("array_record") is not None:
        from array_record.python.array_record_data_source import ArrayRecordDataSource
        from array_record.python.array_record_module import ArrayRecordWriter

        target = DATA / f"tutorial-{n}.array_record"
        if not target.exists():
            writer = ArrayRecordWriter(str(target), "group_size:1")
            for record in rk.TFRecordReader(path):
                writer.write(record)
            writer.close()
        array_source = ArrayRecordDataSource([str(target)])
        rate = 1024 * 20 / best_of(lambda: [rk.parse_example(array_source.__getitems__(b.tolist()), SPEC)
                                            for b in batches[:20]], args.repeats)[0] / 1e6
        line("ArrayRecord: 1024 random indices, parsed", rate, "M records/s", "", None)
        single = per_item(lambda: [array_source[i] for i in singles[:200]], 200, args.repeats)
        line("ArrayRecord: one raw record", single, "us", "", None)
    else:
        print("   ArrayRecord: array_record is not installed")
    if importlib.util.find_spec("grain") is not None:
        import grain

        def grain_epoch(source) -> int:
            # The first 100 000 records, shuffled, in batches of 1024 raw records.
            pipeline = grain.MapDataset.source(source)[:100_000].shuffle(seed=0).batch(1024)
            return sum(len(b) for b in pipeline)

        for name, source in (("IndexedDataset", raw), ("ArrayRecord", array_source)):
            if source is not None:
                seconds, got = best_of(lambda: grain_epoch(source), 1)
                line(f"Grain over {name}: shuffled batches of raw records", got / seconds / 1e3, "K records/s",
                     "", None)
    else:
        print("   Grain: grain is not installed")


if __name__ == "__main__":
    main()
