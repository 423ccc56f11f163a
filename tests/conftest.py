"""Shared fixtures: where the conformance corpus lives, Hypothesis settings, and
parse outputs as the rows ``rk.read_table`` gives."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

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
