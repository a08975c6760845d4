"""The tensorcore_mm pipeline runs one way: the lowering (kernel/mm_tensorcore.py) builds
the Problem from the graph, the plan module decides with no Inductor (nor torch) import,
and the template's heuristic only passes the plan's configs on; the kernel never imports
its heuristic back; the code holds no GPU's product name and no lab note (timings live in
BENCHMARKS.md); no function of the package runs past 80 lines. Project rules, checked on the overlay's own modules; and across the tree,
no text tells how the project was built (history lives in git)."""
from __future__ import annotations

import ast
import pathlib
import re
import subprocess

from torch._inductor.test_case import run_tests, TestCase

import torch_overlay._inductor as overlay_inductor

INDUCTOR = pathlib.Path(overlay_inductor.__file__).parent
REPO = pathlib.Path(__file__).resolve().parent.parent
KERNEL = INDUCTOR / "kernel"
# what upstream code must not hold: a GPU's product name (the plan reads what a device
# reports, never its name) or a lab note (a measured ratio, a timing, a date)
PRODUCT = re.compile(r"\b(?:[ABHL]\d{2,3}[A-Z]?|GB?\d{3}|V100|T4|L4|RTX)\b")
LAB_NOTE = re.compile(r"\b\d+\.\d+x\b|\b\d+(?:\.\d+)? ?us\b|\b20\d\d-\d\d-\d\d\b")
# upstream's style: a function does one thing; a longer one is split into helpers
MAX_FUNCTION_LINES = 80


# how the project was built, in any text of the tree: work periods ("the twenty-sixth
# session"), tracker references ("issue 21", "#50"), the machines and tools it was
# worked on with. pytest's scope="session" is an identifier, not a narration.
ORDINAL = (r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh"
           r"|twelfth|(?:thir|four|fif|six|seven|eigh|nine)teenth|twentieth|twenty-\w+"
           r"|thirtieth|thirty-\w+)")
NARRATION = re.compile(
    r"\bsessions?\b|\b(?:twentieth|thirtieth|(?:twenty|thirty)-(?:first|second|third|\w+th))\b"
    r"|\b" + ORDINAL + r" (?:work period|run of the project)\b"
    r"|\bissues? #?\d+|(?<![\w&/#])#\d+\b"
    r"|\bdevice tool\b|\bworkplace\b|\blent\b|\.devrun\b|\bnvidia-h200(?:-x\d)?\b",
    re.IGNORECASE)
IDENTIFIER = re.compile(r"""scope\s*=\s*["']session["']|["']session["']""")
# where the rule is stated, the words are named
RULE_FILES = {"test/test_pipeline.py"}


def narration(text: str) -> list[str]:
    return [m.group(0) for m in NARRATION.finditer(IDENTIFIER.sub("", text))]


def tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                             check=True, timeout=30).stdout.split()
    except (OSError, subprocess.SubprocessError):  # a copy of the tree without .git
        out = [str(p.relative_to(REPO)) for p in REPO.rglob("*")
               if p.is_file() and ".git" not in p.parts]
    return sorted(out)


def imports(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return ([a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
            + [n.module or "." for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)])


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``name:line (n lines)`` of each function or method of ``source`` over ``limit``
    lines, its decorators aside."""
    return [
        f"{n.name}:{n.lineno} ({n.end_lineno - n.lineno + 1} lines)"
        for n in ast.walk(ast.parse(source))
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        and n.end_lineno - n.lineno + 1 > limit
    ]


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

    def test_the_check_finds_a_long_function(self):
        def source(body_lines: int) -> str:
            return "class C:\n    def f(self):\n" + "        x = 1\n" * body_lines

        self.assertEqual(long_functions(source(MAX_FUNCTION_LINES)), ["f:2 (81 lines)"])
        self.assertEqual(long_functions(source(MAX_FUNCTION_LINES - 1)), [])

    def test_no_function_over_80_lines(self):
        """Every function and method of the package: the overlays' modules, the
        registry, the testing plugin."""
        package = INDUCTOR.parent
        paths = sorted(package.rglob("*.py"))
        self.assertGreater(len(paths), 20)
        found = [
            f"{path.relative_to(package.parent)}: {f}"
            for path in paths
            for f in long_functions(path.read_text())
        ]
        self.assertEqual(found, [])


def own_lines(name: str, text: str):
    """(number, line) of the project's own words: a diff's context and removed lines
    are upstream's (its comments may cite upstream PRs by number)."""
    diff = name.endswith((".diff", ".patch"))
    for number, line in enumerate(text.splitlines(), 1):
        if not (diff and line[:1] in (" ", "-")):
            yield number, line


class TestNoNarration(TestCase):
    def test_upstream_lines_of_a_diff_are_not_ours(self):
        text = " # unfuse (PR #183680)\n-# was (PR #1)\n+# see #50\n"
        self.assertEqual([n for n, _ in own_lines("x.diff", text)], [3])
        self.assertEqual([n for n, _ in own_lines("x.md", text)], [1, 2, 3])

    def test_the_check_finds_narration(self):
        sess = "sess" + "ion"
        for line in (f"the twenty-sixth {sess}'s heading", f"no H100 this {sess}",
                     "(issue 21; 2026-11-28)", "issues 21, 22", "see #50",
                     "on the device " + "tool", "this work" + "place", "no H100 was " + "lent",
                     "the twenty-first" + " run", "the nineteenth work" + " period",
                     "nvidia-h200" + "-x2"):
            self.assertTrue(narration(line), line)
        for line in ('@pytest.fixture(scope="' + sess + '")', "pytest_" + sess + "start",
                     "def tearDown(self): ...", "x[#]", "a #include", "color: #fff",
                     "torch 2.15.0, 2026-11-28, H200", "the first tile; the second pass",
                     "a sixteenth of the tile"):
            self.assertEqual(narration(line), [], line)

    def test_no_narration_in_the_tree(self):
        """Docs, code and its comments, result files, patches: every tracked text file."""
        found, files = [], 0
        for name in tracked_files():
            if name in RULE_FILES:
                continue
            try:
                text = (REPO / name).read_text()
            except (UnicodeDecodeError, OSError):
                continue  # binary, or not in this copy
            files += 1
            for number, line in own_lines(name, text):
                for words in narration(line):
                    found.append(f"{name}:{number}: {words!r}: {line.strip()[:100]}")
        self.assertGreater(files, 100)
        self.assertEqual(found, [])


if __name__ == "__main__":
    run_tests()
