"""``python -m bench.scale``: the scale bench (see :mod:`bench.scale`), or one task process
with ``--child``."""

from __future__ import annotations

import sys

from bench.scale.cli import main

if __name__ == "__main__":
    sys.exit(main())
