"""The tensorcore_mm pipeline runs one way: the lowering (kernel/mm_tensorcore.py) builds
the Problem from the graph, the plan module decides with no Inductor (nor torch) import,
and the template's heuristic only passes the plan's configs on; the kernel never imports
its heuristic back. A project rule, checked on the overlay's own modules."""
from __future__ import annotations

import ast
import pathlib

from torch._inductor.test_case import run_tests, TestCase

import torch_overlay._inductor as overlay_inductor

KERNEL = pathlib.Path(overlay_inductor.__file__).parent / "kernel"


def imports(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return ([a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
            + [n.module or "." for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)])


class TestPipeline(TestCase):
    def test_the_decision_imports_no_torch(self):
        found = imports(KERNEL / "mm_tensorcore_plan.py")
        self.assertTrue(found)
        self.assertEqual([m for m in found if m.startswith("torch")], [])

    def test_the_kernel_imports_no_heuristic(self):
        found = imports(KERNEL / "mm_tensorcore.py")
        self.assertIn("torch._inductor.select_algorithm", found)
        self.assertEqual([m for m in found if "heuristics" in m], [])


if __name__ == "__main__":
    run_tests()
