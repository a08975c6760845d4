"""Configs of the mm template for a matmul whose weight is an fp32 -> 16-bit cast.

Registered for the op names ``mm-downcast`` and ``addmm-downcast``, and for the bmm
template ``bmm-downcast`` and ``baddbmm-downcast``, which kernel/mm_downcast.py's
``DowncastMMChoices`` asks for; they run in default mode too and yield
kernel/mm_downcast_plan.py's configs, none where the plan declines.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TYPE_CHECKING

import sympy

import torch
from torch._inductor import config, ir
from torch._inductor.heuristics.registry import register_template_heuristic
from torch._inductor.heuristics.template.triton import (
    CUDAAddMMTemplateConfigHeuristic,
    CUDAMMTemplateConfigHeuristic,
)
from torch._inductor.kernel.bmm import bmm_template
from torch._inductor.kernel.mm import mm_template
from torch._inductor.kernel.mm_downcast_plan import (
    Device,
    dispatch,
    DowncastMM,
    M_UNBOUNDED,
    plan,
    TileConfig,
)
from torch._inductor.kernel_inputs import MMKernelInputs
from torch._inductor.runtime.triton_compat import Config
from torch._inductor.virtualized import V


if TYPE_CHECKING:
    from collections.abc import Generator

    from torch._inductor.kernel_inputs import KernelInputs


aten = torch.ops.aten
prims = torch.ops.prims

# the op names this file's heuristics serve: the mm template's configs for a downcast weight
DOWNCAST_OPS = {
    "mm": "mm-downcast",
    "addmm": "addmm-downcast",
    "bmm": "bmm-downcast",
    "baddbmm": "baddbmm-downcast",
}
BMM_OPS = ("bmm", "baddbmm")
_VIEWS = (
    aten.permute.default,
    aten.t.default,
    aten.view.default,
    aten.reshape.default,
    aten.expand.default,
)


def _single_use_cast(arg: Any) -> torch.fx.Node | None:
    """The ``convert_element_type`` node of an FX value ``views(convert_element_type(x))``
    where it and each view are used once; None otherwise."""
    while isinstance(arg, torch.fx.Node) and arg.target in _VIEWS:
        if len(arg.users) != 1:
            return None
        arg = arg.args[0]
    if (
        isinstance(arg, torch.fx.Node)
        and arg.target is prims.convert_element_type.default
        and len(arg.users) == 1
    ):
        return arg
    return None


def _fx_downcast(arg: Any) -> bool:
    """The FX value ``arg`` is views of an fp32 -> 16-bit cast, each used once."""
    cast = _single_use_cast(arg)
    if cast is None:
        return False
    src = cast.args[0]
    return (
        isinstance(src, torch.fx.Node)
        and getattr(src.meta.get("val"), "dtype", None) == torch.float32
        and getattr(cast.meta.get("val"), "dtype", None)
        in (torch.float16, torch.bfloat16)
    )


def downcast_problem_fx(mat1: Any, mat2: Any) -> DowncastMM | None:
    """The plan's view of a matmul (an mm's, a bmm's) from its FX operands, before
    lowering; None where a size is symbolic or the operands are not on CUDA."""
    a, b = (getattr(x, "meta", {}).get("val") for x in (mat1, mat2))
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return None
    if a.dim() != b.dim() or a.dim() not in (2, 3) or b.device.type != "cuda":
        return None
    (m, k), n, batch = a.shape[-2:], b.shape[-1], a.shape[0] if a.dim() == 3 else 1
    if not all(isinstance(v, int) for v in (m, n, k, batch)):
        return None
    stride = b.stride(-2)
    return DowncastMM(
        m_max=m,
        n=n,
        k=k,
        weight_downcast=_fx_downcast(mat2),
        x_itemsize=a.dtype.itemsize,
        k_contiguous=isinstance(stride, int) and stride == 1,
        batch=batch,
    )


def _reads_fp32_downcast(node: Any) -> bool:
    """The IR ``node`` is (a view of) a pointwise 16-bit cast of one fp32 buffer."""
    while not isinstance(node, ir.Buffer) and hasattr(node, "data"):
        node = node.data
    if not isinstance(node, ir.ComputedBuffer) or not isinstance(
        node.data, ir.Pointwise
    ):
        return False
    reads = node.get_read_names()
    return (
        node.get_dtype() in (torch.float16, torch.bfloat16)
        and len(reads) == 1
        and V.graph.get_dtype(next(iter(reads))) == torch.float32
    )


def _downcast_operand(
    kernel_inputs: MMKernelInputs, op_name: str, operand: int
) -> bool:
    """The lowered matmul's mat1 (``operand`` 0) or mat2 (1) is an fp32 tensor cast to
    16 bits for it alone."""
    node = V.graph.current_node
    index = {"mm": 0, "addmm": 1, "bmm": 0, "baddbmm": 1}[op_name] + operand
    if node is None or len(node.args) <= index:
        return False
    return _single_use_cast(node.args[index]) is not None and _reads_fp32_downcast(
        kernel_inputs.mat1mat2()[operand]
    )


def _m_range(m: sympy.Expr) -> tuple[int, int]:
    """(the largest value M may take, M_UNBOUNDED where nothing bounds it; a symbolic
    M's size hint, 0 where M is static)."""
    if isinstance(m, (int, sympy.Integer)):
        return int(m), 0
    upper = V.graph.sizevars.shape_env.bound_sympy(m).upper
    hint = V.graph.sizevars.optimization_hint(m)
    # sympy's oo and torch's int_oo are no Integer
    return (int(upper) if isinstance(upper, sympy.Integer) else M_UNBOUNDED), hint


def downcast_problem(kernel_inputs: MMKernelInputs, op_name: str) -> DowncastMM | None:
    """The plan's view of the matmul; None where N or K is symbolic."""
    m, n, k = kernel_inputs.mnk_symbolic()
    if not isinstance(n, (int, sympy.Integer)):
        return None
    if not isinstance(k, (int, sympy.Integer)):
        return None
    m_max, m_hint = _m_range(m)
    mat1 = kernel_inputs.mat1mat2()[0]
    batch = mat1.get_size()[0] if op_name in BMM_OPS else 1
    if not isinstance(batch, (int, sympy.Integer)):
        return None
    p = DowncastMM(
        m_max=m_max,
        m_hint=m_hint,
        n=int(n),
        k=int(k),
        weight_downcast=_downcast_operand(kernel_inputs, op_name, 1),
        # a weight has static rows: A of a symbolic M is the activation; a bmm is
        # not swapped
        a_downcast=not m_hint
        and op_name not in BMM_OPS
        and _downcast_operand(kernel_inputs, op_name, 0),
        batch=int(batch),
    )
    x = kernel_inputs.mat1mat2()[1 if p.weight_is_a else 0]
    return dataclasses.replace(p, x_itemsize=x.get_dtype().itemsize)


def downcast_device(device: torch.device) -> Device:
    props = torch.cuda.get_device_properties(device)
    return Device(
        sm_count=props.multi_processor_count,
        smem_per_block=getattr(props, "shared_memory_per_block_optin", 0) or 48 * 1024,
        cc=props.major * 10 + props.minor,
    )


class DowncastMMConfigMixin:
    """Configs of the mm template for a downcast weight, in default mode too."""

    def should_run(self, inputs: KernelInputs) -> bool:
        return True

    def get_extra_kwargs(
        self, kernel_inputs: KernelInputs, op_name: str
    ) -> dict[str, Any]:
        # the template's kwargs are the stock op's
        return super().get_extra_kwargs(  # type: ignore[misc]
            kernel_inputs, op_name.removesuffix("-downcast")
        )

    def _get_template_configs_impl(
        self, kernel_inputs: KernelInputs, op_name: str, **kwargs: Any
    ) -> Generator[dict[str, Any], None, None]:
        assert isinstance(kernel_inputs, MMKernelInputs)
        op = op_name.removesuffix("-downcast")
        if op in BMM_OPS and not self.get_extra_kwargs(kernel_inputs, op_name).get(
            "PROLOGUE_LOADS"
        ):
            return  # the bmm template's loads would not fuse the cast
        problem = downcast_problem(kernel_inputs, op)
        if problem is None:
            return
        autotune = config.max_autotune or config.max_autotune_gemm
        device = downcast_device(kernel_inputs.device())
        configs: list[tuple[TileConfig, int | None]] = []
        if not autotune and not V.graph.cpp_wrapper and op not in BMM_OPS:
            # a symbolic M: a kernel per range of M, each for its size hint (the C++
            # wrapper calls a multi-kernel with one kernel's arguments, which kernels
            # of other grids do not share; a bmm keeps one kernel, for M's largest)
            configs = [(q.config, q.hint) for q in dispatch(problem, device)]
        if not configs:
            configs = [
                (c, None) for c in plan(problem, device, neighbours=autotune).configs
            ]
        m, n, k = kernel_inputs.mnk_symbolic()
        for cfg, hint in configs:
            kw = cfg.kwargs()
            stages, warps = kw.pop("num_stages"), kw.pop("num_warps")
            if hint is not None:
                kw["hint_override"] = hint
            yield self._convert_config_to_template_kwargs(  # type: ignore[attr-defined]
                Config(kw, num_warps=warps, num_stages=stages),
                m,
                n,
                k,
                kernel_inputs.out_dtype(),
            )


@register_template_heuristic(
    mm_template.uid,
    "cuda",
    register=torch.version.hip is None,
    op_name=DOWNCAST_OPS["mm"],
)
class CUDADowncastMMTemplateConfigHeuristic(
    DowncastMMConfigMixin, CUDAMMTemplateConfigHeuristic
):
    pass


@register_template_heuristic(
    mm_template.uid,
    "cuda",
    register=torch.version.hip is None,
    op_name=DOWNCAST_OPS["addmm"],
)
class CUDADowncastAddMMTemplateConfigHeuristic(
    DowncastMMConfigMixin, CUDAAddMMTemplateConfigHeuristic
):
    def adjust_kernel_inputs(
        self, kernel_inputs: KernelInputs, op_name: str
    ) -> KernelInputs:
        # default mode hands addmm its bias unexpanded; the template's epilogue reads
        # it at the output's index, as under max-autotune
        assert isinstance(kernel_inputs, MMKernelInputs)
        from torch._inductor.lowering import expand
        from torch._inductor.select_algorithm import realize_inputs

        bias, mat1, mat2 = kernel_inputs.nodes()
        size = kernel_inputs.output_layout().size
        if list(bias.get_size()) == list(size):
            return kernel_inputs
        if not isinstance(bias, ir.TensorBox):
            bias = ir.TensorBox(bias)
        return MMKernelInputs(
            [realize_inputs(expand(bias, size)), mat1, mat2],
            scalars=kernel_inputs._scalars,
        )


@register_template_heuristic(
    bmm_template.uid,
    "cuda",
    register=torch.version.hip is None,
    op_name=DOWNCAST_OPS["bmm"],
)
class CUDADowncastBMMTemplateConfigHeuristic(
    DowncastMMConfigMixin, CUDAMMTemplateConfigHeuristic
):
    pass


@register_template_heuristic(
    bmm_template.uid,
    "cuda",
    register=torch.version.hip is None,
    op_name=DOWNCAST_OPS["baddbmm"],
)
class CUDADowncastBaddBMMTemplateConfigHeuristic(
    DowncastMMConfigMixin, CUDAAddMMTemplateConfigHeuristic
):
    pass
