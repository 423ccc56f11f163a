"""The fuzz harnesses (fuzz/): every input that ever crashed stays fixed, and the runner finds and saves what crashes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parent.parent / "fuzz"
REGRESSIONS = sorted(FUZZ.glob("regressions/*/*.bin"))
SEEDS = sorted(FUZZ.glob("seeds/*/*.bin"))


def test_every_target_has_seeds_and_regressions_name_real_targets() -> None:
    sys.path.insert(0, str(FUZZ))
    try:
        from harnesses import TARGETS
    finally:
        sys.path.remove(str(FUZZ))
    assert {p.parent.name for p in SEEDS} == set(TARGETS)
    assert {p.parent.name for p in REGRESSIONS} <= set(TARGETS)


@pytest.mark.parametrize("path", REGRESSIONS + SEEDS, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.stem}")
def test_saved_input_runs_clean(path: Path) -> None:
    """Each in its own process under the fuzzer's memory limit: a crash fails this test, not the run."""
    out = subprocess.run([sys.executable, str(FUZZ / "run.py"), "--replay", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"{path.name}: exit {out.returncode}\n{out.stderr[-2000:]}"


def test_the_runner_saves_crashes_and_unexpected_exceptions(tmp_path: Path) -> None:
    env = dict(os.environ, RECORDKIT_FUZZ_SELFTEST="1")
    out = subprocess.run(
        [sys.executable, str(FUZZ / "run.py"), "--targets", "selftest", "--seconds", "4", "--engine", "mutate",
         "--seed", "3", "--crashes", str(tmp_path)],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    saved = {p.name.split("-")[0] for p in (tmp_path / "selftest").glob("*.bin")}
    assert saved == {"crash", "finding"}, out.stdout
    crash = next((tmp_path / "selftest").glob("crash-*.bin"))
    assert len(crash.read_bytes()) >= 100  # the very input that aborted
    assert "signal 6" in crash.with_suffix(".txt").read_text()
    finding = next((tmp_path / "selftest").glob("finding-*.bin"))
    replayed = subprocess.run([sys.executable, str(FUZZ / "run.py"), "--replay", str(finding)],
                              capture_output=True, text=True, env=env)
    assert replayed.returncode != 0 and "KeyError: 'planted'" in replayed.stderr
