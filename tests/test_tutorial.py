"""The tutorials (docs/tutorial.py) run as a user would: a fresh interpreter, an empty folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import recordkit as rk

TUTORIAL = Path(__file__).resolve().parent.parent / "docs" / "tutorial.py"


def test_tutorial_runs_without_tensorflow(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH="")
    result = subprocess.run([sys.executable, str(TUTORIAL)], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "tutorial complete: no TensorFlow, no OneFlow" in result.stdout
    assert 'value: 2.71828175' in result.stdout
    # The files it wrote are what the tutorial describes.
    assert rk.count_records(tmp_path / "test.tfrecord") == 10_000
    assert rk.count_records(tmp_path / "images.tfrecords") == 2
    assert sorted(os.listdir(tmp_path / "ofrecord_dataset")) == [".part-N.recordkit-set", "part-00000", "part-00001"]


def test_import_does_not_pull_in_heavy_packages() -> None:
    code = "import sys, recordkit; print(sorted(m for m in ('tensorflow', 'torch', 'pyarrow', 'pandas', 'fsspec', 'google.protobuf') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr
