"""``python -m torch_overlay``: the ``torch-overlay`` command (``torch_overlay.cli``)."""
import sys

from torch_overlay.cli import main

sys.exit(main(prog="python -m torch_overlay"))
