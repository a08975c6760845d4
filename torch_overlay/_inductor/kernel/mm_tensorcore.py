"""Autocast matmuls of fp32 tensors, cast in registers (``config.tensorcore_mm_autocast``).

Under ``torch.autocast`` stock Inductor lowers ``F.linear`` of fp32 tensors to one cast
kernel per operand and a 16-bit cuBLAS GEMM (prologue fusion refuses fp32 -> 16-bit
downcasts). For an mm/addmm/bmm/baddbmm whose ``MatmulMeta`` (fx_passes/matmul_meta.py)
says autocast fp16/bf16, ``tuned_tensorcore_mm`` may instead hand the fp32 tensors in
front of the casts to the ``tensorcore_mm`` template, which loads them, rounds them to the
autocast dtype in registers, runs ``tl.dot`` with fp32 accumulation and rounds the result
(after the bias, as cuBLAS does) before any epilogue reads it: eager autocast's numerics.
One row (M = 1) lowers to a reduction over K instead (``_lower_gemv``); over a [K, N]
weight its first stage is the ``tensorcore_gemv`` template, and over an [N, K] one the
template whole where the plan says so (``gemv_nk``).

The plan (path, operands cast in the kernel, tile configs) comes from
kernel/mm_tensorcore_plan.py and reaches the template's heuristic
(heuristics/template/tensorcore_mm.py) with the kernel inputs. ``TensorCoreMMChoices``, an
``InductorChoices`` contributor, answers ``get_template_configs`` for the graph node being
lowered with that lowering as the only choice, which ``autotune_select_algorithm`` takes
without benchmarking. A matmul it does not pay
for and any input it does not handle return None: the stock lowering runs,
counted in ``counters["inductor"]["tensorcore_mm_fallback:<reason>"]`` (or ``..._stock:``
where stock is the better choice). Under max-autotune
the template's configs are autotuned against the stock path as a subgraph of the same
fp32 inputs, where M is static (the subgraph's benchmark would specialize it).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import operator
import pathlib
import weakref
from typing import Any, TYPE_CHECKING

import torch
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config, ir
from torch._inductor.choices import InductorChoices, register_inductor_choices
from torch._inductor.codegen.triton import triton_type
from torch._inductor.ir import ChoiceCaller
from torch._inductor.kernel.bmm import bmm_grid
from torch._inductor.kernel_inputs import MMKernelInputs
from torch._inductor.lowering import expand, lowerings
from torch._inductor.select_algorithm import (
    autotune_select_algorithm,
    realize_inputs,
    SymbolicGridFn,
    TritonTemplate,
)
from torch._inductor.utils import ceildiv, load_template
from torch._inductor.virtualized import ops, V

from ..fx_passes import matmul_meta
from ..fx_passes.matmul_meta import strict_fallbacks, tensor_val as _val, VIEW_OPS
from . import mm_tensorcore_plan as planner

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger(__name__)


# TORCH_LOGS="tensorcore_mm"
plan_log = torch._logging.getArtifactLogger(__name__, "tensorcore_mm")
aten = torch.ops.aten

_TEMPLATE_DIR = pathlib.Path(__file__).parent / "templates"


def _template(name: str, grid: Any) -> TritonTemplate:
    source = load_template("tensorcore_mm", _TEMPLATE_DIR)
    return TritonTemplate(
        name=name, grid=grid, source=source, cache_codegen_enabled_for_template=True
    )


@SymbolicGridFn
def tensorcore_mm_grid(m, n, meta, *, cdiv):
    """One program per tile and K split."""
    return (cdiv(m, meta["BLOCK_M"]) * cdiv(n, meta["BLOCK_N"]), meta["SPLIT_K"], 1)


# One jinja source (templates/tensorcore_mm.py.jinja) for both; they differ in grid.
tensorcore_mm_template = _template("tensorcore_mm", tensorcore_mm_grid)
tensorcore_bmm_template = _template("tensorcore_bmm", bmm_grid)


@SymbolicGridFn
def tensorcore_gemv_grid(splits, n, meta, *, cdiv):
    """One program per BLOCK_N columns and range of ROWS rows."""
    return (cdiv(n, meta["BLOCK_N"]), splits, 1)


# One row times a [K, N] weight (either layout): program (n, s) sums rows
# [s * ROWS, (s + 1) * ROWS) of BLOCK_N columns into row s of an fp32 [splits, N]
# output, reading a [BLOCK_K, BLOCK_N] slab of the weight a step; the sum over the
# splits (where more than one) and the epilogue follow.
tensorcore_gemv_template = TritonTemplate(
    name="tensorcore_gemv",
    grid=tensorcore_gemv_grid,
    source=load_template("tensorcore_gemv", _TEMPLATE_DIR),
    cache_codegen_enabled_for_template=True,
)


def _round(x: Any, dtype: torch.dtype) -> Any:
    # to the 16-bit dtype and back: the value eager autocast holds in memory
    return V.ops.to_dtype(
        V.ops.to_dtype(x, dtype, use_compute_types=False), torch.float32
    )


def tensorcore_epilogue(
    out_dtype: torch.dtype, alpha: Any, beta: Any, has_bias: bool
) -> Callable[..., Any]:
    """acc -> the value eager autocast stores: alpha·acc + beta·bias, rounded once.

    An fp32 bias is first rounded to ``out_dtype``, as autocast casts it.
    """

    def epilogue(acc: Any, bias: Any = None) -> Any:
        if alpha != 1:
            acc = V.ops.mul(acc, V.ops.constant(alpha, torch.float32))
        if has_bias:
            bias = _round(bias, out_dtype)
            if beta != 1:
                bias = V.ops.mul(bias, V.ops.constant(beta, torch.float32))
            acc = V.ops.add(acc, bias)
        return _round(acc, out_dtype)

    return epilogue


# --------------------------------------------------------------------------- lowering

# aten op -> (op name, index of the bias or None, indices of mat1 and mat2)
_OPS: dict[Any, tuple[str, int | None, int, int]] = {
    aten.mm.default: ("mm", None, 0, 1),
    aten.addmm.default: ("addmm", 0, 1, 2),
    aten.bmm.default: ("bmm", None, 0, 1),
    aten.baddbmm.default: ("baddbmm", 0, 1, 2),
}
_HALF = (torch.float16, torch.bfloat16)


class _Decline(Exception):
    """The stock lowering handles this matmul; ``reason`` says why."""

    def __init__(self, reason: str, fallback: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fallback = fallback


class TensorCoreMMKernelInputs(MMKernelInputs):
    """The template's inputs with the configs the plan chose for them."""

    def __init__(
        self, input_nodes: list[Any], configs: list[planner.TileConfig], **kwargs: Any
    ) -> None:
        super().__init__(input_nodes, **kwargs)
        self.configs = configs


