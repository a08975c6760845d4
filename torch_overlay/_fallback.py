"""A safety net of tensorcore_mm, applied at run time and never exported: a graph whose
compile fails after the lowering made tensorcore_mm kernels is compiled again with
``tensorcore_mm_autocast`` off, instead of failing the compile.

``compile_fx.tensorcore_mm_fallback.diff`` has ``fx_codegen_and_compile`` call
``compile_with_stock_fallback`` while ``config.tensorcore_mm_autocast`` and
``config.tensorcore_mm_fallback`` (on by default) are on. Upstream's select_algorithm is
where a failing choice is dropped; a whole-graph retry is this project's guard for what
gets past it, so the exported series has none of it.

A single choice is compiled and loaded with the output module, in parallel with its
other kernels: a kernel the driver cannot load (no binary for the GPU) fails the compile
there, where the lowering can no longer take it back. A retry costs a failed graph a
second compile (from a copy of the graph the post-grad passes have not rewritten) instead
of every graph a serial compile of each template while lowering.

The graph made tensorcore_mm kernels if the counters the lowering keeps
(``counters["inductor"]``, ``LOWERED``) grew during its compile: no hook in the exported
module. The counters are then the retry's, with ``tensorcore_mm_fallback:compile_error``
counted; one warning a cause (a driver without the binary fails every graph alike), the
later ones at debug level. ``TORCHINDUCTOR_STRICT_FALLBACKS=1`` raises the error instead.
"""
from __future__ import annotations

import logging
import operator
from typing import Any, Callable

import torch
from torch._dynamo.utils import counters

log = logging.getLogger(__name__)

# counters["inductor"] keys the lowering counts once for each matmul it lowers to its
# kernels: the template (a symbolic M's dispatch among them) and the one-row reduction
# (the gemv template's, or Inductor's where that has no config)
LOWERED = ("tensorcore_mm_template", "tensorcore_mm_gemv")
COMPILE_ERROR = "tensorcore_mm_fallback:compile_error"

_failed_compiles: set[str] = set()


def compile_with_stock_fallback(
    compile_graph: Callable[..., Any], gm: torch.fx.GraphModule, *args: Any
) -> Any:
    """``compile_graph(gm, *args)``, the post-grad passes, codegen and compile of one
    graph; where that fails after the graph lowered matmuls to tensorcore_mm's kernels,
    the graph again with the stock lowering."""
    from torch._inductor import config as inductor_config
    from torch._inductor.fx_passes.matmul_meta import strict_fallbacks
    from torch._inductor.kernel.mm_tensorcore import _OPS

    # a graph without a matmul tensorcore_mm lowers compiles as it is
    if not any(n.target in _OPS for n in gm.graph.nodes):
        return compile_graph(gm, *args)
    # the passes rewrite gm in place: the retry needs the graph as it came
    graph = torch.fx.Graph()
    graph._codegen = gm.graph._codegen
    graph.output(graph.graph_copy(gm.graph, {})).meta = dict(gm.graph.output_node().meta)
    attrs = {n.target: operator.attrgetter(n.target)(gm)
             for n in gm.graph.nodes if n.op == "get_attr"}
    meta = dict(gm.meta)
    before = counters["inductor"].copy()
    try:
        return compile_graph(gm, *args)
    except Exception as e:
        lowered = {k: counters["inductor"][k] - before[k] for k in LOWERED
                   if counters["inductor"][k] > before[k]}
        if not lowered or strict_fallbacks():
            raise
        _compile_failed(", ".join(f"{n} {k}" for k, n in lowered.items()), e)
    counters["inductor"].clear()
    counters["inductor"].update(before)
    counters["inductor"][COMPILE_ERROR] += 1
    unrewritten = torch.fx.GraphModule(attrs, graph)
    unrewritten.meta.update(meta)
    with inductor_config.patch(tensorcore_mm_autocast=False):
        return compile_graph(unrewritten, *args)


def _compile_failed(lowered: str, e: Exception) -> None:
    """One warning a cause: a driver without the binary fails every graph alike."""
    cause = f"{type(e).__name__}: {e}"
    report = log.debug if cause in _failed_compiles else log.warning
    _failed_compiles.add(cause)
    report("tensorcore_mm: a graph that lowered %s failed to compile or load; compiled "
           "again with the stock lowering (config.tensorcore_mm_fallback): %s",
           lowered, cause)
