"""Every code block of the documentation site runs, page by page, as a reader would run it.

Each page starts in an empty folder holding only what the repository ships
(``examples/``, ``docs/images/``); its blocks share that folder and, for
Python, one namespace, in the order of the page. ``python`` and ``bash``
blocks run; a ``console`` block's ``$ `` lines run and their output must be
what the page shows; ``text`` blocks are shown, not run. A block that only
includes a section of a file (``--8<-- "docs/tutorial.py:setup"``) must name a
section that exists: the file itself is run by ``tests/test_tutorial.py``.
A page whose block imports an optional package that is not installed stops
there, skipped.
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
DOCS = REPO / "docs"
PAGES = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
SNIPPET = re.compile(r'^--8<-- "([^":]+)(?::([\w-]+))?"$')
RUN = {"python", "bash", "console"}
SHOWN = {"text"}
OPTIONAL = ("jax", "ray", "dask", "pyspark", "torch", "duckdb", "polars", "pyarrow", "pandas", "grain")


def blocks(page: str) -> list[tuple[str, str, int]]:
    text = (DOCS / page).read_text()
    return [(m[1], m[2], text[: m.start()].count("\n") + 1) for m in BLOCK.finditer(text)]


def test_every_page_is_in_the_site_and_every_block_has_a_known_kind() -> None:
    nav = (REPO / "mkdocs.yml").read_text()
    assert [p for p in PAGES if p not in nav] == [], "a page the site's navigation leaves out"
    for page in PAGES:
        for lang, _, line in blocks(page):
            assert lang in RUN | SHOWN, f"docs/{page}:{line}: a {lang!r} block, which this test does not know how to run"


def snippet_section(path: str, section: str | None) -> str:
    text = (REPO / path).read_text()
    if section is None:
        return text
    found = re.search(rf"--8<-- \[start:{section}\]\n(.*?)^[^\n]*--8<-- \[end:{section}\]", text, re.S | re.M)
    assert found, f"{path} has no section {section!r}"
    return found[1]


def missing_optional(code: str) -> str | None:
    for module in OPTIONAL:
        if re.search(rf"^\s*(import|from) {module}\b", code, re.M) and importlib.util.find_spec(module) is None:
            return module
    return None


def run_console(code: str, folder: Path, where: str, env: dict[str, str]) -> None:
    """Runs each ``$ command`` and compares what it prints with the lines after it."""
    steps: list[tuple[str, list[str]]] = []
    for line in code.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            assert steps, f"{where}: output before any command"
            steps[-1][1].append(line)
    for command, shown in steps:
        result = subprocess.run(["bash", "-c", command], cwd=folder, capture_output=True, text=True, env=env,
                                timeout=300)
        printed = [line.rstrip() for line in (result.stdout + result.stderr).rstrip("\n").splitlines()]
        assert printed == [line.rstrip() for line in shown], f"{where}: `{command}` printed:\n" + "\n".join(printed)


@pytest.mark.parametrize("page", PAGES)
def test_page_runs(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    shutil.copytree(DOCS / "images", tmp_path / "docs" / "images")
    monkeypatch.chdir(tmp_path)
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    namespace: dict = {"__name__": f"__docs_{page}__"}
    for lang, code, line in blocks(page):
        where = f"docs/{page}:{line}"
        includes = [SNIPPET.match(row.strip()) for row in code.strip().splitlines()]
        if includes and all(includes):
            for include in includes:
                assert snippet_section(include[1], include[2]).strip(), f"{where}: an empty section"
            continue
        if lang in SHOWN:
            continue
        module = missing_optional(code)
        if module is not None:
            pytest.skip(f"{where} needs {module}, which is not installed")
        if lang == "python":
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # a page whose example warns is a page that misleads
                warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"ray\.")
                exec(compile(code, where, "exec"), namespace)
        elif lang == "bash":
            result = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=tmp_path, capture_output=True,
                                    text=True, env=env, timeout=300)
            assert result.returncode == 0, f"{where}\n{result.stdout}\n{result.stderr}"
        else:
            run_console(code, tmp_path, where, env)
