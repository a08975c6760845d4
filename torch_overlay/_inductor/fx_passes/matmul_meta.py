"""The autocast compute dtype of every matmul, as IR metadata (``MatmulMeta``).

Under ``torch.compile`` autocast is applied by AOTAutograd: the post-grad graph holds
only casts in front of ``aten.mm``, as an explicit ``x.to(torch.bfloat16)`` gives, and
the autocast state is off while Inductor lowers. With ``config.autocast_matmul_meta``:

1. ``annotate_autocast_regions`` (pre-grad) marks each call node of Dynamo's graph with
   the autocast state it runs under, in ``node.meta["custom"][AUTOCAST_REGION_KEY]``,
   which AOTAutograd copies to the aten nodes, forward and backward.
2. ``annotate_matmuls`` (post-grad) sets ``node.meta[MATMUL_META_KEY]`` on each
   mm/addmm/bmm/baddbmm.
3. ``attach_lowered_matmul_meta`` sets ``matmul_meta`` on the IR a matmul lowers to.
4. ``write_matmul_comments`` writes one wrapper comment per matmul.
5. ``set_cache_key_meta`` puts the region marks where the FX graph cache key sees them.

Logging: ``TORCH_LOGS="+inductor"`` (debug), or the artifact
``matmul_meta``. Anything this cannot read leaves stock Inductor as it is (no metadata,
never a false autocast claim), counted in ``counters["inductor"]["matmul_meta_fallback:*"]``
and logged (an internal error as a warning); ``TORCHINDUCTOR_STRICT_FALLBACKS=1`` raises
instead (tests).
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import logging
import os
import threading
from typing import Any, TYPE_CHECKING

import torch

import torch.fx
from torch._dynamo.utils import counters
from torch._inductor.virtualized import V
from torch.amp.autocast_mode import _enter_autocast, _exit_autocast

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "MatmulMeta",
    "MATMUL_META_KEY",
    "AUTOCAST_REGION_KEY",
    "CompiledGraphMatmuls",
    "get_matmul_meta",
    "cast_source",
    "compute_matmul_meta",
    "attach_matmul_meta",
    "recent_matmul_metas",
    "clear_recent_matmul_metas",
    "attach_lowered_matmul_meta",
    "write_matmul_comments",
    "set_cache_key_meta",
    "annotate_matmuls",
    "annotate_autocast_regions",
]

COUNTERS = "inductor"
log = logging.getLogger(__name__)

aten = torch.ops.aten
prims = torch.ops.prims

MATMUL_META_KEY = "matmul_meta"
"""Key of the ``MatmulMeta`` in ``node.meta`` of a post-grad aten matmul node."""

AUTOCAST_REGION_KEY = "inductor.autocast"
"""Key in ``node.meta["custom"]``: ``((device_type, dtype name or None), ...)``, sorted;
None marks a device whose autocast is explicitly disabled there."""

CACHE_KEY_META = "inductor.autocast_regions"
"""Key in ``GraphModule.meta``: the region marks of the graph, so cache keys cover them."""

# aten overload -> op name; operands in MatmulMeta order are (mat1, mat2[, bias/input])
MATMUL_OPS: dict[Any, str] = {
    aten.mm.default: "mm",
    aten.mm.dtype: "mm",
    aten.addmm.default: "addmm",
    aten.addmm.dtype: "addmm",
    aten.bmm.default: "bmm",
    aten.bmm.dtype: "bmm",
    aten.baddbmm.default: "baddbmm",
    aten.baddbmm.dtype: "baddbmm",
}
_BIAS_FIRST = ("addmm", "baddbmm")  # aten order (input, mat1, mat2)

# Ops between a cast and the matmul that move data but keep dtype and values.
VIEW_OPS = frozenset(
    {
        aten.view.default,
        aten._unsafe_view.default,
        aten.reshape.default,
        aten.permute.default,
        aten.transpose.int,
        aten.t.default,
        aten.expand.default,
        aten.unsqueeze.default,
        aten.squeeze.default,
        aten.squeeze.dim,
        aten.squeeze.dims,
        aten.clone.default,
        aten.alias.default,
    }
)
_HALF = (torch.float16, torch.bfloat16)
_AUTOCAST_DEVICES = ("cuda", "cpu", "xpu", "mps", "hpu", "mtia")
_CALL_OPS = ("call_function", "call_method", "call_module")


def strict_fallbacks() -> bool:
    """Tests set TORCHINDUCTOR_STRICT_FALLBACKS=1 to see internal errors, not a fallback."""
    return os.environ.get("TORCHINDUCTOR_STRICT_FALLBACKS", "") == "1"


def _count(what: str) -> None:
    counters[COUNTERS][what] += 1


def _fallback(reason: str, detail: Any, error: Exception) -> None:
    """Count and log a place where stock behaviour stands (re-raise when strict): a graph
    this does not read at debug level, an internal error as a warning."""
    _count(f"matmul_meta_fallback:{reason}")
    if isinstance(error, _Unsupported):
        log.debug(
            "matmul_meta: %s %s: stock behaviour kept", reason, detail, exc_info=error
        )
    else:
        log.warning(
            "matmul_meta: %s %s: stock behaviour kept after an internal error: %s: %s",
            reason,
            detail,
            type(error).__name__,
            error,
        )
    if strict_fallbacks():
        raise error


class _Unsupported(Exception):
    """The graph uses autocast in a way this pass does not read."""


# ---------------------------------------------------------------------------
# The metadata


@dataclasses.dataclass(frozen=True)
class MatmulMeta:
    op: str  # "mm" | "addmm" | "bmm" | "baddbmm"
    # fp16/bf16 when autocast set this matmul's compute dtype, else None
    autocast_dtype: torch.dtype | None
    # device type of that autocast ("cuda", "cpu"); None when autocast_dtype is None
    autocast_device: str | None
    source: str  # "autocast" | "user_cast" | "none"
    # operand dtypes before the casts (and views) in front of the matmul: (mat1, mat2[, bias])
    input_dtypes: tuple[torch.dtype, ...]
    # operand dtypes the aten matmul receives, same order
    compute_dtypes: tuple[torch.dtype, ...]
    output_dtype: torch.dtype
    accumulate_dtype: torch.dtype
    # may run on tensor cores without changing numerics the user asked for
    allow_tensor_core: bool

    def describe(self) -> str:
        """One line, as in the wrapper comment and the debug log."""

        def names(dtypes: tuple[torch.dtype, ...]) -> str:
            return "(" + ", ".join(_dtype_name(d) for d in dtypes) + ")"

        return (
            f"{self.op} autocast={_dtype_name(self.autocast_dtype)} "
            f"autocast_device={self.autocast_device} source={self.source} "
            f"in={names(self.input_dtypes)} compute={names(self.compute_dtypes)} "
            f"out={_dtype_name(self.output_dtype)} acc={_dtype_name(self.accumulate_dtype)} "
            f"tensor_core={self.allow_tensor_core}"
        )


def _dtype_name(dtype: torch.dtype | None) -> str | None:
    return None if dtype is None else str(dtype).removeprefix("torch.")


_DTYPES_BY_NAME = {
    _dtype_name(d): d for d in vars(torch).values() if isinstance(d, torch.dtype)
}


def tensor_val(node: Any) -> torch.Tensor | None:
    if not isinstance(node, torch.fx.Node):
        return None
    val = node.meta.get("val")
    return val if isinstance(val, torch.Tensor) else None


def _operands(node: torch.fx.Node) -> tuple[Any, ...]:
    """The operand fx nodes in MatmulMeta order: (mat1, mat2[, bias/input])."""
    op = MATMUL_OPS[node.target]
    if op in _BIAS_FIRST:
        return (node.args[1], node.args[2], node.args[0])
    return (node.args[0], node.args[1])


def _cast_input(node: Any) -> torch.fx.Node | None:
    """The tensor that ``node`` casts to another dtype (same device), else None."""
    if (
        not isinstance(node, torch.fx.Node)
        or node.op != "call_function"
        or not node.args
    ):
        return None
    if node.target is prims.convert_element_type.default:
        pass
    elif node.target is aten._to_copy.default:
        if "dtype" not in node.kwargs:
            return None
    else:
        return None
    src = node.args[0]
    out, inp = tensor_val(node), tensor_val(src)
    if out is None or inp is None or inp.dtype == out.dtype or inp.device != out.device:
        return None
    return src


def cast_source(node: torch.fx.Node, i: int) -> torch.fx.Node | None:
    """The pre-cast fx node feeding ``node.args[i]`` when that argument is a dtype cast.

    ``i`` indexes ``node.args`` (for addmm/baddbmm 0 is the bias). A cast is
    ``prims.convert_element_type`` (or a dtype-only ``aten._to_copy``) on the same
    device. Views or permutes in between are not looked through: None then.
    """
    if not isinstance(node, torch.fx.Node) or not 0 <= i < len(node.args):
        return None
    return _cast_input(node.args[i])


def _before_casts(node: Any) -> tuple[torch.dtype, bool]:
    """(dtype before the casts and views in front of ``node``, whether one was a cast)."""
    cast = False
    for _ in range(64):  # bounded: a chain of views this long is not an operand
        src = _cast_input(node)
        if src is not None:
            node, cast = src, True
        elif (
            isinstance(node, torch.fx.Node)
            and node.op == "call_function"
            and node.target in VIEW_OPS
            and isinstance(node.args[0], torch.fx.Node)
        ):
            node = node.args[0]
        else:
            break
    val = tensor_val(node)
    if val is None:
        raise _Unsupported(f"no tensor metadata on {node}")
    return val.dtype, cast


def _region(node: torch.fx.Node) -> dict[str, str | None]:
    custom = node.meta.get("custom")
    state = custom.get(AUTOCAST_REGION_KEY) if isinstance(custom, dict) else None
    return dict(state) if state else {}


def _fp32_tensor_core_allowed(device_type: str) -> bool:
    """TF32 for fp32 matmuls, as Inductor's templates decide it (compile time)."""
    if device_type != "cuda":
        return False  # tensor cores are a CUDA notion here; other backends: no claim
    try:
        precision = torch.backends.cuda.matmul.fp32_precision
        if precision != "none":
            return precision == "tf32"
        return torch.get_float32_matmul_precision() != "highest"
    except Exception:
        return False


