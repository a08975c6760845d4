"""Configs of the ``tensorcore_mm`` / ``tensorcore_bmm`` templates.

The lowering (kernel/mm_tensorcore.py) plans each matmul (kernel/mm_tensorcore_plan.py)
and passes the plan's configs on with the kernel inputs (``TensorCoreMMKernelInputs``):
one in default mode, its neighbours too under max-autotune. This heuristic yields them
and the template's per-matmul arguments.
"""

from __future__ import annotations

from typing import Any, TYPE_CHECKING

import sympy

import torch
from torch._inductor import config
from torch._inductor.codegen.triton import triton_type
from torch._inductor.heuristics.registry import register_template_heuristic
from torch._inductor.kernel_inputs import KernelInputs, MMKernelInputs
from torch._inductor.utils import ceildiv
from torch._inductor.virtualized import V

from ...kernel.mm_tensorcore import (
    tensorcore_bmm_template,
    tensorcore_epilogue,
    tensorcore_mm_template,
)
from .base import TemplateConfigHeuristics

if TYPE_CHECKING:
    from collections.abc import Iterator


_CUDA = torch.version.hip is None


def planned_configs(kernel_inputs: MMKernelInputs) -> list[Any]:
    """The configs the lowering planned. Under max-autotune a symbolic M drops split-K's:
    the autotuner allocates a config's workspace by its count, which M leaves symbolic."""
    # TensorCoreMMKernelInputs: only the tensorcore_mm lowering plans this template
    configs = list(getattr(kernel_inputs, "configs", ()))
    m = kernel_inputs.mnk_symbolic()[0]
    if (config.max_autotune or config.max_autotune_gemm) and not isinstance(
        m, (int, sympy.Integer)
    ):
        configs = [cfg for cfg in configs if cfg.SPLIT_K == 1]
    return configs


@register_template_heuristic(tensorcore_mm_template.uid, "cuda", register=_CUDA)
@register_template_heuristic(tensorcore_bmm_template.uid, "cuda", register=_CUDA)
class TensorCoreMMTemplateConfigHeuristic(TemplateConfigHeuristics):
    """The configs the lowering planned, in default mode as under max-autotune."""

    def _get_template_configs_impl(
        self, kernel_inputs: KernelInputs, op_name: str
    ) -> Iterator[dict[str, Any]]:
        assert isinstance(kernel_inputs, MMKernelInputs)
        k = kernel_inputs.mnk_symbolic()[2]
        for cfg in planned_configs(kernel_inputs):
            yield dict(
                cfg.kwargs(),
                EVEN_K=V.graph.sizevars.statically_known_true(
                    sympy.Mod(k, cfg.BLOCK_K) == 0
                ),
                ACC_TYPE="tl.float32",
            )

    def get_extra_kwargs(
        self, kernel_inputs: KernelInputs, op_name: str
    ) -> dict[str, Any]:
        assert isinstance(kernel_inputs, MMKernelInputs)
        out_dtype = kernel_inputs.out_dtype()
        has_bias = kernel_inputs.count == 3
        alpha = kernel_inputs._scalars.get("alpha", 1)
        beta = kernel_inputs._scalars.get("beta", 1)
        dot_dtype = triton_type(out_dtype)
        extra: dict[str, Any] = {}
        m, n, _ = kernel_inputs.mnk_symbolic()
        workspace = max(
            (
                cfg.workspace_bytes(m, n, ceildiv)
                for cfg in planned_configs(kernel_inputs)
            ),
            key=V.graph.sizevars.optimization_hint,
            default=0,
        )
        if workspace:
            from torch._inductor.codegen.common import WorkspaceArg, WorkspaceZeroMode

            # split-K's semaphores must start at zero
            extra["workspace_arg"] = WorkspaceArg(
                count=workspace,
                zero_mode=WorkspaceZeroMode.ZERO_ON_CALL,
                device=kernel_inputs.device(),
                outer_name=WorkspaceArg.unique_name(),
            )
        return {
            **extra,
            "BATCHED": len(kernel_inputs.mat1mat2()[0].get_size()) == 3,
            "DOT_DTYPE": dot_dtype,
            "epilogue_fn": tensorcore_epilogue(out_dtype, alpha, beta, has_bias),
            "epilogue_fn_hash": str(
                ["tensorcore_epilogue", out_dtype, alpha, beta, has_bias]
            ),
            "prefix_args": 1 if has_bias else 0,
        }
