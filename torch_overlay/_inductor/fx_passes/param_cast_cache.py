"""Autocast's cast cache for compiled graphs (``config.autocast_param_cache``).

Eager autocast casts a parameter (a leaf that requires grad) to the autocast dtype once
and reuses the cast until the outermost ``torch.autocast`` region exits. A compiled graph
casts on every call: a decode step reads each fp32 weight, writes its 16-bit copy and
reads that back, where eager inside one region reads only the copy. When a graph is
compiled under an ambient region (autocast entered outside the compiled function, with
its cache enabled), ``cache_param_casts`` replaces the graph's casts of parameters that
feed matmuls with one ``inductor::cached_casts`` call. At run time that op keeps the
casts between calls of the region, per thread, as eager does, and drops them with
eager's own (``torch.clear_autocast_cache``, which ``torch.autocast.__exit__`` calls when
the outermost region exits). It is safer
than eager's cache: each entry is checked against the parameters' identity, storage and
version, so an in-place update (an optimizer step, ``copy_``) is never served stale. A
cast made outside any region is not kept. The casts held are bounded by
``config.autocast_param_cache_budget``; parameters past it keep their casts in the graph.

Counters: ``counters["inductor"]["param_cast_cache_{hit,miss,evict,over_budget}"]``, and
``param_cast_cache_bytes``, the bytes held; logs: ``TORCH_LOGS="+inductor"``.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
import os
import threading
import weakref
from typing import Any

import torch
import torch.fx
from torch._dynamo.utils import counters
from torch._guards import TracingContext
from torch._inductor import config
from torch._inductor.lowering import fallback_handler, register_lowering
from torch._inductor.virtualized import V


log = logging.getLogger(__name__)

aten = torch.ops.aten
prims = torch.ops.prims

MATMULS = (aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default)
# what may stand between a parameter's cast and its matmul
VIEWS = (
    aten.permute.default,
    aten.t.default,
    aten.view.default,
    aten.reshape.default,
    aten.expand.default,
    aten.unsqueeze.default,
    aten._unsafe_view.default,
)

_version = operator.attrgetter("_version")
_data_ptr = torch.Tensor.data_ptr


# ---------------------------------------------------------------------------
# Run time: the casts of one thread's outermost autocast region


@dataclasses.dataclass
class _Cast:
    cast: torch.Tensor
    version: int
    ptr: int
    # a parameter freed drops its cast: its id may be reused by another tensor
    ref: weakref.ref[torch.Tensor]


@dataclasses.dataclass
class _Graph:
    """One graph's casts, checked in one pass over its parameters."""

    casts: list[torch.Tensor]
    versions: tuple[int, ...]
    ptrs: tuple[int, ...]


class _Store(threading.local):
    def __init__(self) -> None:
        # (dtype, id of each parameter) -> the casts; (id, dtype) -> one cast, which
        # every graph reading that parameter shares
        self.graphs: dict[tuple[Any, ...], _Graph] = {}
        self.casts: dict[tuple[int, torch.dtype], _Cast] = {}
        self.held = 0


_store = _Store()
_budgets: dict[torch.device, int] = {}
_warned: set[str] = set()


def _count_held(store: _Store) -> None:
    counters["inductor"]["param_cast_cache_bytes"] = store.held


def clear_cache() -> None:
    """Drop this thread's casts, as ``torch.clear_autocast_cache`` drops eager's."""
    store = _store
    if store.casts:
        counters["inductor"]["param_cast_cache_evict"] += len(store.casts)
        store.graphs.clear()
        store.casts.clear()
        store.held = 0
        _count_held(store)


def _hook_eager_clear() -> None:
    """From the first kept cast on, ``torch.clear_autocast_cache`` (which the outermost
    region's ``__exit__`` calls) clears this cache too."""
    eager_clear = torch.clear_autocast_cache
    if getattr(eager_clear, "_clears_compiled_casts", False):
        return

    def clear_autocast_cache() -> None:
        eager_clear()
        clear_cache()

    clear_autocast_cache._clears_compiled_casts = True  # type: ignore[attr-defined]
    torch.clear_autocast_cache = clear_autocast_cache


def _in_region() -> bool:
    # the nesting depth has no getter; incrementing returns it
    depth = torch.autocast_increment_nesting()
    torch.autocast_decrement_nesting()
    return depth > 1


