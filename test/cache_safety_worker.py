"""One process of test_cache_safety: compile sin(x) on CPU with a toy overlay on or off.

The toy overlay edits ``GraphLowering.call_function`` (a hunk, as the real overlays
are) to lower aten.sin as cos behind its flag, so the result tells which code ran.
Prints one JSON line: the state, whether the result was cos, and the cache hits.
"""
import dataclasses
import difflib
import inspect
import json
import pathlib
import sys
import tempfile

from torch_overlay import _autoload  # imports no torch

# The activation hook of `python tools/apply.py`, were it installed in this environment
# when this process started (test_apply installs it for a moment, and a parallel run
# overlaps), would declare and enable every overlay here, so the cache key of this
# process would depend on that moment: this process enables only its toy overlay.
sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _autoload._WaitForInductor)]

import torch
import torch._inductor.graph
from torch._dynamo.utils import counters

import torch_overlay
from torch_overlay._edits import FileDiff, plan_swaps
from torch_overlay._registry import REGISTRY, Overlay

ANCHOR = "        if target is operator.getitem and isinstance(args[0], (list, tuple, dict)):\n"
EDIT = ("        if {gate}target is torch.ops.aten.sin.default:\n"
        "            target = torch.ops.aten.cos.default\n")
DIRECTORY = pathlib.Path(tempfile.mkdtemp())


def write_edits(gate: str = "config.toy_sin_as_cos and ") -> list[pathlib.Path]:
    source = inspect.getsource(torch._inductor.graph)
    graph = DIRECTORY / "graph.toy_sin_as_cos.diff"
    graph.write_text("".join(difflib.unified_diff(
        source.splitlines(True), source.replace(ANCHOR, EDIT.format(gate=gate) + ANCHOR, 1).splitlines(True),
        "a/torch/_inductor/graph.py", "b/torch/_inductor/graph.py")))
    config = DIRECTORY / "config.toy_sin_as_cos.diff"
    config.write_text("--- a/torch/_inductor/config.py\n+++ b/torch/_inductor/config.py\n"
                      "@@ -1,0 +1,1 @@\n+toy_sin_as_cos: bool = False\n")
    return [config, graph]


@dataclasses.dataclass(frozen=True)
class ToyOverlay(Overlay):
    @property
    def edit_files(self):
        return write_edits()


def main(state: str, unsafe: bool) -> None:
    if state == "on":
        if unsafe:  # control: the edit alone, with no flag or digest in the config
            graph = FileDiff.read(write_edits(gate="")[1])
            for swap in plan_swaps([graph]):
                swap.apply()
        else:
            REGISTRY.register(ToyOverlay(name="toy_sin_as_cos", purpose="cache-safety probe",
                                         flag="toy_sin_as_cos"))
            torch_overlay.enable("toy_sin_as_cos")
    x = torch.randn(64)
    out = torch.compile(torch.sin)(x)
    print(json.dumps({
        "state": state,
        "cos": bool(torch.allclose(out, torch.cos(x))),
        "sin": bool(torch.allclose(out, torch.sin(x))),
        "fx_hits": counters["inductor"]["fxgraph_cache_hit"],
        "aot_hits": counters["aot_autograd"]["autograd_cache_hit"],
    }))


if __name__ == "__main__":
    main(sys.argv[1], unsafe="--unsafe" in sys.argv)
