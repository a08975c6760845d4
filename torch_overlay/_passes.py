"""Inductor's post-grad custom pass hooks, carrying the overlays' cache key.

Inductor's FX graph cache and AOTAutograd cache key on these passes' ``uuid()``
but not on a runtime patch of lowerings or templates, so a process with other
overlays enabled could be served this one's code. Whenever an overlay is enabled,
both hooks hold an ``OverlayGraphPass`` whose uuid covers the overlay sources and
the enabled set; a pass the user had installed still runs, after ours, and its
uuid is part of ours.
"""
from __future__ import annotations

import functools
import hashlib
import pathlib
from typing import Any

from torch._inductor.custom_graph_pass import CustomGraphPass

PACKAGE_DIR = pathlib.Path(__file__).resolve().parent


@functools.cache
def overlay_source_digest() -> str:
    """Hash of every overlay source file (the test harness excluded)."""
    h = hashlib.sha256()
    for path in sorted(PACKAGE_DIR.rglob("*")):
        rel = path.relative_to(PACKAGE_DIR)
        if path.suffix in (".py", ".jinja") and rel.parts[0] != "testing":
            h.update(str(rel).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


class OverlayGraphPass(CustomGraphPass):
    def __init__(self, stage: str, previous: Any) -> None:
        self.stage = stage
        self.previous = previous

    def __call__(self, graph: Any) -> None:
        from ._registry import REGISTRY

        for graph_pass in REGISTRY.active_passes(self.stage):
            graph_pass(graph)
        if self.previous is not None:
            self.previous(graph)

    def uuid(self) -> Any:
        from ._registry import REGISTRY

        previous_uuid = None
        if self.previous is not None:
            if not hasattr(self.previous, "uuid"):
                return None  # an uuid-less user pass: Inductor bypasses its caches
            previous_uuid = self.previous.uuid()
            if previous_uuid is None:
                return None
        key = (self.stage, overlay_source_digest(), tuple(sorted(REGISTRY.enabled())), previous_uuid)
        return hashlib.sha256(repr(key).encode()).hexdigest()

    def __deepcopy__(self, memo: dict) -> "OverlayGraphPass":
        # Inductor copies its config; the pass holds no per-compile state
        return self
