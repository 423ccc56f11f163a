"""Helpers shared by the benchmark scripts."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import recordkit

DATA = Path(__file__).resolve().parent / "data"


def require_release_build() -> None:
    """Refuses to measure a debug build: its numbers mean nothing."""
    profile = recordkit._native.build_profile
    if profile != "release":
        raise SystemExit(f"recordkit is a {profile} build; reinstall with `pip install -e .` (release)")


def setup(doc: str, repeats: int):
    """The usual start of a benchmark: ``--records``, ``--large`` and ``--repeats``
    parsed, a debug build refused, the data folder made. Returns ``(args, tf)``,
    ``tf`` being TensorFlow or None when it is not installed."""
    import argparse

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--large", type=int, default=4_000)
    parser.add_argument("--repeats", type=int, default=repeats)
    args = parser.parse_args()
    require_release_build()
    DATA.mkdir(exist_ok=True)
    return args, import_tensorflow()


def best_of(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    """Best wall time of `repeats` runs (the machine is noisy; the minimum is the signal)."""
    best, result = float("inf"), None
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def best_of_each(fns: list[Callable[[], object]], repeats: int,
                 setups: list[Callable[[], object] | None] | None = None) -> list[tuple[float, object]]:
    """Best wall time of each function, their runs interleaved (a, b, a, b, ...) so that
    drift in the machine's load hits every contender alike. Returns (seconds, result) each.
    ``setups[i]``, where given, runs before each run of ``fns[i]``, outside the timing."""
    return [(run.wall, run.result) for run in fastest_of_each(fns, repeats, setups)]


@dataclass
class Run:
    """One timed run: wall time, the process's CPU time and the calling thread's (s)."""

    wall: float
    cpu: float
    main_cpu: float
    result: object


def fastest_of_each(fns: list[Callable[[], object]], repeats: int,
                    setups: list[Callable[[], object] | None] | None = None) -> list[Run]:
    """The fastest run of each function, interleaved as in :func:`best_of_each`, with
    its CPU times: where nothing else runs meanwhile (TensorFlow's pools idle), the
    process's CPU time is the work the run's threads did."""
    fastest = [Run(float("inf"), 0.0, 0.0, None) for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            if setups and setups[i]:
                setups[i]()
            gc.collect()
            cpu, main_cpu, start = time.process_time(), time.thread_time(), time.perf_counter()
            result = fn()
            wall = time.perf_counter() - start
            if wall < fastest[i].wall:
                fastest[i] = Run(wall, time.process_time() - cpu, time.thread_time() - main_cpu, result)
    return fastest


def best_time_without_tensorflow(module: str, call: str, repeats: int) -> float:
    """Best wall time (s) of `call`, an expression over the names of the benchmark
    script `module`, in a fresh interpreter that never imports TensorFlow, as a
    PyTorch or JAX user's would be. Importing TensorFlow frees large buffers, which
    moves glibc's malloc out of its start-up state (freed memory kept for reuse
    instead of handed back), so a figure taken beside TensorFlow can flatter
    anything that allocates per record."""
    code = (f"import sys, time; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
            f"from {module} import *; best = float('inf')\n"
            f"for _ in range({repeats}):\n"
            f"    t = time.perf_counter(); {call}; best = min(best, time.perf_counter() - t)\n"
            "print(best)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout)


def warm(path: Path) -> None:
    """Pulls a file into the page cache so every reader starts equal."""
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def import_tensorflow():
    """TensorFlow, quiet, or None when it is not installed."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        import tensorflow as tf
    except ImportError:
        return None
    return tf


def removal(path: Path) -> Callable[[], None]:
    """A setup that deletes ``path``, so that the timed run writes a new file."""
    return lambda: path.unlink(missing_ok=True)


def tensorflow_writer(tf, records: list[bytes], path: Path, compression: str = "") -> Callable[[], None]:
    """TensorFlow's side of a write benchmark: ``tf.io.TFRecordWriter`` writing
    ``records``, already serialized, to ``path`` (``compression``: "", "GZIP" or "ZLIB")."""
    def write() -> None:
        with tf.io.TFRecordWriter(str(path), options=compression) as writer:
            for record in records:
                writer.write(record)
    return write


def tensorflow_spec(tf, spec: dict) -> dict:
    """A recordkit spec of scalar ``FixedLenFeature``s as TensorFlow's, for its side of a benchmark."""
    dtypes = {"int64": tf.int64, "string": tf.string, "float32": tf.float32}
    return {key: tf.io.FixedLenFeature([], dtypes[f.dtype], default_value=f.default_value) for key, f in spec.items()}