def _accumulate_dtype(dtype: torch.dtype) -> torch.dtype:
    if dtype == torch.float64 or dtype.is_complex or not dtype.is_floating_point:
        return dtype
    return torch.float32


def compute_matmul_meta(node: torch.fx.Node) -> MatmulMeta:
    """The MatmulMeta of a post-grad aten matmul node (raises on what it cannot read)."""
    op = MATMUL_OPS[node.target]
    operands = _operands(node)
    vals = [tensor_val(x) for x in operands]
    out = tensor_val(node)
    if out is None or any(v is None for v in vals):
        raise _Unsupported(f"{node}: operands without tensor metadata")
    compute = tuple(v.dtype for v in vals)
    before = [_before_casts(x) for x in operands]
    inputs = tuple(dtype for dtype, _ in before)
    device_type = out.device.type

    autocast_dtype = None
    region_dtype = _region(node).get(device_type)
    if region_dtype is not None:
        dtype = _DTYPES_BY_NAME[region_dtype]
        # autocast set the compute dtype only where the matmul runs in it (fp64 stays)
        if compute[0] == dtype and compute[1] == dtype:
            autocast_dtype = dtype
    if autocast_dtype is not None:
        source = "autocast"
    elif any(cast for _, cast in before):
        source = "user_cast"
    else:
        source = "none"

    mats = compute[:2]
    if all(d in _HALF for d in mats):
        tensor_core = True
    elif all(d == torch.float32 for d in mats):
        tensor_core = _fp32_tensor_core_allowed(device_type)
    else:
        tensor_core = False
    return MatmulMeta(
        op=op,
        autocast_dtype=autocast_dtype,
        autocast_device=device_type if autocast_dtype is not None else None,
        source=source,
        input_dtypes=inputs,
        compute_dtypes=compute,
        output_dtype=out.dtype,
        accumulate_dtype=_accumulate_dtype(mats[0]),
        allow_tensor_core=tensor_core,
    )


