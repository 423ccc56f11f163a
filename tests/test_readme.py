"""Every code block of the README runs, in order, in an empty folder holding only what the repository ships.

The blocks share one folder and (for Python) one namespace, as a reader
following the README top to bottom would. The set-up block's ``pip install``
and ``pytest`` lines are what ``.ci/run`` runs; this test checks that they
are there rather than running them again.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
OPTIONAL = ("jax", "ray", "dask", "pyspark", "torch", "pyarrow", "pandas")


def blocks_of(path: str) -> list[tuple[str, str, int]]:
    text = REPO.joinpath(path).read_text()
    return [(m[1], m[2], text[: m.start()].count("\n") + 1) for m in BLOCK.finditer(text)]


BLOCKS = blocks_of("README.md")
# Where Spark's and Ray's workers start: checked with the README under a Python not on PATH.
ENGINE_BLOCKS = blocks_of("docs/guides/engines.md")
RUN_BY_CI = ('pip install -e ".[dev]"', "pytest -n auto")  # the set-up and test commands: .ci/run runs them


def test_the_readme_has_blocks_and_ci_runs_its_commands() -> None:
    assert [lang for lang, _, _ in BLOCKS].count("python") >= 4 and BLOCKS[0][0] == "bash"
    setup = [line.split("#")[0].strip() for line in BLOCKS[0][1].splitlines()]
    assert setup[0] == RUN_BY_CI[0] and setup[2] == RUN_BY_CI[1] and setup[1].startswith("recordkit ")
    ci = (REPO / ".ci" / "run").read_text()
    assert all(command in ci for command in setup), "the README's set-up, main job and test command must be what CI runs"


def test_readme_blocks_run_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One test for the whole README, so that its blocks run in order in one folder and
    namespace whatever runs the tests (``pytest -n auto`` spreads tests over processes)."""
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    shutil.copytree(REPO / "docs" / "images", tmp_path / "docs" / "images")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__readme__"}
    for lang, code, line in BLOCKS:
        if lang == "python":
            if any(re.search(rf"^(import|from) {module}\b", code, re.M) and importlib.util.find_spec(module) is None
                   for module in OPTIONAL):
                continue  # an optional package that is not installed: its block alone is left out
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # a README example that warns is a README that misleads
                # except Ray's warnings about its own settings, from inside Ray (hidden from users by default)
                warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"ray\.")
                exec(compile(code, f"README.md:{line}", "exec"), namespace)
        elif lang == "bash":
            commands = [c for c in code.splitlines() if c.split("#")[0].strip() not in RUN_BY_CI]
            env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
            result = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(commands)], cwd=tmp_path,
                                    capture_output=True, text=True, env=env, timeout=300)
            assert result.returncode == 0, f"README.md:{line}\n{result.stdout}\n{result.stderr}"
        else:
            pytest.fail(f"README.md:{line}: a {lang!r} block, which this test does not know how to run")


def test_the_python_blocks_run_under_a_python_that_is_not_on_path(tmp_path: Path) -> None:
    """As from a virtual environment's Python that was not activated: nothing a block of
    the README or of the engines' guide starts (Spark's workers, Ray's, a subprocess)
    may assume ``python3`` on PATH is it."""
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    shutil.copytree(REPO / "docs" / "images", tmp_path / "docs" / "images")
    blocks = []
    for lang, code, line in [(lang, code, f"README.md:{line}") for lang, code, line in BLOCKS] + [
            (lang, code, f"docs/guides/engines.md:{line}") for lang, code, line in ENGINE_BLOCKS]:
        if lang == "bash":
            commands = [c for c in code.splitlines() if c.split("#")[0].strip() not in RUN_BY_CI]
            blocks.append(f"subprocess.run(['bash', '-euo', 'pipefail', '-c', {chr(10).join(commands)!r}], check=True, "
                          "stdout=subprocess.DEVNULL, env=dict(os.environ, PATH=recordkit_bin + os.pathsep + os.environ['PATH']))")
        elif all(importlib.util.find_spec(module) is not None for module in OPTIONAL
                 if re.search(rf"^(import|from) {module}\b", code, re.M)):
            blocks.append(f"exec(compile({code!r}, {line!r}, 'exec'))")
    program = ("import os, subprocess, sys, warnings\nwarnings.simplefilter('error')\n"
               "warnings.filterwarnings('ignore', category=DeprecationWarning, module=r'ray\\.')\n"
               "warnings.filterwarnings('ignore', category=FutureWarning, module=r'pyspark\\.')\n"
               f"recordkit_bin = {os.path.dirname(sys.executable)!r}\n" + "\n".join(blocks))
    here = os.path.realpath(os.path.dirname(sys.executable))
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                           if p and os.path.realpath(p) != here and "shims" not in p)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    result = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True,
                            env=dict(env, PATH=path), timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
