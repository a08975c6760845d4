"""torch_overlay: Inductor features as runtime overlays of ``torch._inductor``.

    import torch_overlay
    torch_overlay.enable()            # all overlays, or enable(["gelu_add"])
    torch_overlay.status()            # what is active, refused, and why
    torch_overlay.disable()           # the exact upstream objects are back

Environment: ``TORCH_OVERLAY=name,name`` selects overlays for ``enable()`` with no
names; ``TORCH_OVERLAY_DISABLE=1`` turns every enable into a no-op (kill switch);
``TORCH_OVERLAY_FORCE=1`` enables what applies and skips (with a warning) what does not.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import warnings
from typing import Iterable

from . import _autoload
from ._registry import REGISTRY, Overlay, OverlayError

__all__ = ["enable", "disable", "status", "Overlay", "OverlayError", "OVERLAYS"]
__version__ = "0.2.0"

log = logging.getLogger("torch_overlay")

# In dependency order: also the order of the exported patch series (patches/), whose
# every prefix reproduces the goldens of its last overlay. Each overlay's edits of
# existing upstream files are the torch_overlay/_inductor/**/*.<name>.diff files.
OVERLAYS: tuple[Overlay, ...] = tuple(REGISTRY.register(o) for o in (
    Overlay(
        name="prologue_downcast",
        purpose="prologue fusion of an fp32 -> 16-bit cast into a matmul template where the "
                "template reads that operand about once (decode shapes)",
        flag="prologue_fusion_downcast",
    ),
    Overlay(
        name="downcast_mm",
        purpose="in default mode, the mm template for a decode-sized matmul whose weight is "
                "an fp32 -> 16-bit cast, chosen through V.choices; the cast fuses as its "
                "prologue",
        flag="downcast_mm_template",
        modules=("kernel.mm_downcast_plan", "heuristics.template.downcast_mm",
                 "kernel.mm_downcast", "fx_passes.decompose_downcast_mm"),
        choices=("downcast_mm",),
        requires=("prologue_downcast",),
    ),
    Overlay(
        name="bmm_prologue",
        purpose="the bmm template loads its operands through load_input, as the mm "
                "template does, so that a prologue (a cast of an operand) fuses into it",
        flag="bmm_prologue_fusion",
        # downcast_mm's choice for a batch of downcast weights (bmm, baddbmm)
        parts=("downcast_mm_bmm",),
    ),
    Overlay(
        name="template_fill_order",
        purpose="with ATEN among max-autotune's backends, a template records a flexible "
                "input's layout in the fill order finalize freezes it to, so a Triton "
                "choice reading a cast of a transposed weight is not refused for a "
                "layout conflict",
        flag="template_layout_fill_order",
    ),
    Overlay(
        name="matmul_meta",
        purpose="autocast compute dtype of every mm/addmm/bmm/baddbmm as IR metadata "
                "(MatmulMeta), with a wrapper comment per matmul",
        flag="autocast_matmul_meta",
        modules=("fx_passes.matmul_meta",),
    ),
    Overlay(
        name="tensorcore_mm",
        purpose="autocast matmuls of fp32 tensors: a Triton template that casts in registers, "
                "chosen per shape by a cost model",
        flag="tensorcore_mm_autocast",
        modules=("kernel.mm_tensorcore_plan", "kernel.mm_tensorcore",
                 "heuristics.template.tensorcore_mm"),
        choices=("tensorcore_mm",),
        requires=("downcast_mm", "matmul_meta"),
        # bmm and baddbmm; split-K; a symbolic M; max-autotune's choices; timing
        # uncertain plans on the device; one row as a reduction over K and frozen
        # 16-bit weights
        parts=("tensorcore_mm_bmm", "tensorcore_mm_splitk", "tensorcore_mm_dynamic",
               "tensorcore_mm_autotune", "tensorcore_mm_measure", "tensorcore_mm_decode"),
        # a graph whose compile fails after it lowered templates (a kernel the driver
        # cannot load) compiled again with the feature off (_fallback.py): upstream's
        # select_algorithm drops failing choices, it would not take a whole-graph retry
        safety_nets=("tensorcore_mm_fallback",),
    ),
    Overlay(
        name="gelu_add",
        purpose="gelu(x) + r (both approximations, fp32/bf16/fp16, broadcast r) as one "
                "pointwise kernel named gelu_add; eager's rounding under "
                "emulate_precision_casts",
        flag="gelu_add_fusion",
        modules=("fx_passes.gelu_add",),
        # the gelu-add as the tensorcore_mm template's epilogue
        parts=("tensorcore_mm_gelu_add",),
    ),
    Overlay(
        name="param_cast_cache",
        purpose="in a graph compiled inside an ambient autocast region, the casts of "
                "parameters kept between calls as eager autocast keeps them, checked "
                "against each parameter's storage and version",
        flag="autocast_param_cache",
        modules=("fx_passes.param_cast_cache",),
        # a kept cast read by the tensorcore_mm decode kernels as a frozen weight is
        parts=("tensorcore_mm_param_cast_cache",),
    ),
))

# TORCH_LOGS=tensorcore_mm works in a process that imports torch_overlay before torch
_autoload.watch_logs()

# torch releases the overlays were validated on (tests, goldens, GPU runs); elsewhere an
# overlay whose edits apply still enables, and tools/apply.py asks for --force
SUPPORTED_TORCH = ("2.11", "2.14", "2.15")


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def killed() -> bool:
    return _env_flag("TORCH_OVERLAY_DISABLE")


def load_overlays() -> list[str]:
    """The declared overlays' names, in series order."""
    return REGISTRY.names


