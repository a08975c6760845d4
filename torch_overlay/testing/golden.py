"""Golden files of generated code, in PyTorch's expect-file convention.

``GoldenMixin.assertExpectedCode`` normalises what really varies between runs and
machines, then compares with ``expect/<Class>.<test>[-subname].expect`` beside the
test file. ``EXPECTTEST_ACCEPT=1`` rewrites the file; a mismatch fails with a
unified diff (expected -> actual).
"""
from __future__ import annotations

import difflib
import os
import re
import sys

import expecttest

# (pattern, replacement): each is volatile between runs, processes or machines
VOLATILE = (
    # compile counter of the process
    (re.compile(r"# AOT ID: \['\d+_(\w+)'\]"), r"# AOT ID: ['<N>_\1']"),
    # cache dir and content hash of the kernel file
    (re.compile(r"# kernel path: \S+"), "# kernel path: <cache>"),
    # hash of the Triton build and ptxas on the machine that compiled
    (re.compile(r"'backend_hash': '[0-9A-F]{64}'"), "'backend_hash': '<backend_hash>'"),
    # a constant's address in the wrapper's comment (freezing's _frozen_param<N>)
    (re.compile(r"^(\w+ = None  # device\(.*\)) [0-9a-f]{6,}$", re.M), r"\1 <addr>"),
)

GRAPH_SEPARATOR = "\n# ---- next graph ----\n"


def normalize(code: str | list[str]) -> str:
    if not isinstance(code, str):
        code = GRAPH_SEPARATOR.join(code)
    for pattern, replacement in VOLATILE:
        code = pattern.sub(replacement, code)
    return code


class GoldenMixin:
    """For a unittest.TestCase (``torch._inductor.test_case.TestCase``)."""

    def expect_file(self, subname: str | None = None) -> str:
        module_id = type(self).__module__
        test_id = self.id()[len(module_id) + 1:] if self.id().startswith(module_id) else self.id()
        test_dir = os.path.dirname(os.path.realpath(sys.modules[module_id].__file__))
        name = test_id + (f"-{subname}" if subname else "") + ".expect"
        return os.path.join(test_dir, "expect", name)

    def assertExpectedCode(self, code: str | list[str], subname: str | None = None) -> None:
        actual = normalize(code)
        path = self.expect_file(subname)
        if expecttest.ACCEPT or os.environ.get("EXPECTTEST_ACCEPT"):
            old = open(path).read() if os.path.exists(path) else None
            if old != actual:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write(actual)
                print(f"accepted {'new' if old is None else 'changed'} golden {path}")
            return
        if not os.path.exists(path):
            self.fail(f"no golden file {path}; run with EXPECTTEST_ACCEPT=1 to create it")
        with open(path) as f:
            expected = f.read()
        if expected != actual:
            diff = "".join(
                difflib.unified_diff(
                    expected.splitlines(keepends=True),
                    actual.splitlines(keepends=True),
                    fromfile=f"{path} (golden)",
                    tofile="generated",
                )
            )
            self.fail(
                f"generated code differs from the golden file; read the diff, then accept "
                f"with EXPECTTEST_ACCEPT=1 if it is meant:\n{diff}"
            )