def current_device_model(device: torch.device) -> planner.DeviceModel | None:
    """The cost model's view of ``device`` from its properties; None off CUDA."""
    if device.type != "cuda":
        return None
    spec = planner.device_spec(torch.cuda.get_device_properties(device))
    if spec.dram_bw <= 0:  # a torch that does not report the memory clock: ask Triton
        from torch._inductor.utils import get_gpu_dram_gbps

        spec = dataclasses.replace(spec, dram_bw=get_gpu_dram_gbps() * 1e9)
    return planner.device_model(spec)


def _force() -> planner.Force:
    """What ``config.tensorcore_mm_force_*`` force (tests, measurements)."""
    config = inductor_config.tensorcore_mm_force_config
    return planner.Force(
        path=_force_path(inductor_config.tensorcore_mm_force_path),
        fused=inductor_config.tensorcore_mm_force_fused,
        config=planner.TileConfig(**config) if config is not None else None,
    )


def _force_path(value: str | None) -> planner.Path | None:
    """``config.tensorcore_mm_force_path`` as the plan's path; None forces none."""
    if value is None:
        return None
    try:
        return planner.Path(value)
    except ValueError:
        allowed = ", ".join(repr(path.value) for path in planner.Path)
        raise ValueError(
            f"config.tensorcore_mm_force_path is {value!r}: expected None or one of "
            f"{allowed}"
        ) from None


def _count(key: str) -> None:
    counters["inductor"][key] += 1


class _Source:
    """The fp32 tensor behind a matmul operand: ``views(cast(src))``."""

    def __init__(
        self, src: torch.fx.Node, cast: torch.fx.Node, views: list[torch.fx.Node]
    ) -> None:
        self.src, self.cast, self.views = src, cast, views

    @property
    def cast_shared(self) -> bool:
        """The 16-bit cast has users besides this matmul: it runs anyway."""
        chain = [self.cast, *self.views]
        return any(len(n.users) > 1 for n in chain)

    def lower(self) -> Any:
        """The IR of the fp32 source with the same views applied, or None."""
        x = _lowered(self.src)
        if x is None:
            return None
        for view in reversed(self.views):
            x = lowerings[view.target](x, *view.args[1:], **view.kwargs)
        return x


def _lowered(node: torch.fx.Node, depth: int = 0) -> Any:
    """The IR GraphLowering made of ``node``, if still reachable.

    The fx Interpreter drops a value after its last use (here the cast): graph
    inputs stay reachable by name, and a view (``cast(w.t())``) is re-applied to
    the IR of its input.
    """
    env = V.graph.env
    if node in env:
        return env[node]
    if node.op == "placeholder":
        return V.graph.graph_inputs.get(node.target)
    if (
        depth < 8
        and node.op == "call_function"
        and node.target in VIEW_OPS
        and isinstance(node.args[0], torch.fx.Node)
    ):
        inner = _lowered(node.args[0], depth + 1)
        if inner is not None:
            return lowerings[node.target](inner, *node.args[1:], **node.kwargs)
    return None


def _source(
    node: torch.fx.Node, i: int, dtype: torch.dtype, meta_mod: Any
) -> _Source | None:
    """The fp32 source of ``node.args[i]`` when that is ``views(cast(fp32 tensor))``.

    matmul_meta's ``cast_source`` finds the cast; the views in between (F.linear's
    weight arrives as ``permute(cast(w))``) are looked through here and re-applied
    to the fp32 tensor by ``_Source.lower``.
    """
    views, arg = _views(node.args[i])
    parent, index = (views[-1], 0) if views else (node, i)
    src = meta_mod.cast_source(parent, index)
    cast_val, src_val = _val(arg), _val(src)
    if src is None or cast_val is None or src_val is None:
        return None
    if (
        cast_val.dtype != dtype
        or src_val.dtype != torch.float32
        or src_val.device.type != "cuda"
    ):
        return None
    return _Source(src, arg, views)


def _materialized(x: Any) -> bool:
    """A buffer (or a view of one): reading it costs no extra kernel."""
    return ir.is_storage_and_layout(x)


def _operand(
    node: torch.fx.Node, i: int, given: Any, dtype: torch.dtype, meta_mod: Any
) -> tuple[Any, Any | None, bool]:
    """(16-bit IR as given, fp32 IR or None, cast shared) of operand ``i``."""
    src = _source(node, i, dtype, meta_mod)
    if src is None:
        return given, None, False
    if _views(src.src)[1].op not in ("placeholder", "get_attr"):
        # an activation this graph computes (a norm, a residual add): stock writes its
        # 16-bit copy from the kernel that computes it, no cast kernel to save
        return given, None, False
    try:
        fp32 = src.lower()
    except Exception as e:  # a view Inductor cannot re-apply: read the 16-bit cast
        log.debug(
            "tensorcore_mm: operand %d of %s: cannot re-apply views: %s", i, node, e
        )
        return given, None, False
    if fp32 is None or not _materialized(fp32):
        # an unrealized fp32 producer: stock fuses the cast into it and writes 16 bits
        return given, None, False
    return given, fp32, src.cast_shared


def _k_contiguous(mat2: Any) -> bool:
    """``mat2`` ([..., K, N]) has unit stride along K; False while its layout is not
    fixed (an unrealized 16-bit cast)."""
    try:
        return mat2.get_stride()[-2] == 1
    except (NotImplementedError, AttributeError):
        return False


def _views(arg: Any) -> tuple[list[torch.fx.Node], Any]:
    """(the shape ops in front of ``arg``, outermost first, at most 8; what they view)."""
    chain = []
    while (
        len(chain) < 8
        and isinstance(arg, torch.fx.Node)
        and arg.op == "call_function"
        and arg.target in VIEW_OPS
        and isinstance(arg.args[0], torch.fx.Node)
    ):
        chain.append(arg)
        arg = arg.args[0]
    return chain, arg


