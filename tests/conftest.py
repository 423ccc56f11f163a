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
CONFORMANCE = Path(os.environ.get("RECORDKIT_CONFORMANCE", REPO.parent / "shared" / "conformance"))


def load_cases() -> list[dict]:
    """Every case of the conformance corpus. A missing corpus is an error, not a skip."""
    cases_file = CONFORMANCE / "cases.json"
    if not cases_file.exists():
        raise RuntimeError(
            f"conformance corpus not found at {CONFORMANCE}; "
            "set RECORDKIT_CONFORMANCE to the folder holding cases.json"
        )
    return json.loads(cases_file.read_text())["cases"]


@pytest.fixture(scope="session")
def conformance_dir() -> Path:
    return CONFORMANCE / "files"
