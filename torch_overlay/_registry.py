"""Overlay registry: each overlay is the upstream change itself, applied to the live torch.

An ``Overlay`` names its ``torch._inductor.config`` flag, the new upstream modules it adds
(plain files under ``torch_overlay/_inductor/`` at their upstream paths, imported under
their upstream names) and, by file name, its edits of existing upstream functions
(``torch_overlay/_inductor/**/<file>.<overlay>.diff``, made against the newest supported
release, with ``<file>.<overlay>.torch-X.Y.diff`` variants for older ones where their
source differs: the first that applies is used, see ``_edits``). Enabling installs
the flags, applies the edits of every enabled overlay (all or nothing) and turns the flag
on; disabling puts the original code objects back and removes the flags. The activation
hook declares the flags earlier (``declare_flags``), when ``torch._inductor.config`` is
imported, so that they can be set before the first compile; enabling adopts those as
they are.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.abc
import importlib.util
import inspect
import logging
import os
import pathlib
import sys
import threading
import types
from typing import Any, Iterable, NamedTuple

from ._edits import (
    OVERLAY_ROOT, EditError, FileDiff, Swap, config_declarations, plan_swaps, select_edits,
    variant_name,
)

log = logging.getLogger("torch_overlay")

# A config entry over the applied edits and new modules: part of Inductor's FX graph and
# AOTAutograd cache keys (as every config entry), so a changed overlay never meets a
# cache entry compiled under another one. Runtime only: the exported series has no need.
DIGEST_CONFIG = "torch_overlay_digest"


def _diff_files() -> list[pathlib.Path]:
    """Every ``.diff`` under the overlay tree, sorted: one walk."""
    return sorted(pathlib.Path(d, f) for d, _, files in os.walk(OVERLAY_ROOT)
                  for f in files if f.endswith(".diff"))


def _named(found: list[pathlib.Path], suffix: str) -> list[pathlib.Path]:
    """The edits ``<stem>.<suffix>.diff`` among ``found``."""
    return [p for p in found if p.name.endswith(f".{suffix}.diff")]


class OverlayError(RuntimeError):
    """An overlay could not be enabled; the message names the overlay and the reason."""


@dataclasses.dataclass(frozen=True)
class Overlay:
    name: str
    purpose: str
    # the torch._inductor.config flag that turns the feature on (declared by its config diff)
    flag: str
    # new upstream modules, relative to torch._inductor (file: torch_overlay/_inductor/<path>.py)
    modules: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    # the further patches the series splits this overlay into, in order, under this
    # overlay's flag: each may edit upstream files and declare flags (``<stem>.<part>.diff``
    # here, applied with this overlay's own) and brings test/inductor/test_<part>.py; its
    # edits of the new modules, which are whole here, are the exporter's (series/)
    parts: tuple[str, ...] = ()
    # applied at run time, never exported: edits upstream would not take (``<stem>.<net>.diff``,
    # applied after the parts'), a guard for a failure the series handles otherwise or not
    safety_nets: tuple[str, ...] = ()
    # keys of the InductorChoices contributors its modules register (register_inductor_choices):
    # withdrawn while the overlay is disabled, whose flags they read
    choices: tuple[str, ...] = ()

    @property
    def edit_files(self) -> list[pathlib.Path]:
        """The primary edits (made against the newest supported release; the exported
        ones), then its parts' and safety nets' edits of upstream files, flags included."""
        found = _diff_files()
        return _named(found, self.name) + [p for part in (*self.parts, *self.safety_nets)
                                           for p in _named(found, part)]

    @property
    def own_edit_files(self) -> list[pathlib.Path]:
        """The primary edits of this overlay's own patch."""
        return _named(_diff_files(), self.name)

    def module_files(self) -> dict[str, pathlib.Path]:
        """Upstream module name -> the file that is that module."""
        return {f"torch._inductor.{m}": OVERLAY_ROOT.joinpath(*m.split(".")).with_suffix(".py")
                for m in self.modules}


