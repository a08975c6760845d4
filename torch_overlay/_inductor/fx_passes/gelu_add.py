"""``gelu(x) + r`` recovered as one unit and lowered to one kernel (``config.gelu_add_fusion``).

Inductor decomposes ``aten.gelu`` before lowering (``torch._refs.nn.functional.gelu``: an
erf form for approximate='none', a tanh form for 'tanh'; on bf16/fp16 wrapped in casts to
fp32 and back), so ``gelu_add_pass`` recovers ``gelu(x) + r`` and ``r + gelu(x)`` with the
pattern matcher after grad, both approximations, fp32 and bf16/fp16, ``r`` of x's shape or
broadcast to it. Each match becomes one Pointwise node, one kernel named
``..._fused_gelu_add_...``, with Inductor's numerics: on bf16/fp16, gelu and the add in
fp32, rounded once at the store. Under ``config.emulate_precision_casts`` gelu's output
is rounded to the 16-bit dtype before the add, as eager's two kernels round it.

The replacement node carries ``node.meta[GELU_ADD_META]`` (a ``GeluAddSpec``) with x as
its first argument, so a GEMM template can take the gelu-add as its epilogue
(kernel/mm_tensorcore.py); ``gelu_add_values`` emits it on Inductor's ``ops``.
``raise_elements_per_thread`` gives a large 16-bit gelu-add kernel 16 elements a thread.

A rejected match is left to stock; an error while lowering a match replays the matched
aten nodes through the stock lowerings. Both are counted in ``counters["inductor"]``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any

import torch
import torch.nn.functional as F

from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config, ir, lowering as inductor_lowering
from torch._inductor.pattern_matcher import (
    CallFunction,
    KeywordArg,
    Match,
    MULTIPLE,
    PatternExpr,
    PatternMatcherPass,
    register_lowering_pattern,
)
from torch._inductor.virtualized import ops, V

log = logging.getLogger(__name__)

aten = torch.ops.aten
prims = torch.ops.prims

# The scalars of torch._refs.nn.functional.gelu, computed as it computes them: its
# decomposition is what the patterns match, by exact equality of these constants.
M_SQRT2 = 1.41421356237309504880
M_SQRT1_2 = 0.70710678118654752440
M_2_SQRTPI = 1.12837916709551257390
ERF_ALPHA = M_SQRT1_2
TANH_BETA = M_SQRT2 * M_2_SQRTPI * 0.5
TANH_KAPPA = 0.044715

APPROXIMATIONS = ("none", "tanh")
LOW_PRECISION = (torch.bfloat16, torch.float16)
GELU_ADD_META = "gelu_add"
COUNTERS = "inductor"


def _gelu_add_op() -> torch._ops.OpOverload:
    """``inductor::gelu_add``: names the fused kernels (origins' ``original_aten``).

    Its eager implementation is the unfused pair, so it is also a correct op to call.
    """
    namespace = torch.ops.inductor
    if hasattr(namespace, "gelu_add"):  # a re-imported module
        return namespace.gelu_add.default

    @torch.library.custom_op("inductor::gelu_add", mutates_args=())
    def gelu_add(
        x: torch.Tensor, residual: torch.Tensor, approximate: str = "none"
    ) -> torch.Tensor:
        return F.gelu(x, approximate=approximate) + residual

    @gelu_add.register_fake
    def _(
        x: torch.Tensor, residual: torch.Tensor, approximate: str = "none"
    ) -> torch.Tensor:
        return F.gelu(x, approximate=approximate) + residual

    return torch.ops.inductor.gelu_add.default


GELU_ADD_OP = _gelu_add_op()


@dataclasses.dataclass(frozen=True)
class GeluAddSpec:
    """What one match computes: ``round(gelu(x)) + residual`` with these dtypes."""

    approximate: str  # "none" (erf) or "tanh"
    compute_dtype: torch.dtype  # gelu's arithmetic
    # gelu's output rounded to this before the add (bf16/fp16)
    round_dtype: torch.dtype | None
    out_dtype: torch.dtype  # the add's result
    residual_first: bool  # r + gelu(x)


# -- patterns ------------------------------------------------------------------


def gelu_pattern(x: PatternExpr, approximate: str) -> PatternExpr:
    """The decomposed gelu of ``x``, as ``torch._refs.nn.functional.gelu`` traces.

    Scalars are literals, which the matcher compares by equality: a different
    constant is not gelu. ``x`` appears several times (the same object binds one
    node); a CallFunction for x needs ``_users=MULTIPLE``.
    """
    if approximate == "none":
        inner = CallFunction(aten.mul.Tensor, x, ERF_ALPHA)
        cdf = CallFunction(aten.add.Tensor, CallFunction(aten.erf.default, inner), 1)
    elif approximate == "tanh":
        cube = CallFunction(aten.mul.Tensor, CallFunction(aten.mul.Tensor, x, x), x)
        poly = CallFunction(
            aten.add.Tensor, x, CallFunction(aten.mul.Tensor, cube, TANH_KAPPA)
        )
        inner = CallFunction(aten.mul.Tensor, poly, TANH_BETA)
        cdf = CallFunction(aten.add.Tensor, CallFunction(aten.tanh.default, inner), 1)
    else:
        raise ValueError(
            f"gelu approximate must be 'none' or 'tanh', not {approximate!r}"
        )
    return CallFunction(aten.mul.Tensor, CallFunction(aten.mul.Tensor, x, 0.5), cdf)


def gelu_add_pattern(
    x: PatternExpr,
    residual: PatternExpr,
    *,
    approximate: str,
    round_dtype: torch.dtype | None,
    residual_first: bool,
) -> PatternExpr:
    """``gelu(x) + residual`` (or ``residual + gelu(x)``) after decomposition.

    With ``round_dtype`` (bf16/fp16) gelu runs on ``convert_element_type(x, fp32)``
    and its result is converted back before the add, as on low-precision x.
    Intermediates must have no other user (the matcher's default of one user); the
    upcast of x may, since it is not erased.
    """
    if round_dtype is None:
        gelu = gelu_pattern(x, approximate)
    else:
        x_fp32 = CallFunction(
            prims.convert_element_type.default, x, torch.float32, _users=MULTIPLE
        )
        gelu = CallFunction(
            prims.convert_element_type.default,
            gelu_pattern(x_fp32, approximate),
            round_dtype,
        )
    operands = (residual, gelu) if residual_first else (gelu, residual)
    return CallFunction(aten.add.Tensor, *operands)


GELU_ADD_PASS = PatternMatcherPass(pass_name="gelu_add_pass")


def _tensor_val(node: Any) -> torch.Tensor | None:
    if not isinstance(node, torch.fx.Node):
        return None
    val = node.meta.get("val")
    return val if isinstance(val, torch.Tensor) else None


def _reject(reason: str, match: Match) -> None:
    counters[COUNTERS]["gelu_add_rejected"] += 1
    log.debug(
        "gelu_add: match at %s left to stock Inductor: %s", match.output_node(), reason
    )


def _kernels_round_intermediates(device: torch.device) -> bool:
    """Whether a fused kernel for ``device`` keeps a float -> bf16/fp16 -> float round trip.

    Triton kernels do. Inductor's C++ kernels do not: their CSE maps the upcast of a
    downcast value back to the unrounded float (``CppOverrides.to_dtype``), so a
    fused kernel there would silently differ from eager.
    """
    if device.type == "cpu":
        return inductor_config.cpu_backend == "triton"
    return device.type in ("cuda", "xpu")


def spec_of_match(
    match: Match,
    *,
    approximate: str,
    round_dtype: torch.dtype | None,
    residual_first: bool,
) -> GeluAddSpec | None:
    """The spec of a structural match, or None when the pass must not take it."""
    if any(node.kwargs for node in match.nodes):
        # the matcher ignores kwargs the pattern lacks: add(..., alpha=2) must not match
        _reject("a matched node has keyword arguments", match)
        return None
    x, residual, out = (
        _tensor_val(match.kwargs["x"]),
        _tensor_val(match.kwargs["residual"]),
        _tensor_val(match.output_node()),
    )
    if x is None or residual is None or out is None:
        _reject("x, residual or the result is not a tensor", match)
        return None
    if round_dtype is None:
        compute_dtype = x.dtype
        if compute_dtype not in (torch.float32, torch.float64):
            _reject(f"gelu on {compute_dtype} without the fp32 upcast", match)
            return None
    else:
        compute_dtype = torch.float32
        if not x.dtype.is_floating_point or x.dtype.itemsize > 4:
            _reject(f"x of {x.dtype} upcast to fp32", match)
            return None
    if not residual.dtype.is_floating_point or not out.dtype.is_floating_point:
        _reject(
            f"residual {residual.dtype} or result {out.dtype} is not floating point",
            match,
        )
        return None
    if out.dtype != torch.promote_types(round_dtype or compute_dtype, residual.dtype):
        _reject(f"result dtype {out.dtype} is not the add's promotion", match)
        return None
    if not (x.device == residual.device == out.device):
        _reject("x, residual and result are on different devices", match)
        return None
    if (
        round_dtype is not None
        and inductor_config.emulate_precision_casts
        and not _kernels_round_intermediates(out.device)
    ):
        _reject(
            f"{out.device.type} kernels cannot round gelu's output to {round_dtype}",
            match,
        )
        return None
    return GeluAddSpec(
        approximate, compute_dtype, round_dtype, out.dtype, residual_first
    )


def _check_match(
    approximate: str,
    round_dtype: torch.dtype | None,
    residual_first: bool,
    match: Match,
) -> bool:
    try:
        spec = spec_of_match(
            match,
            approximate=approximate,
            round_dtype=round_dtype,
            residual_first=residual_first,
        )
    except Exception:
        counters[COUNTERS]["gelu_add_check_error"] += 1
        log.warning(
            "gelu_add: checking a match failed; left to stock Inductor", exc_info=True
        )
        return False
    if spec is None:
        return False
    match.gelu_add_spec = spec  # read by the lowering and the marker
    # erasing a node clears its args: keep what a fallback to stock lowerings replays
    match.gelu_add_nodes = [
        (node, node.target, node.args, node.kwargs)
        for node in _topological(match.nodes)
    ]
    return True


# -- lowering -------------------------------------------------------------------


def gelu_values(x: Any, approximate: str, dtype: torch.dtype) -> Any:
    """gelu on Inductor's ``ops``, operation for operation as the decomposition (and
    stock's kernel) computes it, so fp32 results are stock's."""
    half_x = ops.mul(x, ops.constant(0.5, dtype))
    if approximate == "none":
        erf = ops.erf(ops.mul(x, ops.constant(ERF_ALPHA, dtype)))
        cdf = ops.add(erf, ops.constant(1.0, dtype))
    else:
        cube = ops.mul(ops.mul(x, x), x)
        poly = ops.add(x, ops.mul(cube, ops.constant(TANH_KAPPA, dtype)))
        inner = ops.mul(poly, ops.constant(TANH_BETA, dtype))
        cdf = ops.add(ops.tanh(inner), ops.constant(1.0, dtype))
    return ops.mul(half_x, cdf)


def gelu_add_values(
    x: Any,
    residual: Any,
    spec: GeluAddSpec,
    *,
    x_dtype: torch.dtype,
    residual_dtype: torch.dtype,
) -> Any:
    """``gelu(x) + residual`` on Inductor's ``ops`` (loaded values of these dtypes)."""
    if x_dtype != spec.compute_dtype:
        x = ops.to_dtype(x, spec.compute_dtype)
    gelu = gelu_values(x, spec.approximate, spec.compute_dtype)
    gelu_dtype = spec.compute_dtype
    if spec.round_dtype is not None and inductor_config.emulate_precision_casts:
        # eager's gelu kernel stores bf16/fp16: round here as it does, then go on in fp32
        stored = ops.to_dtype(gelu, spec.round_dtype, use_compute_types=False)
        gelu = ops.to_dtype(stored, spec.round_dtype)
        gelu_dtype = spec.round_dtype
    if gelu_dtype != spec.out_dtype:
        gelu = ops.to_dtype(gelu, spec.out_dtype)
    if residual_dtype != spec.out_dtype:
        residual = ops.to_dtype(residual, spec.out_dtype)
    return ops.add(residual, gelu) if spec.residual_first else ops.add(gelu, residual)


def lower_gelu_add(
    x: ir.TensorBox, residual: ir.TensorBox, spec: GeluAddSpec
) -> ir.TensorBox:
    """One Pointwise node computing ``gelu(x) + residual`` over their broadcast shape."""
    x, residual = inductor_lowering.broadcast_tensors(x, residual)
    x_loader, residual_loader = x.make_loader(), residual.make_loader()
    x_dtype, residual_dtype = x.get_dtype(), residual.get_dtype()

    def inner_fn(index: Any) -> Any:
        return gelu_add_values(
            x_loader(index),
            residual_loader(index),
            spec,
            x_dtype=x_dtype,
            residual_dtype=residual_dtype,
        )

    return ir.Pointwise.create(
        device=x.get_device(),
        dtype=spec.out_dtype,
        inner_fn=inner_fn,
        ranges=list(x.get_size()),
    )


def _topological(nodes: list[torch.fx.Node]) -> list[torch.fx.Node]:
    members, order, seen = set(nodes), [], set()

    def visit(node: torch.fx.Node) -> None:
        if node in seen:
            return
        seen.add(node)
        for arg in node.all_input_nodes:
            if arg in members:
                visit(arg)
        order.append(node)

    for node in nodes:
        visit(node)
    return order


def _lower_stock(match: Match, values: dict[str, Any]) -> Any:
    """Lower the matched (now erased) aten nodes one by one through stock lowerings."""
    env = {match.kwargs[name]: value for name, value in values.items()}
    for node, target, args, kwargs in match.gelu_add_nodes:
        args, kwargs = torch.fx.map_arg((args, kwargs), env.__getitem__)
        env[node] = V.graph.call_function(target, args, kwargs)
    return env[match.output_node()]


def gelu_add(match: Match, *args: Any, x: Any, residual: Any) -> Any:
    """The lowering of one match: the replacement node calls ``partial(gelu_add, match)``
    (its name in the graph), with the IR of x and residual."""
    spec = match.gelu_add_spec
    try:
        result = lower_gelu_add(x, residual, spec)
    except Exception:
        counters[COUNTERS]["gelu_add_fallback"] += 1
        log.warning(
            "gelu_add: lowering failed; stock lowerings used instead", exc_info=True
        )
        node = V.graph.current_node
        if GELU_ADD_META in node.meta:  # the kernel is stock's again: so is its name
            node.meta["original_aten"] = match.output_node().meta.get("original_aten")
        return _lower_stock(match, {"x": x, "residual": residual})
    counters[COUNTERS]["gelu_add_lowered"] += 1
    return result


for _approximate in APPROXIMATIONS:
    for _round_dtype in (None, *LOW_PRECISION):
        for _residual_first in (False, True):
            register_lowering_pattern(
                gelu_add_pattern(
                    KeywordArg("x"),
                    KeywordArg("residual"),
                    approximate=_approximate,
                    round_dtype=_round_dtype,
                    residual_first=_residual_first,
                ),
                extra_check=functools.partial(
                    _check_match, _approximate, _round_dtype, _residual_first
                ),
                pass_dict=GELU_ADD_PASS,
            )(gelu_add)


# Elements a thread of a pointwise kernel that runs a large 16-bit gelu-add. At
# Inductor's 8 (one 16-byte load an input) the ~40 instructions an element of the erf
# form leave too few loads in flight at 64M elements. Small tensors
# keep Inductor's blocks: at 1M elements half as many blocks no longer fill the SMs.
MIN_ELEM_PER_THREAD_16BIT = 16
MIN_NUMEL_FOR_16_PER_THREAD = 1 << 24
# the heuristic's configs run up to 8 warps of 32 threads, and it asserts XBLOCK <= 4096
# (TRITON_MAX_BLOCK): more than 16 elements a thread would fail the compile
_MOST_WARPS, _WARP = 8, 32


def _elements_per_thread() -> int:
    from torch._inductor.runtime.hints import TRITON_MAX_BLOCK

    return min(
        MIN_ELEM_PER_THREAD_16BIT, TRITON_MAX_BLOCK["X"] // (_MOST_WARPS * _WARP)
    )


def _runs_16bit_gelu_add(kernel: Any) -> bool:
    """The kernel computes a gelu-add match whose tensors are all bf16/fp16, over at
    least ``MIN_NUMEL_FOR_16_PER_THREAD`` elements."""
    features = getattr(kernel, "features", None)
    if features is None:
        return False
    numel = V.graph.sizevars.optimization_hint(
        features.numel * features.reduction_numel
    )
    if numel < MIN_NUMEL_FOR_16_PER_THREAD:
        return False
    for node in features.scheduler_nodes():
        for origin in getattr(node.node, "origins", ()):
            spec = origin.meta.get(GELU_ADD_META)
            if (
                spec is not None
                and spec.round_dtype is not None
                and spec.out_dtype.itemsize == 2
            ):
                return True
    return False


def raise_elements_per_thread(kernel: Any) -> None:
    """Before a kernel's source is made: raise ``min_elem_per_thread`` (which Inductor's
    pointwise config heuristic honours, as it does for fp8 casts) for a 16-bit gelu-add."""
    try:
        if _runs_16bit_gelu_add(kernel):
            kernel.min_elem_per_thread = max(
                kernel.min_elem_per_thread, _elements_per_thread()
            )
    except Exception:  # a tuning hint only: never a reason to fail the compile
        log.debug("gelu_add: elements-per-thread hint skipped", exc_info=True)


def matched_spec(node: torch.fx.Node) -> GeluAddSpec | None:
    """The spec of a node this pattern pass put in, else None."""
    target = node.target if node.op == "call_function" else None
    if getattr(target, "func", None) is gelu_add:  # functools.partial(gelu_add, match)
        return getattr(target.args[0], "gelu_add_spec", None)
    return None


def gelu_add_pass(graph: torch.fx.Graph) -> None:
    """Post-grad pass: rewrite every gelu-add match, then mark the new nodes."""
    if not inductor_config.pattern_matcher:  # as stock's own pattern passes
        return
    try:
        GELU_ADD_PASS.apply(graph)
    except Exception:
        counters[COUNTERS]["gelu_add_pass_error"] += 1
        log.warning(
            "gelu_add: the pattern pass failed; matches so far are kept", exc_info=True
        )
    for node in graph.nodes:
        spec = matched_spec(node)
        if spec is not None and GELU_ADD_META not in node.meta:
            node.meta[GELU_ADD_META] = spec
            node.meta["original_aten"] = (
                GELU_ADD_OP  # the kernel's name: ..._fused_gelu_add_...
            )
            counters[COUNTERS]["gelu_add_matched"] += 1
