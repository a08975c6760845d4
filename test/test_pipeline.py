"""The tensorcore_mm pipeline runs one way: the lowering (kernel/mm_tensorcore.py) builds
the Problem from the graph, the plan module decides with no Inductor (nor torch) import,
and the template's heuristic only passes the plan's configs on; the kernel never imports
its heuristic back; the code holds no GPU's product name and no lab note (timings live in
BENCHMARKS.md). A project rule, checked on the overlay's own modules."""
from __future__ import annotations

import ast
import pathlib
import re

from torch._inductor.test_case import run_tests, TestCase

import torch_overlay._inductor as overlay_inductor

INDUCTOR = pathlib.Path(overlay_inductor.__file__).parent
KERNEL = INDUCTOR / "kernel"
# what upstream code must not hold: a GPU's product name (the plan reads what a device
# reports, never its name) or a lab note (a measured ratio, a timing, a date)
PRODUCT = re.compile(r"\b(?:[ABHL]\d{2,3}[A-Z]?|GB?\d{3}|V100|T4|L4|RTX)\b")
LAB_NOTE = re.compile(r"\b\d+\.\d+x\b|\b\d+(?:\.\d+)? ?us\b|\b20\d\d-\d\d-\d\d\b")


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

    def test_no_product_name_or_lab_note_in_the_code(self):
        for line in ("1.23x-1.33x on an H200", "0.93x on the H100", "an A10G", "22.3 us"):
            self.assertTrue(PRODUCT.search(line) or LAB_NOTE.search(line), line)
        found, files = [], 0
        for path in sorted(INDUCTOR.rglob("*")):
            if path.suffix not in (".py", ".jinja", ".diff"):
                continue
            files += 1
            for number, line in enumerate(path.read_text().splitlines(), 1):
                # a hunk's own lines; its context is upstream's
                if path.suffix == ".diff" and not line.startswith("+"):
                    continue
                if PRODUCT.search(line) or LAB_NOTE.search(line):
                    found.append(f"{path.relative_to(INDUCTOR)}:{number}: {line.strip()}")
        self.assertGreater(files, 20)
        self.assertEqual(found, [])


if __name__ == "__main__":
    run_tests()