def _enabled() -> bool:
    from torch._inductor import config

    return config.autocast_matmul_meta


def get_matmul_meta(node: torch.fx.Node) -> MatmulMeta | None:
    """The MatmulMeta of a post-grad aten matmul node, or None.

    Set by the post-grad pre pass; a matmul node made after it (a post-grad pattern
    that rewrites addmm into mm + add, say) gets it here on first asking, while
    ``config.autocast_matmul_meta`` is on.
    """
    if not isinstance(node, torch.fx.Node):
        return None
    meta = node.meta.get(MATMUL_META_KEY)
    op = MATMUL_OPS.get(node.target) if node.op == "call_function" else None
    if isinstance(meta, MatmulMeta) and meta.op == op:
        return meta
    if op is None or not _enabled():
        return None
    try:
        meta = compute_matmul_meta(node)
    except Exception as e:
        _fallback("compute", node, e)
        return None
    node.meta[MATMUL_META_KEY] = meta
    return meta


# ---------------------------------------------------------------------------
# 1. Pre-grad: autocast regions of Dynamo's graph onto its nodes

_AUTOCAST_SIGNATURE = inspect.signature(torch.autocast.__init__)
_State = tuple  # ((device_type, dtype name or None), ...), sorted


def _ambient_state() -> _State:
    """The autocast state around the compiled call (Dynamo compiles inside it)."""
    state = {}
    for device_type in _AUTOCAST_DEVICES:
        try:
            if torch.is_autocast_enabled(device_type):
                state[device_type] = _dtype_name(torch.get_autocast_dtype(device_type))
        except RuntimeError:  # a device type this build has no autocast for
            continue
    return tuple(sorted(state.items()))


