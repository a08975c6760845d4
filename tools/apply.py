#!/usr/bin/env python3
"""``python tools/apply.py``: the ``torch-overlay`` command from a checkout
(``torch_overlay.cli``; ``torch-overlay --help`` lists the actions)."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from torch_overlay.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(prog="apply.py"))