def _constant(node: torch.fx.Node, i: int, given: Any, dtype: torch.dtype) -> bool:
    """Operand ``i`` is a ``dtype`` constant of the graph, read as stored.

    Under ``torch._inductor.config.freezing`` Inductor folds the autocast cast of each
    fp32 parameter (and F.linear's transpose of it) into a 16-bit constant before the
    post-grad passes and this lowering run: the matmul reads a ``get_attr`` of the
    compute dtype, with no fp32 tensor behind it (``_source`` finds none). Views in
    front of it are looked through, as ``_source`` does.
    """
    arg = _views(node.args[i])[1]
    val = _val(arg)
    return (
        isinstance(arg, torch.fx.Node)
        and (arg.op == "get_attr" or _kept_cast(arg))
        and val is not None
        and val.dtype == dtype
        and given.get_dtype() == dtype
        and _materialized(given)
    )


def _kept_cast(arg: torch.fx.Node) -> bool:
    """A parameter's cast kept across calls (``config.autocast_param_cache``): a 16-bit
    weight in memory, as a frozen one is."""
    kept = getattr(torch.ops.inductor, "cached_casts", None)
    return (
        kept is not None
        and arg.op == "call_function"
        and arg.target is operator.getitem
        and isinstance(arg.args[0], torch.fx.Node)
        and arg.args[0].target is kept.default
    )


@dataclasses.dataclass(frozen=True)
class _Read:
    """An operand as the template may read it."""

    given: Any  # the 16-bit IR the lowering was handed
    fp32: Any | None  # its fp32 source, cast in the kernel where the plan says so
    shared: bool  # that cast has other readers: it runs whatever the template does


@dataclasses.dataclass(frozen=True)
class _Matmul:
    """One matmul the template may lower: its operands as read, its sizes and the
    planner's Problem."""

    node: torch.fx.Node
    op: str
    dtype: torch.dtype
    dev: planner.DeviceModel
    alpha: Any
    beta: Any
    a: _Read
    b: _Read
    bias: _Read | None
    batch_dims: list[Any]
    m: Any
    n: Any
    k: Any
    problem: planner.Problem

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(B, M, N, K) as planned (the size hints)."""
        p = self.problem
        return (p.batch, p.m, p.n, p.k)


def _graph_node(target: Any, args: tuple, kwargs: dict) -> torch.fx.Node:
    """The graph node being lowered, once its arguments are ones the template takes."""
    _, bias_i, a_i, b_i = _OPS[target]
    node = V.graph.current_node
    if node is None or node.target is not target:
        raise _Decline("not_the_graph_node", fallback=False)
    unknown = set(kwargs) - {"alpha", "beta"}
    if unknown or len(args) != (3 if bias_i is not None else 2):
        raise _Decline("arguments")
    if kwargs.get("alpha", 1) == 0 or kwargs.get("beta", 1) == 0:
        # a zero factor ignores its operand, NaNs included: the stock path does that
        raise _Decline("arguments")
    sizes = [*args[a_i].get_size(), *args[b_i].get_size()]
    if any(V.graph.sizevars.statically_known_equals(s, 0) for s in sizes):
        # an empty matmul (an MoE expert without tokens): nothing to plan
        raise _Decline("empty", fallback=False)
    return node


def _matmul_meta(node: torch.fx.Node) -> Any:
    """The node's MatmulMeta, where it computes in dtypes the template handles."""
    meta = matmul_meta.get_matmul_meta(node)
    if meta is None:
        raise _Decline("no_meta")
    odd = [d for d in meta.compute_dtypes if d not in (*_HALF, torch.float32)]
    if odd:  # fp64, integers: autocast leaves them alone, and so does the template
        raise _Decline(f"dtype:{str(odd[0]).removeprefix('torch.')}")
    return meta


def _compute_dtype(
    target: Any, node: torch.fx.Node, meta: Any, args: tuple, epilogue: Any
) -> torch.dtype:
    """The dtype the template computes in: autocast's, or the 16-bit output's where the
    matmul is one the template serves outside autocast."""
    _, bias_i, a_i, b_i = _OPS[target]
    if meta.source == "autocast" and meta.autocast_dtype in _HALF:
        if meta.autocast_device != "cuda":
            raise _Decline(f"device:{meta.autocast_device}")
        return meta.autocast_dtype
    out = meta.output_dtype
    if out in _HALF and any(
        _source(node, i, out, matmul_meta) is not None for i in (a_i, b_i)
    ):
        # casts the user wrote (x.bfloat16() @ w.bfloat16().t()): autocast's numerics
        return out
    if epilogue is not None and out in _HALF:
        # a 16-bit matmul that a gelu-add closes: the template fuses it where cuBLAS cannot
        return out
    if (
        out in _HALF
        and bias_i is None
        and all(d == out for d in meta.compute_dtypes)
        and _constant(node, b_i, args[b_i], out)
    ):
        # a 16-bit mm of a frozen weight that lost autocast's marks: freezing concatenates
        # the weights of linears that share an input (Llama's w1|w3) and traces the new
        # mm anew; a cuBLAS 16-bit GEMM, fp32 accumulation, as the decode kernels
        return out
    # fp32 outside autocast included: stock uses TF32 only as the user allows
    raise _Decline("not_autocast")


def _device_model(
    target: Any, args: tuple, meta: Any, dtype: torch.dtype
) -> planner.DeviceModel:
    """The model of the operands' GPU, where every input is ``dtype`` on CUDA and
    tensor cores are allowed."""
    _, bias_i, a_i, b_i = _OPS[target]
    mat1, mat2 = args[a_i], args[b_i]
    for x in (mat1, mat2):
        device = x.get_device()
        if device is None or device.type != "cuda":
            raise _Decline(f"device:{getattr(device, 'type', None)}")
    if (
        mat1.get_dtype() != dtype
        or mat2.get_dtype() != dtype
        or meta.output_dtype != dtype
    ):
        raise _Decline("dtype:mixed")
    if bias_i is not None and args[bias_i].get_dtype() != dtype:
        raise _Decline("dtype:mixed")
    if not meta.allow_tensor_core:
        raise _Decline("tensor_core_disallowed")
    dev = current_device_model(mat1.get_device())
    if dev is None:
        raise _Decline("device")
    return dev