def _entered(state: _State, node: torch.fx.Node) -> _State:
    """The state inside ``_enter_autocast(*torch.autocast args)``."""
    bound = _AUTOCAST_SIGNATURE.bind(None, *node.args, **node.kwargs)
    bound.apply_defaults()
    device_type = bound.arguments["device_type"]
    dtype = bound.arguments["dtype"]
    enabled = bound.arguments["enabled"]
    if any(isinstance(v, torch.fx.Node) for v in (device_type, dtype, enabled)):
        raise _Unsupported(f"{node}: autocast arguments computed in the graph")
    new = dict(state)
    if enabled:
        # torch.autocast(dtype=None) takes the device's default when entered
        new[device_type] = _dtype_name(
            dtype if dtype is not None else torch.get_autocast_dtype(device_type)
        )
    else:
        new[device_type] = None
    return tuple(sorted(new.items()))


def _subgraphs(
    gm: torch.fx.GraphModule, node: torch.fx.Node
) -> Iterator[torch.fx.GraphModule]:
    """Graph modules a HOP call runs (its get_attr arguments)."""
    flat: list[Any] = []
    torch.fx.node.map_arg((node.args, node.kwargs), flat.append)
    for arg in flat:
        if arg.op == "get_attr":
            obj = gm
            for part in str(arg.target).split("."):
                obj = getattr(obj, part, None)
            if isinstance(obj, torch.fx.GraphModule):
                yield obj


def _plan_regions(
    gm: torch.fx.GraphModule,
    state: _State,
    plan: dict[torch.fx.Node, _State],
    seen: dict[int, _State],
) -> None:
    stack: list[_State] = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is _enter_autocast:
            stack.append(state)
            state = _entered(state, node)
            continue
        if node.op == "call_function" and node.target is _exit_autocast:
            if not stack:
                raise _Unsupported(f"{node}: _exit_autocast without _enter_autocast")
            state = stack.pop()
            continue
        if node.op not in _CALL_OPS:
            continue
        if state:
            plan[node] = state
        for sub in _subgraphs(gm, node):
            if id(sub) in seen:
                if seen[id(sub)] != state:
                    # one body called under two autocast states: no single label is true
                    raise _Unsupported(
                        f"{node}: subgraph shared by two autocast regions"
                    )
                continue
            seen[id(sub)] = state
            _plan_regions(sub, state, plan, seen)


def annotate_autocast_regions(gm: torch.fx.GraphModule) -> int:
    """Mark each call node of a Dynamo graph with its autocast state; returns how many.

    All or nothing: a graph this cannot read gets no mark (its matmuls then claim no
    autocast).
    """
    plan: dict[torch.fx.Node, _State] = {}
    _plan_regions(gm, _ambient_state(), plan, {})
    for node, state in plan.items():
        custom = node.meta.get("custom")
        custom = dict(custom) if isinstance(custom, dict) else {}
        custom[AUTOCAST_REGION_KEY] = state
        node.meta["custom"] = custom
    _set_cache_key_meta(gm)
    return len(plan)


