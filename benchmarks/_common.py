"""Helpers shared by the benchmark scripts."""

from __future__ import annotations

import gc
import os
import time
from pathlib import Path
from typing import Callable

import recordkit

DATA = Path(__file__).resolve().parent / "data"


def require_release_build() -> None:
    """Refuses to measure a debug build: its numbers mean nothing."""
    profile = recordkit._native.build_profile
    if profile != "release":
        raise SystemExit(f"recordkit is a {profile} build; reinstall with `pip install -e .` (release)")


def best_of(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    """Best wall time of `repeats` runs (the machine is noisy; the minimum is the signal)."""
    best, result = float("inf"), None
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


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