class _UpstreamModules(importlib.abc.MetaPathFinder):
    """Imports the overlays' new modules under their upstream names (torch._inductor.x.y).

    A module is loaded once, under that name: ``torch_overlay._inductor.x.y`` is the same
    module object, never a second copy with its own state.
    """

    def __init__(self) -> None:
        self.files: dict[str, pathlib.Path] = {}

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname in self.files:
            spec = importlib.util.spec_from_file_location(fullname, self.files[fullname])
            spec.loader = _Adapted(spec.loader)
            return spec
        upstream = "torch." + fullname.removeprefix("torch_overlay.")
        if fullname.startswith("torch_overlay._inductor.") and upstream in self.files:
            return importlib.util.spec_from_loader(fullname, _Alias(upstream))
        return None


class _Adapted(importlib.abc.Loader):
    """A new module's loader: the log artifacts it may ask for first, then the module, then
    what an older torch needs of it (``_compat``)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        from . import _autoload, _compat

        _autoload.register_artifacts()  # a patched torch's _registrations.py has them
        self.loader.exec_module(module)
        _compat.adapt(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ...: the file's
        return getattr(self.loader, name)


class _Alias(importlib.abc.Loader):
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream

    def create_module(self, spec: Any) -> Any:
        return importlib.import_module(self.upstream)

    def exec_module(self, module: Any) -> None:
        pass


UPSTREAM_MODULES = _UpstreamModules()


def install_module_finder(overlays: Iterable[Overlay]) -> None:
    for overlay in overlays:
        UPSTREAM_MODULES.files.update(overlay.module_files())
    if UPSTREAM_MODULES not in sys.meta_path:
        sys.meta_path.insert(0, UPSTREAM_MODULES)


class Plan(NamedTuple):
    """What an overlay's edits do on the installed torch (nothing applied yet)."""

    swaps: list[Swap]
    reason: str | None  # why they do not apply; None when they do
    # upstream file (relative to torch/_inductor) -> the edit used: "primary" or
    # "torch-2.11" (a variant for an older release), for the files chosen before a refusal
    variants: dict[str, str]
    edits: list[pathlib.Path]  # the .diff files used, in the order of Overlay.edit_files


