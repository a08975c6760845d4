"""What the new modules need of an older torch, supplied as the registry loads them.

The modules under ``torch_overlay/_inductor/`` are written for the release the series
targets (``patches/UPSTREAM_PIN``) and exported as they are, so the differences of an
older supported release live here, not in them. Each adapter checks for the difference
itself (what the installed torch does), never a version string.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable


def _select_returns_node(module: Any) -> None:
    """Before torch 2.13, ``autotune_select_algorithm`` returned the node alone; the
    kernel unpacks ``(node, choice)``."""
    from torch._inductor.kernel import mm

    if "node, _ = autotune_select_algorithm" in inspect.getsource(mm):
        return
    select = module.autotune_select_algorithm

    def autotune_select_algorithm(*args: Any, **kwargs: Any) -> Any:
        result = select(*args, **kwargs)
        return result if isinstance(result, tuple) else (result, None)

    module.autotune_select_algorithm = autotune_select_algorithm


ADAPTERS: dict[str, list[Callable[[Any], None]]] = {
    "torch._inductor.kernel.mm_tensorcore": [_select_returns_node],
}


def adapt(module: Any) -> None:
    """Run the adapters of a new module, just after it has executed."""
    for adapter in ADAPTERS.get(module.__name__, ()):
        adapter(module)