def _matmul(
    target: Any,
    node: torch.fx.Node,
    args: tuple,
    kwargs: dict,
    dtype: torch.dtype,
    dev: planner.DeviceModel,
    epilogue: Any,
) -> _Matmul:
    """The operands as the template may read them and the Problem the planner is asked,
    where the template has a cast to save or an epilogue to fuse."""
    op, bias_i, a_i, b_i = _OPS[target]
    mat1, mat2 = args[a_i], args[b_i]
    a = _Read(*_operand(node, a_i, mat1, dtype, matmul_meta))
    b = _Read(*_operand(node, b_i, mat2, dtype, matmul_meta))
    bias = None
    if bias_i is not None:
        bias = _Read(*_operand(node, bias_i, args[bias_i], dtype, matmul_meta))
    # a frozen 16-bit weight: the decode kernels may stream it faster than cuBLAS
    weight16 = b.fp32 is None and _constant(node, b_i, mat2, dtype)
    if a.fp32 is None and b.fp32 is None and epilogue is None and not weight16:
        raise _Decline("no_fp32_operand", fallback=False)

    *batch_dims, m, k = mat1.get_size()
    n = mat2.get_size()[-1]
    hint = functools.partial(V.graph.sizevars.optimization_hint)
    batch = int(hint(batch_dims[0])) if batch_dims else 1
    mh, nh, kh = int(hint(m)), int(hint(n)), int(hint(k))
    problem = planner.Problem(
        op,
        batch,
        mh,
        nh,
        kh,
        planner.Operand(batch * mh * kh, a.fp32 is not None, a.shared),
        planner.Operand(batch * kh * nh, b.fp32 is not None, b.shared),
        None
        if bias is None
        else planner.Operand(
            int(hint(ir.sympy_product(bias.given.get_size()))),
            bias.fp32 is not None,
            bias.shared,
        ),
        epilogue,
        weight16=weight16,
        b_k_contiguous=_k_contiguous(mat2 if b.fp32 is None else b.fp32),
    )
    alpha, beta = kwargs.get("alpha", 1), kwargs.get("beta", 1)
    return _Matmul(
        node, op, dtype, dev, alpha, beta, a, b, bias, batch_dims, m, n, k, problem
    )


def _decide(target: Any, args: tuple, kwargs: dict) -> Any:
    """Lower with the template, or raise _Decline."""
    node = _graph_node(target, args, kwargs)
    meta = _matmul_meta(node)
    epilogue = _gelu_add_epilogue(node)
    dtype = _compute_dtype(target, node, meta, args, epilogue)
    dev = _device_model(target, args, meta, dtype)
    mm = _matmul(target, node, args, kwargs, dtype, dev, epilogue)
    force = _force()
    dynamic_m = not isinstance(mm.m, int) and not getattr(mm.m, "is_number", False)
    autotune = inductor_config.max_autotune or inductor_config.max_autotune_gemm
    if dynamic_m:
        if not all(isinstance(s, int) or s.is_number for s in (mm.n, mm.k)):
            # a size-hint multi-kernel keys each symbolic size by M's hint
            raise _Decline("symbolic_nk")
        kernels, the_plan = _plan_dynamic_m(mm.problem, dev, mm.m, force)
        if kernels:
            return _lower_dispatch(mm, kernels, force)
    else:
        the_plan = planner.plan(mm.problem, dev, force=force)
    plan_log.debug("%s %s: %s", node, mm.shape, the_plan.describe())
    if the_plan.path is planner.Path.GEMV:
        return _lower_gemv_plan(mm, autotune)
    # timing needs a live device: a compile from fake tensors alone goes by the prediction
    measure = (
        the_plan.measure
        and not dynamic_m
        and not autotune
        and inductor_config.tensorcore_mm_measure
        and torch.cuda.is_initialized()
        and not torch.cuda.is_current_stream_capturing()
    )
    # the stock path is a subgraph choice, whose benchmark specializes a symbolic M:
    # there the plan decides alone, as in default mode
    versus_stock = autotune and not dynamic_m
    _check_plan(mm, the_plan, measure, versus_stock)
    return _lower_template(mm, the_plan, force, autotune, measure, versus_stock)


def _lower_gemv_plan(mm: _Matmul, autotune: bool) -> Any:
    """One row as a reduction over K (``_lower_gemv``), with the gemv template's
    configs where static sizes allow them."""
    # read the fp32 sources unless their casts run anyway
    a = mm.a.fp32 if mm.a.fp32 is not None and not mm.a.shared else mm.a.given
    b = mm.b.fp32 if mm.b.fp32 is not None and not mm.b.shared else mm.b.given
    bias = None
    if mm.bias is not None:
        fp32 = mm.bias.fp32 is not None and not mm.bias.shared
        bias = mm.bias.fp32 if fp32 else mm.bias.given
    if not _materialized(a):
        # an x computed in front (a norm): once, not again for every column
        a = realize_inputs(a)
    k, n = mm.k, mm.n
    configs = []
    if all(isinstance(v, int) or v.is_number for v in (k, n)):
        # static sizes: the gemv template where the planner's rules take it
        weight16 = b.get_dtype() != torch.float32
        configs = planner.gemv_template_configs(
            int(k), int(n), mm.dev, weight16, _k_contiguous(b), autotune
        )
    result, sums = _lower_gemv(a, b, bias, mm.alpha, mm.beta, mm.dtype, configs)
    _count("tensorcore_mm_gemv")
    if mm.problem.weight16:
        _count("tensorcore_mm_gemv_frozen")
    # the buffer the reduction kernel computes
    matmul_meta.attach_matmul_meta(sums, mm.node)
    return result


def _check_plan(mm: _Matmul, the_plan: Any, measure: bool, autotune: bool) -> None:
    """Decline a plan for stock unless timing or autotuning is to decide, counted
    by why stock serves."""
    reread = the_plan.stock_reason is planner.StockReason.REREAD
    if the_plan.path is planner.Path.TEMPLATE or measure or (autotune and reread):
        return
    if reread:
        raise _Decline("reread", fallback=False)
    if the_plan.stock_reason is planner.StockReason.SMEM:
        raise _Decline("smem")
    if the_plan.stock_reason is planner.StockReason.DYNAMIC_M:
        raise _Decline("dynamic_m_range", fallback=False)
    p = mm.problem
    if p.weight16 and mm.a.fp32 is None and p.epilogue is None:
        raise _Decline("cost_model_frozen", fallback=False)
    raise _Decline("cost_model", fallback=False)