class Registry:
    def __init__(self) -> None:
        self._overlays: dict[str, Overlay] = {}
        self._enabled: list[str] = []
        self._refused: dict[str, str] = {}
        self._swaps: list[Swap] = []
        self._flags: dict[str, list[str]] = {}  # overlay -> config entries it installed
        # overlay -> config entries declared by declare_flags, not yet adopted by an enable
        self._early: dict[str, list[str]] = {}
        # of those, the overlays declared off: enabling turns their flag on
        self._early_off: set[str] = set()
        # overlays whose entries the activation hook declared: they stay declared, the
        # flag off, while the overlay is not enabled (the user's settings code runs)
        self._kept: set[str] = set()
        # contributor key -> the factory its module registered, once imported
        self._contributors: dict[str, Any] = {}
        self._lock = threading.RLock()

    # -- declaration ---------------------------------------------------------
    def register(self, overlay: Overlay) -> Overlay:
        known = self._overlays.get(overlay.name)
        if known is not None and known != overlay:
            raise OverlayError(f"overlay {overlay.name!r} is declared twice")
        self._overlays[overlay.name] = overlay
        return overlay

    @property
    def names(self) -> list[str]:
        return list(self._overlays)

    def get(self, name: str) -> Overlay:
        try:
            return self._overlays[name]
        except KeyError:
            raise OverlayError(
                f"unknown overlay {name!r}; known: {', '.join(self._overlays) or 'none'}"
            ) from None

    def enabled(self) -> list[str]:
        return list(self._enabled)

    def refused(self) -> dict[str, str]:
        return dict(self._refused)

    @property
    def swaps(self) -> list[Swap]:
        """The live upstream functions whose code the enabled overlays replaced."""
        return list(self._swaps)

    def with_requirements(self, names: list[str]) -> list[str]:
        order: list[str] = []

        def visit(name: str) -> None:
            for dep in self.get(name).requires:
                visit(dep)
            if name not in order:
                order.append(name)

        for name in names:
            visit(name)
        return order

    def plan(self, name: str) -> Plan:
        """The swaps ``name``'s edits make on the installed torch over its requirements'
        (none done), or why they do not apply, and which variant of each edited file is used."""
        variants: dict[str, str] = {}
        diffs: list[FileDiff] = []
        try:
            # an edit may build on lines a required overlay adds
            needs = self.with_requirements([name])
            paths = [p for r in self._overlays if r in needs for p in self.get(r).edit_files]
            selected = select_edits(paths)
            split = len(selected) - len(self.get(name).edit_files)
            required, diffs = selected[:split], selected[split:]
            for path, diff in zip(paths[split:], diffs):
                # per upstream file (where the newest release has it), the overlay's own
                # edit's (its parts' flags come after)
                variants.setdefault(FileDiff.read(path).upstream.removeprefix("torch/_inductor/"),
                                    variant_name(diff.path))
            # only the modules this overlay edits: the others' functions are not its swaps
            edited = {d.module for d in diffs}
            required = [d for d in required if d.module in edited]
            base = {s.target: _body(s.edited) for s in plan_swaps(_function_edits(required))}
            swaps = [s for s in plan_swaps(_function_edits(required + diffs))
                     if base.get(s.target) != _body(s.edited)]
            return Plan(swaps, None, variants, [d.path for d in diffs])
        except (EditError, ImportError, SyntaxError) as e:
            return Plan([], str(e), variants, [d.path for d in diffs])

    def check(self, name: str) -> str | None:
        """Why ``name``'s edits do not apply to the installed torch; None when they do."""
        return self.plan(name).reason

    # -- flags before the overlays -------------------------------------------
    def declare_flags(self, names: Iterable[str] | None = None, *, on: bool = True) -> list[str]:
        """Declare the flags of ``names`` (all when None) and their requirements, and turn
        them on (``on``), as enabling them will, or leave them off; no edit is applied.
        The activation hook calls this when ``torch._inductor.config`` is imported, so
        that a user can set or patch the flags before the first compile enables the
        overlays, whichever of them are enabled. Enabling adopts these entries as they
        are then: a value other than on was set by the user and is kept; a flag declared
        off is turned on. The entries stay declared, the flag off, while their overlay is
        not enabled. Returns the overlays whose flags this call declared."""
        import torch._inductor.config as inductor_config

        with self._lock:
            order = self.with_requirements(list(self._overlays) if names is None else list(names))
            # not yet declared, or declared off and now on
            order = [n for n in order if n not in self._flags
                     and (n not in self._early or on and n in self._early_off)]
            for name in order:
                if name not in self._early:
                    self._early[name] = [
                        entry for path in self.get(name).edit_files
                        if (diff := FileDiff.read(path)).declares_config
                        # the primary's declarations: its variants declare the same entries
                        for entry, (default, kind) in config_declarations(diff).items()
                        if _add_config(inductor_config, entry, default, kind)]
                self._kept.add(name)
                if on:
                    self._early_off.discard(name)
                    setattr(inductor_config, self.get(name).flag, True)
                else:
                    self._early_off.add(name)
            return order

    def drop_early_flags(self, names: Iterable[str] | None = None) -> None:
        """Retire the flags ``declare_flags`` declared for ``names`` (all when None) that
        no enable adopted (a refused overlay's): turned off, still declared."""
        with self._lock:
            for name in [n for n in self._early if names is None or n in names]:
                self._retire(name, self._early.pop(name))

    def _retire(self, name: str, entries: list[str]) -> None:
        """The config entries of an overlay that is not enabled (any longer): removed, as
        stock Inductor has no such entries, or, where the activation hook declared them,
        kept with the flag off."""
        import torch._inductor.config as inductor_config

        if name in self._kept:
            if entries:
                setattr(inductor_config, self.get(name).flag, False)
            self._early[name] = entries
            self._early_off.add(name)
            return
        self._early_off.discard(name)
        for entry in entries:
            _remove_config(inductor_config, entry)

    # -- enable / disable ----------------------------------------------------
    def enable(self, names: Iterable[str] | None = None) -> list[str]:
        """Enable overlays (all when ``names`` is None) and their requirements.

        Each overlay is all or nothing: an edit that does not apply refuses it (and what
        requires it) with the reason, and leaves the others as they were.
        """
        with self._lock:
            order = self.with_requirements(list(self._overlays) if names is None else list(names))
            # the new modules, importable under their upstream names from now on (not under
            # the kill switch: a torch patched by the series has its own)
            install_module_finder(self._overlays.values())
            for name in order:
                if name in self._enabled:
                    continue
                missing = [r for r in self.get(name).requires if r not in self._enabled]
                if missing:
                    reason = f"overlay {name!r} refused: it requires {missing[0]!r}, which is not enabled"
                    self._refused[name] = reason
                    raise OverlayError(reason)
                reason = self.check(name)
                if reason is not None:
                    reason = f"overlay {name!r} refused: {reason}"
                    self._refused[name] = reason
                    raise OverlayError(reason)
                previous = list(self._enabled)
                self._install(previous + [name])
                try:
                    self._import_modules(name)
                except Exception as e:
                    self._install(previous)
                    reason = (f"overlay {name!r} refused: its modules do not import: "
                              f"{type(e).__name__}: {e}")
                    self._refused[name] = reason
                    raise OverlayError(reason) from e
                self._refused.pop(name, None)
                log.debug("enabled overlay %s", name)
            return order

    def _import_modules(self, name: str) -> None:
        """Import the new modules of ``name`` (one that does not import on this torch
        refuses the overlay here, not in a compile), then those an ``__init__.py`` edit
        has its package import upstream (a template heuristic registers when imported)."""
        from . import _compat

        overlay = self.get(name)
        _compat.alias_moved_packages()
        _compat.provide_choices_registration()
        for module in overlay.modules:
            importlib.import_module(f"torch._inductor.{module}")
        for path in overlay.edit_files:
            if (diff := FileDiff.read(path)).imports_modules:
                for module in diff.imported_modules():
                    importlib.import_module(module)
        if overlay.choices:
            from torch._inductor.choices import registered_inductor_choices

            registered = dict(registered_inductor_choices())
            self._contributors.update({k: registered[k] for k in overlay.choices if k in registered})

    def disable(self, names: Iterable[str] | None = None) -> None:
        """Restore upstream for the named overlays (all when None) and their dependants,
        and remove their flags, those ``declare_flags`` declared included (those stay
        declared, off)."""
        with self._lock:
            targets = set(self._enabled + list(self._early) if names is None else names)
            grew = True
            while grew:
                dependants = {n for n in self._enabled + list(self._early)
                              if set(self._overlays[n].requires) & targets}
                grew = not dependants <= targets
                targets |= dependants
            self._install([n for n in self._enabled if n not in targets])
            self.drop_early_flags(targets)

    def _install(self, names: list[str]) -> None:
        """Make ``names`` the enabled set: flags first (the edited code reads them), then
        the edits, then the cache-key digest. A failure leaves the previous set in place."""
        import torch._inductor.config as inductor_config

        names = [n for n in self._overlays if n in names]  # series order
        paths = {n: self.get(n).edit_files for n in names}
        selected = iter(select_edits([p for n in names for p in paths[n]]))
        edits = {n: [next(selected) for _ in paths[n]] for n in names}
        diffs = [d for n in names for d in edits[n]]
        added: dict[str, list[str]] = {}
        try:
            # flags declared early are adopted after the swaps, with the value they have
            for name in names:
                if name not in self._flags and name not in self._early:
                    added[name] = []
                    for diff in edits[name]:
                        if diff.declares_config:
                            for entry, (default, kind) in config_declarations(diff).items():
                                if _add_config(inductor_config, entry, default, kind):
                                    added[name].append(entry)
            for swap in reversed(self._swaps):
                swap.restore()
            try:
                swaps = plan_swaps([d for d in diffs if not d.module_level])
            except BaseException:
                for swap in self._swaps:
                    swap.apply()
                raise
        except BaseException:
            for entries in added.values():
                for entry in entries:
                    _remove_config(inductor_config, entry)
            raise
        for swap in swaps:
            swap.apply()
        self._swaps = swaps
        for name in [n for n in self._flags if n not in names]:
            self._retire(name, self._flags.pop(name))
        self._flags.update(added)
        for name in added:
            setattr(inductor_config, self.get(name).flag, True)
        # declared on by declare_flags: left as they are, since any other value is the user's
        # (set, or patched for the region this enable runs in, before the first compile)
        for name in [n for n in names if n in self._early]:
            self._flags[name] = self._early.pop(name)
            if name in self._early_off:
                self._early_off.discard(name)
                setattr(inductor_config, self.get(name).flag, True)
        _remove_config(inductor_config, DIGEST_CONFIG)
        if names:
            _add_config(inductor_config, DIGEST_CONFIG, digest(names, diffs), str)
        self._enabled = list(names)
        self._sync_contributors(names)

    def _sync_contributors(self, names: list[str]) -> None:
        """The enabled overlays' InductorChoices contributors registered, the others' not."""
        if not self._contributors:
            return
        from torch._inductor import choices

        registered = dict(choices.registered_inductor_choices())
        for overlay in self._overlays.values():
            for key in overlay.choices:
                if key not in self._contributors:
                    continue
                if overlay.name in names and key not in registered:
                    choices.register_inductor_choices(key, self._contributors[key])
                elif overlay.name not in names and key in registered:
                    choices.unregister_inductor_choices(key)


