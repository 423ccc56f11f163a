"""Shared fixtures: where the conformance corpus lives, Hypothesis settings, and
parse outputs as the rows ``rk.read_table`` gives."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import settings

import recordkit as rk

settings.register_profile("ci", max_examples=60, deadline=None)
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parent.parent
# The project's own copy of the conformance corpus (`python scripts/refresh_conformance.py`
# refreshes it): tests never read outside the repository.
CONFORMANCE = Path(os.environ.get("RECORDKIT_CONFORMANCE", REPO / "tests" / "data" / "conformance"))


# Defines peak_rss_mb() in a script run as a child process: the peak resident memory of
# that process, in MB. Not ru_maxrss: Linux carries a parent's high-water mark through
# fork and exec, so a child of a large pytest process would start at the parent's peak,
# and a bound on its growth would hold whatever it did. VmHWM is the child's own.
PEAK_RSS_MB = textwrap.dedent(
    """
    def peak_rss_mb():
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) // 1024
    """
)


# The seeds `fresh_seed` drew, by the test file that drew them.
_SEEDS: dict[str, list[int]] = {}


def fresh_seed() -> int:
    """A seed for a test that draws new data on every run: ``RECORDKIT_TEST_SEED``
    where it is set (to run a failure again), else a random one. A failing test's
    report names the seeds its file drew (also those of module fixtures)."""
    chosen = os.environ.get("RECORDKIT_TEST_SEED")
    seed = int(chosen) if chosen else int.from_bytes(os.urandom(4), "little")
    drawing = os.environ.get("PYTEST_CURRENT_TEST", "").split("::")[0]
    _SEEDS.setdefault(drawing, []).append(seed)
    return seed


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = (yield).get_result()
    seeds = _SEEDS.get(item.nodeid.split("::")[0])
    if report.failed and seeds:
        report.sections.append(("seeds drawn", "\n".join(f"RECORDKIT_TEST_SEED={s}" for s in seeds)))


def load_cases() -> list[dict]:
    """Every case of the conformance corpus. A missing corpus is an error, not a skip."""
    cases_file = CONFORMANCE / "cases.json"
    if not cases_file.exists():
        raise RuntimeError(
            f"conformance corpus not found at {CONFORMANCE}; "
            "it ships in tests/data/conformance; set RECORDKIT_CONFORMANCE to another folder holding cases.json"
        )
    return json.loads(cases_file.read_text())["cases"]


@pytest.fixture(scope="session")
def conformance_dir() -> Path:
    return CONFORMANCE / "files"


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths ``os.fsync`` is called on from now on, in order (the calls still happen)."""
    paths: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return paths


def table_rows(spec: Any, output: Any, batch: int, lengths: Any = None) -> list:
    """A parse output (``rk.parse_example``'s or ``rk.parse_sequence_example``'s) as
    the Python value of each row that ``rk.read_table`` gives for ``spec``'s column."""
    if isinstance(output, rk.RaggedArray):
        return output.to_list()
    if isinstance(output, rk.SparseArray):
        sparse = isinstance(spec, rk.SparseFeature)
        rows: list = [{"indices": [], "values": []} if sparse else [] for _ in range(batch)]
        for index, v in zip(output.indices.tolist(), output.values.tolist()):
            if sparse:
                rows[index[0]]["indices"].append(index[1] if len(index) == 2 else index[1:])
                rows[index[0]]["values"].append(v)
            else:
                rows[index[0]].append(v)
        return rows
    if lengths is not None:  # a FixedLenSequenceFeature: padded steps, then the real count of each
        return [row[:n] for row, n in zip(output.tolist(), lengths.tolist())]
    return output.tolist()


def uneven_shards(folder: Path, compression: str | None = None, sizes: tuple[int, ...] = (0, 3000, 17000, 40000)) -> int:
    """A set of shards of uneven sizes (one empty), as an engine test reads them:
    record i of the whole set holds ``id`` = i, a string, a float and a list
    whose length varies. Returns the number of records."""
    folder.mkdir(parents=True, exist_ok=True)
    suffix = {None: ".tfrecord", "gzip": ".tfrecord.gz", "zlib": ".tfrecord.zz"}[compression]
    first = 0
    for i, n in enumerate(sizes):
        ids = np.arange(first, first + n, dtype=np.int64)
        rk.write_examples(folder / f"part-{i:05d}{suffix}", {
            "id": ids,
            "name": np.array([b"r%d" % k for k in ids], dtype=object),
            "score": (ids % 97).astype(np.float32),
            "tags": [list(range(int(k) % 4)) for k in ids],
        }, compression=compression)
        first += n
    return first


def damage_record(path: Path, record: int) -> int:
    """Flips a payload byte of ``record`` of an uncompressed file; returns the
    offset of that payload, the offset a bad data CRC is reported at."""
    from recordkit.index import _frames

    offsets = np.concatenate([o for o, _ in _frames(str(path))])
    payload = int(offsets[record]) + 12
    data = bytearray(path.read_bytes())
    data[payload + 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return payload


def tensorflow_ids(files: list[str]) -> list[int]:
    """The ``id`` of every record of ``files`` as TensorFlow reads and parses them
    (``tags`` parsed too, so a bad list fails here)."""
    tf = pytest.importorskip("tensorflow")
    spec = {"id": tf.io.FixedLenFeature([], tf.int64), "tags": tf.io.VarLenFeature(tf.int64)}
    batches = tf.data.TFRecordDataset(files).batch(8192).map(lambda r: tf.io.parse_example(r, spec))
    return [int(i) for batch in batches for i in batch["id"].numpy()]