def _template_inputs(
    mm: _Matmul, the_plan: Any, force: Any, autotune: bool
) -> tuple[TensorCoreMMKernelInputs, ir.Layout]:
    """The template's kernel inputs, each operand fp32 where the plan casts it in the
    kernel, with the plan's configs; and the output's layout."""
    a = mm.a.fp32 if the_plan.fused_a else mm.a.given
    b = mm.b.fp32 if the_plan.fused_b else mm.b.given
    a, b = realize_inputs(a, b)
    size = [*mm.batch_dims, mm.m, mm.n]
    layout = ir.FixedLayout(a.get_device(), mm.dtype, size)
    inputs = [a, b]
    scalars = {}
    if mm.bias is not None:
        fused = the_plan.fused_bias and mm.bias.fp32 is not None
        bias = mm.bias.fp32 if fused else mm.bias.given
        inputs.insert(0, realize_inputs(expand(bias, size)))
        scalars = {"alpha": mm.alpha, "beta": mm.beta}
    configs = planner.template_configs(the_plan, mm.problem, mm.dev, autotune, force)
    kernel_inputs = TensorCoreMMKernelInputs(
        inputs, configs, scalars=scalars, out_dtype=mm.dtype
    )
    return kernel_inputs, layout


def _lower_template(
    mm: _Matmul,
    the_plan: Any,
    force: Any,
    autotune: bool,
    measure: bool,
    versus_stock: bool,
) -> Any:
    """The template's lowering: its configs autotuned under max-autotune, against the
    stock path where ``versus_stock``, and where the plan asks for timing, only if it
    times faster."""
    kernel_inputs, layout = _template_inputs(mm, the_plan, force, autotune)
    template = tensorcore_bmm_template if mm.batch_dims else tensorcore_mm_template
    name = f"tensorcore_{mm.op}"
    choices = V.choices.get_template_configs(kernel_inputs, [template], name)
    if not choices:
        raise _Decline("no_config")
    if versus_stock:
        choices.extend(_stock_choices(mm.op, kernel_inputs, layout, mm.dtype))
    elif measure:
        _check_measured(mm, the_plan, choices[0], kernel_inputs, layout)
    result, _ = autotune_select_algorithm(name, choices, kernel_inputs.nodes(), layout)
    if not isinstance(result, ir.IRNode):
        raise TypeError(f"{name}: autotuning returned {type(result).__name__}, not IR")
    return _lowered_template(mm, result)


def _lowered_template(mm: _Matmul, result: Any) -> Any:
    """``result``, the template's output, counted and recorded."""
    _count("tensorcore_mm_template")
    if mm.problem.weight16:
        _count("tensorcore_mm_template_frozen")
    if mm.problem.epilogue is not None:
        _count("tensorcore_mm_template_gelu_add")
    # matmul_meta records the metadata of the IR a matmul lowers to
    matmul_meta.attach_matmul_meta(result, mm.node)
    return result


def _check_measured(
    mm: _Matmul,
    the_plan: Any,
    choice: Any,
    kernel_inputs: TensorCoreMMKernelInputs,
    layout: ir.Layout,
) -> None:
    """Decline unless the template's kernel times faster than the 16-bit GEMM plus the
    casts the template saves.

    A cast kernel's cost the model knows well (it streams); kernel times both, as a
    model runs them, not a Python call's (three launches of the stock path would time
    the host). Cached on disk like Inductor's autotuning.
    """
    try:
        t_template, t_gemm = _timings(choice, kernel_inputs, layout, mm.op, mm.dtype)
    except Exception as e:
        _compile_failed(f"{mm.op} of (B, M, N, K) {mm.shape}", e)
        raise _Decline("compile_error") from e
    # the casts' bytes only: a model that keeps the device busy hides their launches
    p = mm.problem
    saved = sum(
        planner.cast_seconds(o, mm.dev) - mm.dev.kernel_overhead
        for o, fused in (
            (p.a, the_plan.fused_a),
            (p.b, the_plan.fused_b),
            (p.bias, the_plan.fused_bias),
        )
        if fused and o is not None and o.castable
    )
    faster = t_template < (t_gemm + saved) * (1.0 - MEASURED_MARGIN)
    plan_log.debug(
        "%s %s: measured: template %s %.1f us, stock %.1f us (GEMM %.1f us + "
        "casts %.1f us predicted): %s",
        mm.node,
        mm.shape,
        the_plan.config,
        t_template * 1e6,
        (t_gemm + saved) * 1e6,
        t_gemm * 1e6,
        saved * 1e6,
        "template" if faster else "stock",
    )
    if not faster:
        raise _Decline("measured", fallback=False)


def _compile_failed(what: str, e: Exception) -> None:
    """One warning a cause: a driver without the binary fails every kernel alike."""
    cause = f"{type(e).__name__}: {e}"
    report = log.debug if cause in _failed_compiles else log.warning
    _failed_compiles.add(cause)
    report(
        "tensorcore_mm: %s: stock lowering, the template kernel failed to compile or "
        "load: %s",
        what,
        cause,
    )


_failed_compiles: set[str] = set()
# A measured template must beat the stock path by this much: timed alone, a template
# kernel runs faster than among a model's other kernels.
MEASURED_MARGIN = 0.15


