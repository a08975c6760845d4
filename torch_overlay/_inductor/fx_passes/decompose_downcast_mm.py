"""One row over a downcast weight as a reduction over K (``config.downcast_mm_template``).

An mm or addmm of one row (decode) over a single-use fp32 -> 16-bit cast of its weight
reads the weight once. As a reduction over K its loads fuse the cast: the weight is read
once, as fp32, in one kernel where stock runs two (the cast, the GEMM). The pass rewrites
the matmul as decompose_mem_bound_mm does, ``sum(x[:, :, None] * w[None], 1)``, but leaves
the cast to be inlined: a realized cast of a [K, N] weight (Conv1D's) would not fuse into
the split reduction over K, which reads it in another loop order. The activation is
realized, as upstream's decomposition realizes both operands: inlined, its producer (a
norm) would be recomputed for every row of an [N, K] weight, reading three times the bytes
of a 16-bit copy. An addmm's bias is added in the reduction's last kernel, in fp32 before
the output's rounding.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._dynamo.utils import counters
from torch._inductor.kernel.mm_downcast import downcast_one_row_reduces
from torch._inductor.pattern_matcher import (
    Arg,
    CallFunction,
    Match,
    PatternMatcherPass,
    register_graph_pattern,
)


aten = torch.ops.aten

DECOMPOSE_DOWNCAST_MM = PatternMatcherPass(pass_name="decompose_downcast_mm")


def _reduces(match: Match) -> bool:
    node = match.output_node()
    # alpha and beta other than 1 are left to addmm
    return not node.kwargs and downcast_one_row_reduces(*node.args[-2:])


def _realize(mat1: Any) -> None:
    if isinstance(mat1, torch.fx.Node):
        mat1.meta["inductor_realize_to_strides"] = True


def _reduction(mat1: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    return torch.sum(mat1.unsqueeze(2) * mat2.unsqueeze(0), dim=1)


@register_graph_pattern(
    CallFunction(aten.mm, Arg(), Arg()),
    pass_dict=DECOMPOSE_DOWNCAST_MM,
    extra_check=_reduces,
)
def decompose_mm(match: Match, mat1: Any, mat2: Any) -> None:
    counters["inductor"]["decompose_downcast_mm"] += 1
    match.replace_by_example(_reduction, [mat1, mat2])
    _realize(mat1)


@register_graph_pattern(
    CallFunction(aten.addmm, Arg(), Arg(), Arg()),
    pass_dict=DECOMPOSE_DOWNCAST_MM,
    extra_check=_reduces,
)
def decompose_addmm(match: Match, bias: Any, mat1: Any, mat2: Any) -> None:
    def repl(bias: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor) -> Any:
        return _reduction(mat1, mat2) + bias

    counters["inductor"]["decompose_downcast_mm"] += 1
    match.replace_by_example(repl, [bias, mat1, mat2])
    _realize(mat1)
