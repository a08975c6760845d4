"""What the new modules need of an older torch, supplied as the registry loads them.

The modules under ``torch_overlay/_inductor/`` are written for the release the series
targets (``patches/UPSTREAM_PIN``) and exported as they are, so the differences of an
older supported release live here, not in them. Each adapter checks for the difference
itself (what the installed torch does), never a version string.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import sys
import types
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


def alias_moved_packages() -> None:
    """Before the template heuristics moved to ``torch._inductor.heuristics.template``
    (with the registry at ``torch._inductor.heuristics.registry``), they were the package
    ``torch._inductor.template_heuristics``; the new heuristic module imports the new
    names. Where those do not exist, they name the old package's modules."""
    try:
        importlib.import_module("torch._inductor.heuristics.template.base")
        importlib.import_module("torch._inductor.heuristics.registry")
        return
    except ImportError:
        pass
    old = importlib.import_module("torch._inductor.template_heuristics")
    registry = importlib.import_module("torch._inductor.template_heuristics.registry")
    modules = {
        "template": old,
        "template.base": importlib.import_module("torch._inductor.template_heuristics.base"),
        "template.triton": importlib.import_module("torch._inductor.template_heuristics.triton"),
        "template.registry": registry,  # one registry: never a second copy of the file
        "registry": registry,
    }
    package = sys.modules.get("torch._inductor.heuristics")
    if package is None:
        package = types.ModuleType("torch._inductor.heuristics", "moved: an alias")
        package.__path__ = []
        sys.modules[package.__name__] = package
    for name, module in modules.items():
        sys.modules.setdefault(f"torch._inductor.heuristics.{name}", module)
    package.template, package.registry = old, registry


def provide_choices_registration() -> None:
    """Before ``register_inductor_choices`` (torch 2.15), ``V.choices`` was one
    ``InductorChoices`` a thread made from ``config.inductor_choices_class``; a new module
    registers its contributor through the later API. Here each registration makes a class
    of the contributors over what the thread would have made, for this thread and the
    others."""
    from torch._inductor import choices, virtualized

    if hasattr(choices, "register_inductor_choices"):
        return
    registered: dict[str, type] = {}

    @functools.lru_cache
    def composed_class(contributors: tuple[type, ...], base: type) -> type:
        bases = tuple(c for c in contributors if not issubclass(base, c))
        return type("RegisteredInductorChoices", (*bases, base), {}) if bases else base

    def composed() -> Any:
        from torch._inductor import config

        factory = config.inductor_choices_class or choices.InductorChoices
        base = factory if isinstance(factory, type) else type(factory())
        handler = composed_class(tuple(registered.values()), base)()
        setattr(virtualized.threadlocal, virtualized._choices._key, handler)
        return handler

    def register_inductor_choices(key: str, factory: type) -> None:
        registered[key] = factory
        virtualized._choices._default = composed
        # this thread's handler is made again at its next use, from the config then
        vars(virtualized.threadlocal).pop(virtualized._choices._key, None)

    def unregister_inductor_choices(key: str) -> None:
        registered.pop(key, None)
        vars(virtualized.threadlocal).pop(virtualized._choices._key, None)

    choices.register_inductor_choices = register_inductor_choices
    choices.unregister_inductor_choices = unregister_inductor_choices
    choices.registered_inductor_choices = lambda: tuple(registered.items())


def adapt(module: Any) -> None:
    """Run the adapters of a new module, just after it has executed."""
    for adapter in ADAPTERS.get(module.__name__, ()):
        adapter(module)