def _timings(
    choice: Any, kernel_inputs: MMKernelInputs, layout: Any, op: str, dtype: torch.dtype
) -> tuple[float, float]:
    """Seconds of the template's kernel, and of the aten matmul on 16-bit tensors of the
    same sizes and strides, on this device; once per key on disk."""
    import hashlib
    import json
    import os

    import triton

    from torch._inductor.codecache import write_atomic
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    hint = V.graph.sizevars.optimization_hint
    nodes = kernel_inputs.nodes()
    layouts = [
        ([int(hint(s)) for s in n.get_size()], [int(hint(s)) for s in n.get_stride()])
        for n in nodes
    ]
    alpha, beta = (
        kernel_inputs._scalars.get("alpha", 1),
        kernel_inputs._scalars.get("beta", 1),
    )
    key = json.dumps(
        [
            "graph",  # how it was timed (host-timed entries are not reused)
            torch.cuda.get_device_name(nodes[0].get_device()),
            torch.__version__,
            triton.__version__,
            choice.hash_key(),
            op,
            str(dtype),
            layouts,
            alpha,
            beta,
        ]
    )
    path = os.path.join(
        cache_dir(),
        "tensorcore_mm",
        hashlib.sha256(key.encode()).hexdigest()[:40] + ".json",
    )
    try:
        with open(path) as f:
            cached = json.load(f)
        return cached["template"], cached["gemm"]
    except (OSError, ValueError, KeyError):
        pass
    template, gemm = _measure(choice, kernel_inputs, layout, layouts, op, dtype)
    write_atomic(
        path,
        json.dumps({"template": template, "gemm": gemm, "key": key}),
        make_dirs=True,
    )
    return template, gemm


