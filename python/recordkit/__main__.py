"""``python -m recordkit``: the same as the ``recordkit`` command."""

import sys

from recordkit.cli import main

sys.exit(main())