def _function_edits(diffs: list[FileDiff]) -> list[FileDiff]:
    return [d for d in diffs if not d.module_level]


def _body(code: types.CodeType | str) -> tuple[Any, ...]:
    """What a compiled function does, whatever its line numbers (a template: its text)."""
    if isinstance(code, str):
        return (code,)
    consts = tuple(_body(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.co_code, consts, code.co_names


def digest(names: list[str], diffs: list[FileDiff]) -> str:
    """Hash of the enabled overlays' edits and new modules (with their data files)."""
    h = hashlib.sha256(repr(sorted(names)).encode())
    for diff in diffs:
        h.update(diff.text.encode())
    for path in sorted(OVERLAY_ROOT.rglob("*")):
        if path.suffix in (".py", ".jinja"):
            h.update(str(path.relative_to(OVERLAY_ROOT)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _add_config(config: Any, name: str, default: Any, kind: type) -> bool:
    """Declare ``config.name`` as config.py would; False if it exists already."""
    try:
        from torch.utils._config_module import _Config, _ConfigEntry

        entries = config._config
    except (ImportError, AttributeError) as e:  # private API: say what changed
        raise OverlayError(f"cannot declare torch._inductor.config.{name}: this torch's config "
                           f"module differs from torch 2.11's ({type(e).__name__}: {e})") from e
    if name in entries:
        return False
    declared = _Config(default=default, value_type=kind)
    # torch 2.14 keeps each value in a ContextVar named by the entry
    if "name" in inspect.signature(_ConfigEntry).parameters:
        entries[name] = _ConfigEntry(declared, name)
    else:
        entries[name] = _ConfigEntry(declared)
    _config_changed(config)
    return True


def _remove_config(config: Any, name: str) -> None:
    if config._config.pop(name, None) is not None:
        _config_changed(config)


def _config_changed(config: Any) -> None:
    """Drop what the config module cached of its entries (hash, exported dict)."""
    if hasattr(config, "_hash_dirty_var"):  # torch 2.14: per-context caches
        config._hash_dirty_var.set(True)
        config._get_dict_dirty_keys_var.set(None)  # None: recompute every key
    else:
        config._is_dirty = True


REGISTRY = Registry()