def _measure(
    choice: Any,
    kernel_inputs: MMKernelInputs,
    layout: Any,
    layouts: list[tuple[list[int], list[int]]],
    op: str,
    dtype: torch.dtype,
) -> tuple[float, float]:
    """Kernel seconds of the template and of the 16-bit aten op, each on enough copies
    of its inputs to pass the L2 twice, so every call reads them from memory."""
    from torch._dynamo.testing import rand_strided
    from torch._inductor.select_algorithm import AlgorithmSelectorCache
    from torch._prims_common import compute_required_storage_length

    nodes = kernel_inputs.nodes()
    device = nodes[0].get_device()
    example = AlgorithmSelectorCache.benchmark_example_value
    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    # fp32 at most
    size = sum(compute_required_storage_length(*sl, 0) for sl in layouts) * 4
    copies = max(1, min(MEASURE_COPIES, -(-2 * l2 // size)))
    template = _graph_seconds(
        lambda: [
            choice.bmreq.make_run_fn(*[example(n) for n in nodes], out=example(layout))
            for _ in range(copies)
        ]
    )

    stock = _stock_fn(
        op,
        dtype,
        kernel_inputs._scalars.get("alpha", 1),
        kernel_inputs._scalars.get("beta", 1),
    )
    gemm = _graph_seconds(
        lambda: [
            functools.partial(
                stock, *[rand_strided(*sl, dtype, device) for sl in layouts]
            )
            for _ in range(copies)
        ]
    )
    return template, gemm


# input copies a timing rotates through at most
MEASURE_COPIES = 16


def _graph_seconds(make_calls: Callable[[], list[Callable[[], Any]]]) -> float:
    """Seconds a call, the calls ``make_calls`` returns replayed from one CUDA graph:
    GPU time alone. Timed call by call, the host's launch time counts, and during a
    compile it was several times a small kernel's."""
    from torch._inductor.runtime.benchmarking import benchmarker

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # made here, calls launch on the capture stream
        calls = make_calls()
        for call in calls:  # the first calls allocate and choose kernels
            call()
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
        for call in calls:
            call()
    torch.cuda.current_stream().wait_stream(stream)
    return benchmarker.benchmark_gpu(graph.replay) / 1e3 / len(calls)


def _as_fp32(x: Any, src: torch.dtype, dtype: torch.dtype) -> Any:
    """A loaded operand as the 16-bit GEMM sees it, in fp32: an fp32 one rounded first."""
    if src == torch.float32:
        x = ops.to_dtype(x, dtype, use_compute_types=False)
    return ops.to_dtype(x, torch.float32)


def _gemv_template_sums(
    a: Any, b: Any, dtype: torch.dtype, configs: list[planner.GemvConfig]
) -> Any:
    """Σ_k a[0, k]·b[k, n]: ``tensorcore_gemv``'s partial sums, then a reduction over
    them; over a K-contiguous weight one split, the sums themselves.

    Inductor would split the outer reduction of a [K, N] weight in two stages too, but
    its first stage gets one config of a few KB in flight a program, which streams the
    weight well below the copy rate; the template's configs hold a slab of 16 KB.
    """
    a, b = realize_inputs(a, b)
    k, n = b.get_size()
    splits = V.graph.sizevars.guard_int(ceildiv(k, configs[0].ROWS))
    # every config of one matmul splits K alike
    layout = ir.FixedLayout(a.get_device(), torch.float32, [splits, n])
    choices: list[Any] = []
    for cfg in configs:
        tensorcore_gemv_template.maybe_append_choice(
            choices,
            input_nodes=(a, b),
            layout=layout,
            num_stages=cfg.num_stages,
            num_warps=cfg.num_warps,
            BLOCK_N=cfg.BLOCK_N,
            BLOCK_K=cfg.BLOCK_K,
            ROWS=cfg.ROWS,
            DOT_DTYPE=triton_type(dtype),
        )
    if not choices:
        raise _Decline("no_config")
    partial, _ = autotune_select_algorithm("tensorcore_gemv", choices, [a, b], layout)
    if splits == 1:
        return partial
    partial_load = partial.make_loader()

    def total(index: Any, rindex: Any) -> Any:
        return partial_load([rindex[0], index[1]])

    return ir.Reduction.create(
        device=a.get_device(),
        dst_dtype=torch.float32,
        src_dtype=torch.float32,
        inner_fn=total,
        ranges=[1, n],
        reduction_ranges=[splits],
        reduction_type="sum",
        reduction_hint=ir.ReductionHint.OUTER,
    )


def _lower_gemv(
    a: Any,
    b: Any,
    bias: Any,
    alpha: Any,
    beta: Any,
    dtype: torch.dtype,
    configs: list[planner.GemvConfig],
) -> tuple[Any, Any]:
    """M = 1: out[0, n] = Σ_k a[0, k]·b[k, n] as a reduction over K.

    One kernel reads each (fp32) operand once, rounds it to ``dtype`` in registers
    and sums the products in fp32: with ``configs`` the gemv template (over a [K, N]
    weight its partial sums and a reduction over them), else an Inductor reduction;
    the epilogue (bias, rounding) and whatever fuses after it run on the sums. A row
    of tiles would leave most of each MMA idle and stream the weight slower (see the
    ``stream_gemv`` calibration).
    Returns (the output, the realized sums).
    """
    m, k = a.get_size()
    n = b.get_size()[1]
    a_load, b_load = a.make_loader(), b.make_loader()
    a_dtype, b_dtype = a.get_dtype(), b.get_dtype()

    def product(index: Any, rindex: Any) -> Any:
        (i, j), (kk,) = index, rindex
        return ops.mul(
            _as_fp32(a_load([i, kk]), a_dtype, dtype),
            _as_fp32(b_load([kk, j]), b_dtype, dtype),
        )

    # F.linear's weight: K contiguous, each output reads one row of it
    hint = ir.ReductionHint.INNER if _k_contiguous(b) else ir.ReductionHint.DEFAULT
    if configs:
        sums = _gemv_template_sums(a, b, dtype, configs)
    else:
        sums = ir.Reduction.create(
            device=a.get_device(),
            dst_dtype=torch.float32,
            src_dtype=torch.float32,
            inner_fn=product,
            ranges=[m, n],
            reduction_ranges=[k],
            reduction_type="sum",
            reduction_hint=hint,
        )
    sums.realize()  # a reduction is read through its buffer; the epilogue fuses into it
    sums_load = sums.make_loader()
    epilogue = tensorcore_epilogue(dtype, alpha, beta, bias is not None)
    bias_load = expand(bias, [m, n]).make_loader() if bias is not None else None

    def out(index: Any) -> Any:
        # the template's epilogue, written for raw values (as store_output passes them)
        value = epilogue(
            sums_load(index).value, bias_load(index).value if bias_load else None
        )
        return ops.to_dtype(value, dtype)

    result = ir.Pointwise.create(
        device=a.get_device(), dtype=dtype, inner_fn=out, ranges=[m, n]
    )
    return result, sums


def _gelu_add_epilogue(node: torch.fx.Node) -> Any | None:
    """The cost of the gelu-add (``config.gelu_add_fusion``) that is this matmul's only
    reader.

    The template fuses it as an epilogue; stock runs it as a pointwise kernel that
    reads the matmul's output back. None when there is no such gelu-add, when the
    output has other readers (training saves it for the backward), or when a view
    lies between them (F.linear of a 3-d input): Inductor's scheduler fuses a
    template's epilogue only where it reads the output with the template's own
    index, so the pointwise kernel would stay.
    """
    from ..fx_passes.gelu_add import GELU_ADD_META

    if len(node.users) != 1:
        return None
    (user,) = node.users
    residual, result = _val(user.kwargs.get("residual")), _val(user)
    if (
        GELU_ADD_META not in user.meta
        or user.kwargs.get("x") is not node
        or residual is None
        or result is None
    ):
        return None

    def nbytes(t: torch.Tensor) -> int:
        numel = t.numel()
        if isinstance(numel, torch.SymInt):
            numel = V.graph.sizevars.optimization_hint(numel.node.expr)
        return int(numel) * t.element_size()

    return planner.Epilogue(read_bytes=nbytes(residual), write_bytes=nbytes(result))


# M up to which a plan for a symbolic M must hold up when M has no smaller bound
DYNAMIC_M_CEILING = 8192


def _m_range(m: Any) -> tuple[int, int | None]:
    """The smallest and largest M a symbolic M may take; the largest is None where
    nothing bounds it."""
    try:
        bound = V.graph.sizevars.shape_env.bound_sympy(m)
        lower = int(bound.lower) if bound.lower.is_finite else 1
        return max(1, lower), (int(bound.upper) if bound.upper.is_finite else None)
    except Exception:  # no range known: nothing bounds M
        log.debug("tensorcore_mm: no value range for %s", m, exc_info=True)
    return 1, None


def _plan_dynamic_m(
    problem: Any, dev: Any, m: Any, force: Any
) -> tuple[list[tuple[int, Any]], Any]:
    """(the kernels a symbolic M picks among at run time, each with the largest M it
    serves; or [] and the one plan for M's whole range, stock where none holds up).

    M's range is the one Inductor knows (Dynamo gives it ``mark_dynamic``'s min and
    max); nothing here guards M, so the range holds whole.
    """
    lower, upper = _m_range(m)
    m_max = min(upper or DYNAMIC_M_CEILING, DYNAMIC_M_CEILING)
    # the C++ wrapper calls a multi-kernel with one kernel's arguments, which a
    # MultiTemplateBuffer's kernels do not share (their grids)
    if not V.graph.cpp_wrapper:
        kernels = planner.dynamic_m_kernels(problem, dev, lower, m_max, force=force)
        if kernels:
            return kernels, None
    return [], planner.plan_dynamic_m(problem, dev, m_max, force=force)


def _lower_dispatch(mm: _Matmul, kernels: list[tuple[int, Any]], force: Any) -> Any:
    """The template once per range of a symbolic M, each kernel with its range's plan,
    picked at run time by Inductor's size-hint multi-kernel (``SizeHintMultiKernel``:
    the hint nearest M in log2) with no guard on M.

    The plan chooses each hint's caller, nothing is timed; the buffer's timings are
    the plan's predictions, which the scheduler reads to finalize the buffer (and any
    hint of ``config.multi_kernel_hints``).
    """
    hints = planner.dispatch_hints([bound for bound, _ in kernels])
    own = next(q for bound, q in kernels if bound >= mm.problem.m)
    kernel_inputs, _ = _template_inputs(mm, own, force, False)
    template = tensorcore_bmm_template if mm.batch_dims else tensorcore_mm_template
    name = f"tensorcore_{mm.op}"
    callers: dict[int | None, Any] = {}
    plans = {}
    for hint, (_, the_plan) in zip(hints, kernels):
        inputs = TensorCoreMMKernelInputs(
            kernel_inputs.nodes(),
            [the_plan.config],
            scalars=kernel_inputs._scalars,
            out_dtype=mm.dtype,
        )
        overrides = {template.uid: {"hint_override": hint}}
        choices = V.choices.get_template_configs(inputs, [template], name, overrides)
        if not choices:
            raise _Decline("no_config")
        callers[hint], plans[choices[0]] = choices[0], the_plan
        if the_plan is own:
            callers[None] = choices[0]
    buffer = ir.MultiTemplateBuffer(
        callers[None].layout,
        kernel_inputs.nodes(),
        functools.partial(_predicted_timings, mm, plans),
        list(plans),
        functools.reduce(operator.or_, (c.allowed_prologue_inps for c in plans)),
    )
    buffer.finalize_as_triton_callers(callers)
    # the scheduler fuses epilogues into it without benchmarking the choices
    buffer.planned_choices = True
    _count("tensorcore_mm_dynamic_m_dispatch")
    return _lowered_template(mm, ir.TensorBox.create(buffer))


def _predicted_timings(
    mm: _Matmul, plans: dict[Any, Any], hint: int | None
) -> dict[Any, float]:
    """Each caller's predicted seconds at M = ``hint`` (None: the size hint)."""
    p = mm.problem if hint is None else planner.at_m(mm.problem, hint)
    return {
        caller: planner.predict(p, mm.dev, q.fused_a, q.fused_b, q.config)
        for caller, q in plans.items()
    }


def _stock_fn(op: str, dtype: torch.dtype, alpha: Any, beta: Any) -> Callable[..., Any]:
    """The stock path on the template's inputs: autocast's casts, then the aten op."""

    def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.mm(a.to(dtype), b.to(dtype))

    def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a.to(dtype), b.to(dtype))

    def addmm(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.addmm(
            c.to(dtype), a.to(dtype), b.to(dtype), alpha=alpha, beta=beta
        )

    def baddbmm(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(
            c.to(dtype), a.to(dtype), b.to(dtype), alpha=alpha, beta=beta
        )

    return {"mm": mm, "bmm": bmm, "addmm": addmm, "baddbmm": baddbmm}[op]


def _stock_choices(
    op: str, kernel_inputs: MMKernelInputs, layout: Any, dtype: torch.dtype
) -> list[Any]:
    """The stock path as one more autotuning choice over the same fp32 inputs.

    A subgraph (Inductor's own mechanism for decompose_k) of cast + aten matmul, so
    the separate casts are timed with it; chosen, it lowers like stock Inductor.
    """
    from torch._dispatch.python import enable_python_dispatcher
    from torch._inductor.codegen.subgraph import SubgraphTemplate
    from torch._inductor.decomposition import select_decomp_table
    from torch.fx.experimental.proxy_tensor import make_fx

    fn = _stock_fn(
        op,
        dtype,
        kernel_inputs._scalars.get("alpha", 1),
        kernel_inputs._scalars.get("beta", 1),
    )
    with enable_python_dispatcher():
        make_graph = make_fx(fn, select_decomp_table())
        choice = SubgraphTemplate(name=f"tensorcore_{op}_stock").generate(
            name=f"tensorcore_{op}_stock",
            input_nodes=kernel_inputs.nodes(),
            layout=layout,
            make_fx_graph=make_graph,
            description="separate casts + aten matmul",
        )
    return [choice]


def tuned_tensorcore_mm(target: Any, *args: Any, **kwargs: Any) -> Any | None:
    """The lowering of the graph's ``target`` node through the template (or the M = 1
    reduction), or None where the stock lowering should run."""
    try:
        return _decide(target, args, {k: v for k, v in kwargs.items() if v is not None})
    except _Decline as d:
        _count(f"tensorcore_mm_{'fallback' if d.fallback else 'stock'}:{d.reason}")
        log.debug("tensorcore_mm: %s: stock lowering (%s)", target, d.reason)
    except Exception as e:  # never a failed compile: stock handles it
        _count("tensorcore_mm_fallback:internal_error")
        if strict_fallbacks():
            raise
        log.warning(
            "tensorcore_mm: %s: stock lowering after an internal error: %s: %s",
            target,
            type(e).__name__,
            e,
            exc_info=log.isEnabledFor(logging.DEBUG),
        )
    return None


class TensorCoreMMCaller(ChoiceCaller):
    """A matmul's lowering by the template (or the M = 1 reduction), offered as the
    only choice: the plan chose it, so ``autotune_select_algorithm`` takes it as is."""

    def __init__(self, node: Any, kernel_inputs: Any) -> None:
        super().__init__(
            "tensorcore_mm",
            kernel_inputs.nodes(),
            kernel_inputs.output_layout(),
            "tensorcore_mm plan",
        )
        self.node = node

    def output_node(self) -> Any:
        return self.node


class TensorCoreMMChoices(InductorChoices):
    """Offers the template's lowering of an autocast matmul of fp32 tensors."""

    def __init__(self) -> None:
        super().__init__()
        # the node last asked for (weak references to it and its graph) and whether its
        # lowering was offered: under max-autotune the lowerings of addmm ask for choices
        # more than once per node, and the first answer stands for all of them
        self._asked: tuple[Any, Any, bool] = (None, None, False)

    def uuid(self) -> tuple[str, int]:
        return ("tensorcore_mm", 1)

    def get_template_configs(
        self,
        kernel_inputs: Any,
        templates: list[Any],
        op_name: str,
        kwarg_overrides: dict[str, dict[str, Any]] | None = None,
    ) -> list[Any]:
        target = (
            _TARGETS.get(op_name) if inductor_config.tensorcore_mm_autocast else None
        )
        node = V.graph.current_node
        graph, last, offered = self._asked
        if (
            node is not None
            and last is not None
            and last() is node
            and graph() is V.graph
        ):
            if offered:
                return []  # offered already, as the only choice
        elif target is not None and node is not None:
            lowered = self._lower(target, node)
            self._asked = (weakref.ref(V.graph), weakref.ref(node), lowered is not None)
            if lowered is not None:
                return [TensorCoreMMCaller(lowered, kernel_inputs)]
        # the other contributors' hooks, as though this one did not override this one
        return InductorChoices.get_template_configs(
            V.choices, kernel_inputs, templates, op_name, kwarg_overrides
        )

    @staticmethod
    def _lower(target: Any, node: torch.fx.Node) -> Any:
        """``node``'s lowering by the template, or None. It is given the node's own
        arguments, the IR the lowering was handed (now realized): the fp32 tensors
        behind their casts are found from them. A node of another op (a lowering that
        lowers an mm of its own) is given none: the decision declines it, counted."""
        args = node.args if node.target is target else ()
        return tuned_tensorcore_mm(
            target,
            *(_lowered(a) if isinstance(a, torch.fx.Node) else a for a in args),
            **(node.kwargs if args else {}),
        )


# the choices' op name -> the aten op the template lowers
_TARGETS = {op: target for target, (op, *_) in _OPS.items()}

register_inductor_choices("tensorcore_mm", TensorCoreMMChoices)