def _region_marks(gm: torch.fx.GraphModule) -> tuple:
    marks = []
    for module in (
        gm,
        *(
            m
            for m in gm.modules()
            if m is not gm and isinstance(m, torch.fx.GraphModule)
        ),
    ):
        for node in module.graph.nodes:
            custom = node.meta.get("custom")
            if isinstance(custom, dict) and custom.get(AUTOCAST_REGION_KEY):
                marks.append((node.name, custom[AUTOCAST_REGION_KEY]))
    return tuple(marks)


def _set_cache_key_meta(gm: torch.fx.GraphModule) -> None:
    """Cache keys pickle ``gm.__dict__`` (``meta`` included) but not node meta."""
    marks = _region_marks(gm)
    if marks:
        gm.meta[CACHE_KEY_META] = marks
    else:
        gm.meta.pop(CACHE_KEY_META, None)


def mark_autocast_regions(gm: torch.fx.GraphModule) -> None:
    """Pre-grad: ``annotate_autocast_regions``, or stock behaviour where it cannot read
    the graph (its matmuls then claim no autocast)."""
    try:
        count = annotate_autocast_regions(gm)
        log.debug("matmul_meta: marked %d nodes with their autocast state", count)
    except Exception as e:
        _fallback("autocast_regions", type(gm).__name__, e)


def set_cache_key_meta(gm: Any) -> None:
    """Put the region marks where the FX graph cache key sees them (``gm.meta``)."""
    try:
        _set_cache_key_meta(gm)
    except Exception as e:
        _fallback("cache_key", gm, e)
        from torch._inductor.codecache import BypassFxGraphCache

        # a key without the regions could serve another region's code: no caching
        raise BypassFxGraphCache(f"matmul_meta: {e}") from e


# ---------------------------------------------------------------------------
# 2. Post-grad pre pass


def annotate_matmuls(graph: torch.fx.Graph) -> None:
    """Post-grad pre pass: ``node.meta[MATMUL_META_KEY]`` on every aten matmul."""
    for node in graph.nodes:
        if node.op == "call_function" and node.target in MATMUL_OPS:
            try:
                node.meta[MATMUL_META_KEY] = compute_matmul_meta(node)
            except Exception as e:
                node.meta.pop(MATMUL_META_KEY, None)
                _fallback("compute", node, e)


# ---------------------------------------------------------------------------
# 3. Lowering: attach, record, log

# TORCH_LOGS="matmul_meta"
meta_log = torch._logging.getArtifactLogger(__name__, "matmul_meta")


@dataclasses.dataclass(frozen=True)
class CompiledGraphMatmuls:
    """The matmuls Inductor lowered in one compiled graph."""

    graph: str  # "forward" | "backward" | "inference"
    nodes: tuple[str, ...]  # post-grad fx node names
    metas: tuple[MatmulMeta, ...]


class _GraphRecord:
    def __init__(self, graph: str) -> None:
        self.graph = graph
        self.metas: dict[str, MatmulMeta] = {}

    def snapshot(self) -> CompiledGraphMatmuls:
        return CompiledGraphMatmuls(
            self.graph, tuple(self.metas), tuple(self.metas.values())
        )


_RECENT_GRAPHS = 32
_recent: collections.deque[_GraphRecord] = collections.deque(maxlen=_RECENT_GRAPHS)
_recent_lock = threading.Lock()
_RECORD_ATTR = "_matmul_meta_record"


def recent_matmul_metas(graphs: int | None = None) -> list[CompiledGraphMatmuls]:
    """The matmuls of the most recently compiled graphs, oldest first.

    One entry per graph Inductor lowered with at least one matmul (forward and
    backward are two), at most ``graphs`` of them (the last 32 are kept). A graph
    served from Inductor's or AOTAutograd's cache is not lowered, so not listed.
    """
    with _recent_lock:
        records = [r.snapshot() for r in _recent]
    return records if graphs is None else records[-graphs:] if graphs > 0 else []


def clear_recent_matmul_metas() -> None:
    with _recent_lock:
        _recent.clear()


def _graph_kind(graph: Any) -> str:
    if getattr(graph, "is_backward", False):
        return "backward"
    if getattr(graph, "is_inference", False):
        return "inference"
    return "forward"


