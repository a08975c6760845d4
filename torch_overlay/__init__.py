"""torch_overlay: Inductor features as runtime overlays of ``torch._inductor``.

    import torch_overlay
    torch_overlay.enable()            # all overlays, or enable(["gelu_add"])
    torch_overlay.status()            # what is active, refused, and why
    torch_overlay.disable()           # the exact upstream objects are back

Environment: ``TORCH_OVERLAY=name,name`` selects overlays for ``enable()`` with no
names; ``TORCH_OVERLAY_DISABLE=1`` turns every enable into a no-op (kill switch);
``TORCH_OVERLAY_FORCE=1`` enables overlays on an unvalidated torch.
"""
from __future__ import annotations

import dataclasses
import importlib
import logging
import os
from typing import Iterable

from ._registry import REGISTRY, FingerprintCheck, Hook, Overlay, OverlayError

__all__ = ["enable", "disable", "status", "Overlay", "Hook", "OverlayError", "OVERLAY_MODULES"]
__version__ = "0.1.0"

log = logging.getLogger("torch_overlay")

# One module per overlay, at the path of the upstream module it would become, in
# dependency order: also the order of the exported patch series (patches/), whose
# every prefix reproduces the goldens of its last overlay.
OVERLAY_MODULES: tuple[str, ...] = (
    "torch_overlay._inductor.fx_passes.matmul_meta",
    "torch_overlay._inductor.kernel.mm_tensorcore",
    "torch_overlay._inductor.fx_passes.gelu_add",
)

SUPPORTED_TORCH = ("2.11",)


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def killed() -> bool:
    return _env_flag("TORCH_OVERLAY_DISABLE")


def load_overlays() -> list[str]:
    """Import the overlay modules so their declarations are registered."""
    for module in OVERLAY_MODULES:
        importlib.import_module(module)
    REGISTRY.order_by_modules(OVERLAY_MODULES)
    return REGISTRY.names


def _selected(names: Iterable[str] | str | None) -> list[str] | None:
    if isinstance(names, str):
        names = [names]
    if names is None and os.environ.get("TORCH_OVERLAY", "").strip():
        names = [n.strip() for n in os.environ["TORCH_OVERLAY"].split(",") if n.strip()]
    return None if names is None else list(names)


def enable(names: Iterable[str] | str | None = None, *, force: bool | None = None) -> list[str]:
    """Enable overlays (default: ``$TORCH_OVERLAY`` or all) and what they require.

    Returns the names now enabled by this call. Raises OverlayError for an unknown
    name, a drifted upstream target (unless forced) or a failed patch; in every
    case nothing of the failing overlay stays patched.
    """
    if killed():
        log.info("torch_overlay: TORCH_OVERLAY_DISABLE is set; no overlay enabled")
        return []
    load_overlays()
    if force is None:
        force = _env_flag("TORCH_OVERLAY_FORCE")
    return REGISTRY.enable(_selected(names), force=force)


def disable(names: Iterable[str] | str | None = None) -> None:
    """Restore upstream for the named overlays (default: all) and their dependants."""
    REGISTRY.disable(_selected(names) if names is not None else None)


@dataclasses.dataclass
class OverlayStatus:
    name: str
    purpose: str
    state: str  # "active" | "inactive" | "refused" | "killed"
    reason: str | None
    targets: list[FingerprintCheck]


@dataclasses.dataclass
class Status:
    torch: str
    triton: str | None
    killed: bool
    overlays: list[OverlayStatus]

    def __str__(self) -> str:
        lines = [f"torch {self.torch}, triton {self.triton or 'missing'}"]
        if self.killed:
            lines.append("TORCH_OVERLAY_DISABLE is set: every overlay is off")
        for o in self.overlays:
            lines.append(f"{o.name}: {o.state}" + (f" ({o.reason})" if o.reason else ""))
            lines.append(f"    {o.purpose}")
            for c in o.targets:
                mark = "ok" if c.ok else f"DRIFT (validated {c.expected or 'never on this version'})"
                lines.append(f"    {c.target} {c.actual} {mark}")
        return "\n".join(lines)


def status() -> Status:
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    load_overlays()
    active, refused = REGISTRY.enabled(), REGISTRY.refused()
    overlays = []
    for name in REGISTRY.names:
        overlay = REGISTRY.get(name)
        checks = REGISTRY.check(name)
        if name in active:
            state, reason = "active", None
        elif name in refused:
            state, reason = "refused", refused[name]
        elif killed():
            state, reason = "killed", "TORCH_OVERLAY_DISABLE=1"
        elif not all(c.ok for c in checks):
            state, reason = "inactive", "upstream drift: would be refused without force"
        else:
            state, reason = "inactive", None
        overlays.append(OverlayStatus(name, overlay.purpose, state, reason, checks))
    return Status(torch.__version__, triton_version, killed(), overlays)