def budget(device: torch.device) -> int:
    """Bytes of casts one device may hold: the config's, or half of what is free when
    first asked."""
    if config.autocast_param_cache_budget is not None:
        return config.autocast_param_cache_budget
    if device not in _budgets:
        try:
            if device.type == "cpu":
                free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
            else:
                free = torch.get_device_module(device.type).mem_get_info(device)[0]
        except (AttributeError, RuntimeError, ValueError, OSError) as e:
            log.warning(
                "param_cast_cache: free memory of %s unknown (%s); no budget", device, e
            )
            free = 0
        _budgets[device] = free // 2
    return _budgets[device]


def _warn_once(what: str, message: str) -> None:
    if what not in _warned:
        _warned.add(what)
        log.warning(message)


def _forget(store: _Store, key: tuple[int, torch.dtype]) -> None:
    kept = store.casts.pop(key, None)
    if kept is None:
        return
    store.held -= kept.cast.nbytes
    counters["inductor"]["param_cast_cache_evict"] += 1
    _count_held(store)
    for graph in [g for g in store.graphs if g[0] == key[1] and key[0] in g[1:]]:
        del store.graphs[graph]


def _cast(store: _Store, param: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The kept cast of one parameter, made or remade where stale; a new one is kept
    while the budget allows."""
    key = (id(param), dtype)
    kept = store.casts.get(key)
    now = (param._version, param.data_ptr())
    if kept is not None and (kept.version, kept.ptr) == now:
        return kept.cast
    if kept is not None:
        _forget(store, key)
    with torch.no_grad():
        cast = param.to(dtype)
    if store.held + cast.nbytes > budget(param.device):
        counters["inductor"]["param_cast_cache_over_budget"] += 1
        _warn_once("budget", "param_cast_cache: over its budget; casting on every call")
        return cast
    ref = weakref.ref(param, lambda _, k=key, s=store: _forget(s, k))
    store.casts[key] = _Cast(cast, *now, ref)
    store.held += cast.nbytes
    _count_held(store)
    return cast


def lookup(params: list[torch.Tensor], dtype: torch.dtype) -> list[torch.Tensor]:
    """The casts of ``params`` to ``dtype``: kept ones where still valid."""
    store = _store
    key = (dtype, *map(id, params))
    versions = tuple(map(_version, params))
    ptrs = tuple(map(_data_ptr, params))
    graph = store.graphs.get(key)
    if graph is not None and graph.versions == versions and graph.ptrs == ptrs:
        counters["inductor"]["param_cast_cache_hit"] += 1
        return graph.casts
    counters["inductor"]["param_cast_cache_miss"] += 1
    if not _in_region() or not all(p.is_leaf and p.requires_grad for p in params):
        # eager keeps only parameters' casts, and only inside a region
        with torch.no_grad():
            return [p.to(dtype) for p in params]
    _hook_eager_clear()
    casts = [_cast(store, p, dtype) for p in params]
    if all((id(p), dtype) in store.casts for p in params):
        store.graphs[key] = _Graph(casts, versions, ptrs)
    return casts


# Host logic: never captured into a CUDA graph (a partition of its own). A library op
# rather than a custom_op: custom_op's wrappers check each output for aliasing on every
# call, which costs more than the lookup itself over a model's parameters.
_lib = torch.library.Library("inductor", "FRAGMENT")
_lib.define(
    "cached_casts(Tensor[] params, ScalarType dtype) -> Tensor[]",
    tags=(torch.Tag.cudagraph_unsafe,),
)


def cached_casts(params: list[torch.Tensor], dtype: torch.dtype) -> list[torch.Tensor]:
    return lookup(params, dtype)


_lib.impl("cached_casts", cached_casts, "CompositeExplicitAutograd")


@torch.library.register_fake("inductor::cached_casts")
def _(params: list[torch.Tensor], dtype: torch.dtype) -> list[torch.Tensor]:
    return [
        torch.empty_strided(p.size(), p.stride(), dtype=dtype, device=p.device)
        for p in params
    ]


@register_lowering(torch.ops.inductor.cached_casts.default, type_promotion_kind=None)
def _lower_cached_casts(params: list[Any], dtype: torch.dtype) -> list[Any]:
    casts = fallback_handler(
        torch.ops.inductor.cached_casts.default, add_to_fallback_set=False
    )(params, dtype)
    for cast in casts:
        # kept between calls: no kernel may write over it in place or reuse its memory
        V.graph.never_reuse_buffers.add(cast.get_name())
    return casts


# ---------------------------------------------------------------------------
# Compile time: the post-grad pass


def _ambient_dtypes() -> dict[str, torch.dtype]:
    """Device type -> autocast dtype of the ambient region the graph was traced in, where
    its cache is on."""
    context = TracingContext.try_get()
    state = (
        {k: v[1] for k, v in context.global_context.global_state.items()}
        if context
        else {}
    )
    if not state.get("autocast_cache_enabled"):
        return {}
    gpu = torch.accelerator.current_accelerator()
    dtypes = {}
    if state.get("autocast_enabled"):
        dtypes[gpu.type if gpu else "cuda"] = state["autocast_gpu_dtype"]
    if state.get("autocast_cpu_enabled"):
        dtypes["cpu"] = state["autocast_cpu_dtype"]
    return dtypes


def _feeds_matmuls(node: torch.fx.Node) -> bool:
    """Every use of ``node`` is a matmul, through views, or a graph output (a value saved
    for backward): nothing writes where the cast is kept."""
    for user in node.users:
        if user.op == "output" or user.target in MATMULS:
            continue
        if user.target not in VIEWS or not _feeds_matmuls(user):
            return False
    return True


def _param_casts(
    graph: torch.fx.Graph, dtypes: dict[str, torch.dtype]
) -> dict[torch.dtype, list[tuple[torch.fx.Node, list[torch.fx.Node]]]]:
    """Per dtype, the parameters (graph inputs AOTAutograd calls static) and their casts."""
    context = TracingContext.try_get()
    static = getattr(
        getattr(context, "fw_metadata", None), "static_input_indices", None
    )
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if not static or any(n.name.startswith("tangents") for n in placeholders):
        return {}
    found: dict[torch.dtype, list[tuple[torch.fx.Node, list[torch.fx.Node]]]] = {}
    for i in static:
        param = placeholders[i] if i < len(placeholders) else None
        value = param.meta.get("val") if param is not None else None
        if not isinstance(value, torch.Tensor) or value.dtype != torch.float32:
            continue
        dtype = dtypes.get(value.device.type)
        casts = [
            u
            for u in param.users
            if u.target is prims.convert_element_type.default and u.args[1] == dtype
        ]
        if casts and all(_feeds_matmuls(c) for c in casts):
            found.setdefault(dtype, []).append((param, casts))
    return found


def _within_budget(
    params: list[tuple[torch.fx.Node, list[torch.fx.Node]]], dtype: torch.dtype
) -> list[tuple[torch.fx.Node, list[torch.fx.Node]]]:
    """The parameters whose casts fit the device's budget, in graph order; the rest keep
    their casts in the graph, fused into the matmul where it can."""
    kept, nbytes = [], 0
    for param, casts in params:
        value = param.meta["val"]
        size = value.numel() * dtype.itemsize
        if nbytes + size > budget(value.device):
            counters["inductor"]["param_cast_cache_over_budget"] += 1
            continue
        nbytes += size
        kept.append((param, casts))
    return kept


def _replace(
    graph: torch.fx.Graph,
    params: list[tuple[torch.fx.Node, list[torch.fx.Node]]],
    dtype: torch.dtype,
) -> None:
    last_input = [n for n in graph.nodes if n.op == "placeholder"][-1]
    with graph.inserting_after(last_input):
        call = graph.call_function(
            torch.ops.inductor.cached_casts.default, ([p for p, _ in params], dtype)
        )
    call.meta["val"] = [casts[0].meta["val"] for _, casts in params]
    for i, (_, casts) in reversed(list(enumerate(params))):
        with graph.inserting_after(call):
            item = graph.call_function(operator.getitem, (call, i))
        item.meta["val"] = casts[0].meta["val"]
        for cast in casts:
            cast.replace_all_uses_with(item)
            graph.erase_node(cast)


def cache_param_casts(graph: torch.fx.Graph) -> None:
    """Post-grad: one ``cached_casts`` call for the parameter casts of a graph compiled
    inside an ambient autocast region."""
    dtypes = _ambient_dtypes()
    # CUDA graphs would copy each kept cast into the graph's own input every replay
    if not dtypes or config.triton.cudagraphs:
        return
    for dtype, params in _param_casts(graph, dtypes).items():
        params = _within_budget(params, dtype)
        if params:
            _replace(graph, params, dtype)
            log.debug("param_cast_cache: %d parameter casts to %s", len(params), dtype)
