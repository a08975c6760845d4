"""Generated code with what varies between runs and machines masked, for golden files
(``TestCase.assertExpected``) of the project's own tests. The exported feature tests
carry the same masks in their own ``golden_code`` helper."""
from __future__ import annotations

import re

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
