"""Activation in every process of an environment (``python tools/apply.py``).

The ``.pth`` file that apply.py writes calls ``install()`` at interpreter start.
That must stay cheap, so nothing imports torch here: the overlays' new modules become
importable under their upstream names at once (a meta-path finder), and another finder
waits for ``torch._inductor.compile_fx`` (imported by the first ``torch.compile``) and
then enables the overlays that ``$TORCH_OVERLAY`` selects (all by default). Their flags
exist earlier, from the import of ``torch._inductor.config``, so that a user can set them
before the first compile, as any Inductor setting. A failure warns and leaves stock
Inductor in place; it never breaks the user's process.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import os
import pathlib
import sys
import warnings

TRIGGER = "torch._inductor.compile_fx"
CONFIG = "torch._inductor.config"
LOGS = "torch._logging._registrations"
# The overlays' edits of torch/_logging/_registrations.py: on a torch patched by the series
# they register the overlays' log artifacts; here the added statements run instead.
LOGGING_EDITS = pathlib.Path(__file__).resolve().parent / "_logging"


_artifacts_registered = False


def register_artifacts() -> None:
    """Registers the overlays' torch._logging artifacts, once (names already known are
    left as they are). Runs before torch reads $TORCH_LOGS, where an unknown name fails
    torch's import, and before an overlay module asks for its artifact logger."""
    global _artifacts_registered
    if _artifacts_registered:
        return
    try:
        from torch._logging._internal import log_registry, register_artifact

        from ._edits import FileDiff

        def register_new(name: str, *args, **kwargs) -> None:
            if name not in log_registry.artifact_names:
                register_artifact(name, *args, **kwargs)

        for path in sorted(LOGGING_EDITS.glob("_registrations.*.diff")):
            diff = FileDiff.read(path)
            source = "\n".join(line for hunk in diff.hunks for line in hunk.added)
            exec(compile(source, str(path), "exec"), {"register_artifact": register_new})
        _artifacts_registered = True
    except Exception as e:  # never take the user's process down
        warnings.warn(f"torch_overlay: log artifacts not registered: {e}", stacklevel=2)


def declare_flags() -> None:
    """Every overlay's flags, declared: on for the overlays ``activate`` will enable, as
    enabling leaves them, off for the others (not selected, or the kill switch), so that
    the user's settings code runs whatever is enabled; enabling keeps a value the user
    gives them in between."""
    import torch_overlay
    from torch_overlay._registry import REGISTRY

    selected = torch_overlay._selected(None)
    on = [] if torch_overlay.killed() else [
        n for n in (REGISTRY.names if selected is None else selected) if n in REGISTRY.names]
    try:
        REGISTRY.declare_flags(on)
        REGISTRY.declare_flags(None, on=False)
    except torch_overlay.OverlayError:
        # a config module it cannot extend: activate() meets the same error and reports it
        pass
    except Exception as e:  # never take the user's process down
        warnings.warn(f"torch_overlay: flags not declared before the first compile: {e}",
                      stacklevel=2)


def activate() -> None:
    import torch_overlay
    from torch_overlay._registry import REGISTRY

    try:
        torch_overlay.enable()
    except Exception as e:  # never take the user's process down
        warnings.warn(f"torch_overlay: overlays not enabled, stock Inductor in use: {e}",
                      stacklevel=2)
    finally:
        # a refused, skipped or unselected overlay's flags: declared, off
        REGISTRY.drop_early_flags()


class _RunAfterLoad(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader, then) -> None:
        self.loader, self.then = loader, then

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        self.then()


class _WaitForInductor(importlib.abc.MetaPathFinder):
    """Runs ``register_artifacts`` once torch's log registrations are loaded (before it
    reads $TORCH_LOGS), ``declare_flags`` once ``torch._inductor.config`` is and
    ``activate`` once ``torch._inductor.compile_fx`` is (which imports the config first)."""

    HOOKS = {LOGS: register_artifacts, CONFIG: declare_flags, TRIGGER: activate}

    def __init__(self) -> None:
        self._searching = False

    def find_spec(self, fullname, path, target=None):
        then = self.HOOKS.get(fullname)
        if then is None or self._searching:
            return None
        self._searching = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._searching = False
        if spec is not None and spec.loader is not None:
            spec.loader = _RunAfterLoad(spec.loader, then)
        return spec


def waiting() -> bool:
    """The activation hook is installed and has not enabled the overlays yet."""
    return TRIGGER not in sys.modules and any(
        type(f) is _WaitForInductor for f in sys.meta_path)


class _WaitForLogs(_WaitForInductor):
    """Only ``register_artifacts``: what ``import torch_overlay`` installs."""

    HOOKS = {LOGS: register_artifacts}


def watch_logs() -> None:
    """The overlays' log artifacts registered before torch reads $TORCH_LOGS, when
    torch_overlay is imported before torch (or now, when torch has been). Imports no torch."""
    if LOGS in sys.modules:
        register_artifacts()
    elif not any(isinstance(f, _WaitForInductor) for f in sys.meta_path):
        sys.meta_path.insert(0, _WaitForLogs())


def install_upstream_modules() -> None:
    """The overlays' new modules importable under their upstream names from now on
    (``from torch._inductor.fx_passes import gelu_add`` before anything has imported
    Inductor's compile_fx), as on a torch patched by the series; not under the kill
    switch, where such a torch has its own. Imports no torch."""
    import torch_overlay
    from torch_overlay._registry import install_module_finder

    if not torch_overlay.killed():
        install_module_finder(torch_overlay.OVERLAYS)


def install() -> None:
    install_upstream_modules()
    if any(type(f) is _WaitForInductor for f in sys.meta_path):
        return
    if LOGS in sys.modules:
        register_artifacts()
    if CONFIG in sys.modules:
        declare_flags()
    if TRIGGER in sys.modules:
        activate()
        return
    sys.meta_path.insert(0, _WaitForInductor())


def write_sitecustomize(folder: str) -> str:
    """A ``sitecustomize.py`` in ``folder`` that installs the hook at start-up in every
    Python process with ``folder`` first on PYTHONPATH (``apply.py run``, the test suite's
    child processes), after running any sitecustomize it shadows. Returns ``folder``."""
    pathlib.Path(folder, "sitecustomize.py").write_text(
        "import importlib.machinery, importlib.util, sys\n"
        f"sys.path.remove({folder!r})\n"
        # run the shadowed one beside this module: site looks this one up by name after
        "spec = importlib.machinery.PathFinder.find_spec('sitecustomize', sys.path)\n"
        "if spec is not None:\n"
        "    spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "import torch_overlay._autoload\ntorch_overlay._autoload.install()\n"
    )
    return folder


def prepend_pythonpath(env: dict, folder: str) -> dict:
    env["PYTHONPATH"] = os.pathsep.join([folder] + [p for p in [env.get("PYTHONPATH")] if p])
    return env
