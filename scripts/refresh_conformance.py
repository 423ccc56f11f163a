"""Refresh the repository's copy of the conformance corpus from ``../shared/conformance``.

The tests read only ``tests/data/conformance``; this script, a maintainer's tool kept
outside the tests, is how that copy follows the corpus TensorFlow wrote. Run it from
anywhere: ``python scripts/refresh_conformance.py``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO.parent / "shared" / "conformance"
TARGET = REPO / "tests" / "data" / "conformance"


def main() -> int:
    """Replace the copy with the shared corpus; refuse if the source is missing."""
    if not (SOURCE / "cases.json").exists():
        print(f"no corpus at {SOURCE}", file=sys.stderr)
        return 1
    staging = TARGET.with_name("conformance.new")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(SOURCE, staging)
    shutil.rmtree(TARGET, ignore_errors=True)
    staging.rename(TARGET)
    print(f"copied {SOURCE} -> {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
