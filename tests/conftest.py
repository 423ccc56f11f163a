"""Shared fixtures: where the conformance corpus lives, and Hypothesis settings."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("ci", max_examples=60, deadline=None)
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parent.parent
# The project's own copy of the conformance corpus (`python scripts/refresh_conformance.py`
# refreshes it): tests never read outside the repository.
CONFORMANCE = Path(os.environ.get("RECORDKIT_CONFORMANCE", REPO / "tests" / "data" / "conformance"))


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
