"""Matmuls over a downcast weight rewritten so the weight is read once (``config.downcast_mm_template``).

An mm or addmm over a single-use fp32 -> 16-bit cast of its weight (kernel/mm_downcast.py's
``downcast_rewrite`` decides):

- One row (decode) is rewritten as decompose_mem_bound_mm rewrites a memory-bound mm,
  ``sum(x[:, :, None] * w[None], 1)``: its loads fuse the cast, one kernel where stock runs
  two (the cast, the GEMM). The cast is left to be inlined: a realized cast of a [K, N]
  weight (Conv1D's) would not fuse into the split reduction over K, which reads it in
  another loop order. The activation is realized, as upstream's decomposition realizes
  both operands: inlined, its producer (a norm) would be recomputed for every row of an
  [N, K] weight, reading three times the bytes of a 16-bit copy. An addmm's bias is added
  in the reduction's last kernel, in fp32 before the output's rounding.
- More rows than one row tile of the mm template spans are swapped, ``(w @ x.t()).t()``:
  the weight is the template's A operand, its column tiles span x's rows, and prologue
  fusion loads it as fp32. An addmm's bias stays in the template's epilogue, as a column.

A bmm of one row over a batch of downcast weights (experts at decode) is a reduction over
K too, ``sum(x[:, :, :, None] * w[:, None], 2)``; a bmm is never swapped.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._dynamo.utils import counters
from torch._inductor.kernel.mm_downcast import downcast_rewrite
from torch._inductor.kernel.mm_downcast_plan import Rewrite
from torch._inductor.pattern_matcher import (
    Arg,
    CallFunction,
    Match,
    PatternMatcherPass,
    register_graph_pattern,
)


aten = torch.ops.aten

DECOMPOSE_DOWNCAST_MM = PatternMatcherPass(pass_name="decompose_downcast_mm")


def _rewrite(match: Match) -> Rewrite | None:
    node = match.output_node()
    # alpha and beta other than 1 are left to addmm
    if node.kwargs:
        return None
    how = downcast_rewrite(*node.args[-2:])
    if how is Rewrite.SWAP and node.target is aten.addmm.default:
        # F.linear's bias, one per output column, becomes a column of the swapped output
        bias = node.args[0].meta.get("val")
        if not (isinstance(bias, torch.Tensor) and bias.dim() == 1):
            return None
    return how


def _rewrites(match: Match) -> bool:
    return _rewrite(match) is not None


def _realize(mat1: Any) -> None:
    if isinstance(mat1, torch.fx.Node):
        mat1.meta["inductor_realize_to_strides"] = True


def _reduction(mat1: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    return torch.sum(mat1.unsqueeze(2) * mat2.unsqueeze(0), dim=1)


def _swapped(mat1: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    return torch.mm(mat2.t(), mat1.t()).t()


def _swapped_addmm(
    bias: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor
) -> torch.Tensor:
    return torch.addmm(bias.unsqueeze(1), mat2.t(), mat1.t()).t()


_COUNTERS = {
    Rewrite.REDUCE_OVER_K: "decompose_downcast_mm",
    Rewrite.SWAP: "swap_downcast_mm",
}


def _count(how: Rewrite | None) -> None:
    counters["inductor"][_COUNTERS[how]] += 1


@register_graph_pattern(
    CallFunction(aten.mm, Arg(), Arg()),
    pass_dict=DECOMPOSE_DOWNCAST_MM,
    extra_check=_rewrites,
)
def decompose_mm(match: Match, mat1: Any, mat2: Any) -> None:
    how = _rewrite(match)
    _count(how)
    if how is Rewrite.SWAP:
        match.replace_by_example(_swapped, [mat1, mat2])
        return
    match.replace_by_example(_reduction, [mat1, mat2])
    _realize(mat1)


@register_graph_pattern(
    CallFunction(aten.addmm, Arg(), Arg(), Arg()),
    pass_dict=DECOMPOSE_DOWNCAST_MM,
    extra_check=_rewrites,
)
def decompose_addmm(match: Match, bias: Any, mat1: Any, mat2: Any) -> None:
    def repl(bias: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor) -> Any:
        return _reduction(mat1, mat2) + bias

    how = _rewrite(match)
    _count(how)
    if how is Rewrite.SWAP:
        match.replace_by_example(_swapped_addmm, [bias, mat1, mat2])
        return
    match.replace_by_example(repl, [bias, mat1, mat2])
    _realize(mat1)


def _reduces(match: Match) -> bool:
    return _rewrite(match) is Rewrite.REDUCE_OVER_K


def _batched_reduction(mat1: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    return torch.sum(mat1.unsqueeze(3) * mat2.unsqueeze(1), dim=2)


@register_graph_pattern(
    CallFunction(aten.bmm, Arg(), Arg()),
    pass_dict=DECOMPOSE_DOWNCAST_MM,
    extra_check=_reduces,
)
def decompose_bmm(match: Match, mat1: Any, mat2: Any) -> None:
    _count(Rewrite.REDUCE_OVER_K)
    match.replace_by_example(_batched_reduction, [mat1, mat2])
    _realize(mat1)