def _record(node: torch.fx.Node, meta: MatmulMeta) -> None:
    graph = V.graph
    record = getattr(graph, _RECORD_ATTR, None)
    if record is None:
        record = _GraphRecord(_graph_kind(graph))
        setattr(graph, _RECORD_ATTR, record)
        with _recent_lock:
            _recent.append(record)
    if node.name not in record.metas:
        record.metas[node.name] = meta
        meta_log.debug(
            "matmul_meta: %s graph, node %s: %s",
            record.graph,
            node.name,
            meta.describe(),
        )


def _innermost(ir_node: Any) -> Any:
    """The operation under TensorBox / StorageBox / views."""
    from torch._inductor import ir

    for _ in range(16):
        if isinstance(ir_node, (ir.TensorBox, ir.StorageBox, ir.BaseView)):
            ir_node = ir_node.data
        else:
            break
    return ir_node


def attach_matmul_meta(
    result: Any, node: torch.fx.Node | None = None
) -> MatmulMeta | None:
    """Set ``matmul_meta`` on the IR a matmul lowering returned, record and log it.

    ``node`` defaults to the fx node being lowered. A lowering that returns its own IR
    without calling through the stock one may call this.
    """
    node = node if node is not None else V.graph.current_node
    meta = get_matmul_meta(node)
    if meta is None:
        return None
    from torch._inductor import ir

    for ir_node in {id(x): x for x in (result, _innermost(result))}.values():
        if isinstance(ir_node, ir.IRNode):
            ir_node.matmul_meta = meta
    _count("matmul_meta_lowered")
    _record(node, meta)
    return meta


def attach_lowered_matmul_meta(result: Any, node: Any) -> None:
    """After the lowering of graph node ``node``: its MatmulMeta onto the IR, unless the
    lowering attached it itself (to the buffer it computes)."""
    try:
        if not (
            isinstance(node, torch.fx.Node)
            and node.op == "call_function"
            and node.target in MATMUL_OPS
        ):
            return
        record = getattr(V.graph, _RECORD_ATTR, None)
        if record is None or node.name not in record.metas:
            attach_matmul_meta(result, node)
    except Exception as e:
        _fallback("attach", getattr(node, "target", node), e)


# ---------------------------------------------------------------------------
# 4. Codegen: one comment line per matmul

_EMITTED_ATTR = "_matmul_meta_emitted"


def _ir_meta(ir_node: Any) -> MatmulMeta | None:
    meta = getattr(ir_node, "matmul_meta", None)
    if meta is None:  # a ComputedBuffer around a lowering's Pointwise
        meta = getattr(getattr(ir_node, "data", None), "matmul_meta", None)
    return meta if isinstance(meta, MatmulMeta) else None


def _pending_comments(
    snode: Any, emitted: set[str]
) -> list[tuple[torch.fx.Node, MatmulMeta]]:
    """Matmuls computed by this scheduler node whose comment is not written yet."""
    pending: dict[torch.fx.Node, MatmulMeta] = {}
    for sub in snode.get_nodes():
        ir_node = sub.node
        if ir_node is None:
            continue
        # the matmul's own kernel (an input copy made by its lowering shares its origin)
        if not (sub.is_extern() or sub.is_template() or _ir_meta(ir_node) is not None):
            continue
        for origin in ir_node.get_origins():
            meta = origin.meta.get(MATMUL_META_KEY)
            if isinstance(meta, MatmulMeta) and origin.name not in emitted:
                pending[origin] = meta
    order = (
        {n: i for i, n in enumerate(next(iter(pending)).graph.nodes)} if pending else {}
    )
    return sorted(pending.items(), key=lambda item: order.get(item[0], 0))


def write_matmul_comments(scheduler: Any, node: Any) -> None:
    """Codegen of scheduler node ``node``: one wrapper comment per matmul it computes."""
    try:
        wrapper = V.graph.wrapper_code
        emitted = wrapper.__dict__.setdefault(_EMITTED_ATTR, set())
        pending = _pending_comments(node, emitted)
        if pending:
            if node.get_device() is not None and (
                node.is_extern() or node.is_template()
            ):
                # Scheduler._codegen flushes right after this for such nodes; flushing
                # first puts the comment next to this node's call, not a previous kernel's
                scheduler.flush()
            for fx_node, meta in pending:
                emitted.add(fx_node.name)
                wrapper.make_comment(
                    f"{wrapper.comment} matmul_meta: {meta.describe()}"
                )
                _record(fx_node, meta)
    except Exception as e:
        _fallback("comment", node, e)