def _selected(names: Iterable[str] | str | None) -> list[str] | None:
    if isinstance(names, str):
        names = [names]
    if names is None and os.environ.get("TORCH_OVERLAY", "").strip():
        names = [n.strip() for n in os.environ["TORCH_OVERLAY"].split(",") if n.strip()]
    return None if names is None else list(names)


def enable(names: Iterable[str] | str | None = None, *, force: bool | None = None) -> list[str]:
    """Enable overlays (default: ``$TORCH_OVERLAY`` or all) and what they require.

    Applies their edits to the live upstream functions, declares their
    ``torch._inductor.config`` flags and turns them on. Returns the names enabled by this
    call. Raises OverlayError for an unknown name or an edit that does not apply to the
    installed torch (drift); the overlays enabled before stay as they were. With
    ``force`` (``TORCH_OVERLAY_FORCE=1``) a refused overlay is skipped with a warning
    and the others are enabled.
    """
    if killed():
        log.info("torch_overlay: TORCH_OVERLAY_DISABLE is set; no overlay enabled")
        return []
    if force is None:
        force = _env_flag("TORCH_OVERLAY_FORCE")
    selected = _selected(names)
    if not force:
        return REGISTRY.enable(selected)
    enabled = []
    for name in REGISTRY.with_requirements(selected if selected is not None else REGISTRY.names):
        try:
            enabled += [n for n in REGISTRY.enable([name]) if n not in enabled]
        except OverlayError as e:
            warnings.warn(f"torch_overlay: {e}; the others stay enabled", stacklevel=2)
    return enabled


def disable(names: Iterable[str] | str | None = None) -> None:
    """Restore upstream for the named overlays (default: all) and their dependants."""
    REGISTRY.disable(_selected(names) if names is not None else None)


@dataclasses.dataclass
class OverlayStatus:
    name: str
    purpose: str
    state: str  # "active" | "inactive" | "refused" | "killed" | "pending"
    reason: str | None
    flag: str
    edits: list[str]  # the .diff files used on this torch, relative to torch_overlay/_inductor
    functions: list[str]  # upstream functions its edits replace the code of
    # edited upstream file -> "primary" (made against the newest supported release) or
    # the older release whose variant applies ("torch-2.11")
    variants: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Status:
    torch: str
    triton: str | None
    killed: bool
    overlays: list[OverlayStatus]
    replaced: list[str]  # live upstream functions whose code is replaced now
    unknown: list[str] = dataclasses.field(default_factory=list)  # in $TORCH_OVERLAY

    def __str__(self) -> str:
        lines = [f"torch {self.torch}, triton {self.triton or 'missing'}"]
        if self.killed:
            lines.append("TORCH_OVERLAY_DISABLE is set: every overlay is off")
        if self.unknown:
            lines.append(f"TORCH_OVERLAY names unknown overlay(s) {', '.join(self.unknown)} "
                         f"(known: {', '.join(REGISTRY.names)}): enabling from it fails")
        for o in self.overlays:
            lines.append(f"{o.name}: {o.state}" + (f" ({o.reason})" if o.reason else ""))
            lines.append(f"    {o.purpose}")
            lines.append(f"    flag torch._inductor.config.{o.flag}; edits {', '.join(o.edits)}")
            if o.variants:
                kinds = set(o.variants.values())
                lines.append("    variant: " + (kinds.pop() if len(kinds) == 1 else ", ".join(
                    f"{path} {kind}" for path, kind in o.variants.items())))
            for function in o.functions:
                lines.append(f"    edits {function}")
        edited = sorted({f for o in self.overlays for f in o.functions})
        lines.append(f"upstream objects replaced now: {len(self.replaced)} "
                     f"(functions the series edits: {len(edited)})")
        return "\n".join(lines)


def _state(name: str, reason: str | None, selected: list[str] | None) -> tuple[str, str | None]:
    """An overlay's state and why, as the registry has it now."""
    from ._autoload import waiting

    if name in REGISTRY.enabled():
        return "active", None
    if name in REGISTRY.refused():
        return "refused", REGISTRY.refused()[name]
    if killed():
        return "killed", "TORCH_OVERLAY_DISABLE=1"
    if reason is not None:
        return "inactive", f"upstream drift, would be refused: {reason}"
    if selected is not None and name not in REGISTRY.with_requirements(
            [n for n in selected if n in REGISTRY.names]):
        return "inactive", f"not selected: TORCH_OVERLAY={','.join(selected)}"
    if waiting():
        return "pending", "the activation hook enables it at the first torch.compile"
    return "inactive", None


def status() -> Status:
    import torch

    from ._edits import OVERLAY_ROOT

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    # planning imports the edited modules, which may run the activation hook: the state
    # is read after it
    plans = {o.name: REGISTRY.plan(o.name) for o in OVERLAYS}
    selected = _selected(None)
    overlays = []
    for overlay in OVERLAYS:
        plan = plans[overlay.name]
        state, reason = _state(overlay.name, plan.reason, selected)
        functions = [swap.target for swap in plan.swaps]
        # the edits in use: the primary, or the variant that applies to this torch
        # (plan.edits follows overlay.edit_files, up to a refusal)
        edits = [str((plan.edits[i] if i < len(plan.edits) else p).relative_to(OVERLAY_ROOT))
                 for i, p in enumerate(overlay.edit_files)]
        overlays.append(OverlayStatus(overlay.name, overlay.purpose, state, reason,
                                      overlay.flag, edits, functions, plan.variants))
    replaced = [s.target for s in REGISTRY.swaps]
    unknown = [n for n in selected or [] if n not in REGISTRY.names]
    return Status(torch.__version__, triton_version, killed(), overlays, replaced, unknown)
