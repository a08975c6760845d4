"""Overlay registry: declared units of runtime change to ``torch._inductor``.

An ``Overlay`` names the upstream objects it replaces (``Hook``s) and the
fingerprint of each one's upstream source on every torch version it was validated
on. Enabling is atomic and idempotent; disabling puts back the very objects that
were there before. A torch whose upstream source differs is refused unless forced.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import inspect
import logging
import threading
from typing import Any, Callable, Iterable

log = logging.getLogger("torch_overlay")


class OverlayError(RuntimeError):
    """An overlay could not be enabled; the message names the overlay and target."""


@dataclasses.dataclass(frozen=True)
class Hook:
    """Set ``owner.attr`` (or ``owner[key]``) to ``build(original)`` while enabled.

    ``owner`` is a dotted path to a module, class or mapping. ``key`` selects an
    item of a mapping (the lowerings table) instead of an attribute; ``key_repr``
    names it in messages. ``fingerprint`` is the dotted path of the upstream
    function whose source this hook depends on (default: the replaced object).
    """

    owner: str
    attr: str | None = None
    # None: patch nothing, only fingerprint upstream code the overlay relies on
    build: Callable[[Any], Any] | None = dataclasses.field(default=None, compare=False)
    key: Callable[[], Any] | None = dataclasses.field(default=None, compare=False)
    key_repr: str | None = None
    fingerprint: str | None = None

    @classmethod
    def depends_on(cls, path: str) -> "Hook":
        """No patch: drift in the upstream object at ``path`` refuses the overlay like
        drift in a patched one."""
        owner, attr = path.rsplit(".", 1)
        return cls(owner=owner, attr=attr)

    @property
    def patches(self) -> bool:
        return self.build is not None

    @property
    def target(self) -> str:
        if self.key is not None:
            return f"{self.owner}[{self.key_repr}]"
        return f"{self.owner}.{self.attr}"

    def resolve_owner(self) -> Any:
        return resolve(self.owner)

    def get(self) -> Any:
        owner = self.resolve_owner()
        if self.key is not None:
            return owner[self.key()]
        return getattr(owner, self.attr)

    def own(self) -> bool:
        """Whether the owner holds the target itself (not through a base class)."""
        owner = self.resolve_owner()
        if self.key is not None:
            return self.key() in owner
        return self.attr in vars(owner)

    def set(self, value: Any) -> None:
        owner = self.resolve_owner()
        if self.key is not None:
            owner[self.key()] = value
        else:
            setattr(owner, self.attr, value)

    def restore(self, original: Any, was_own: bool) -> None:
        if was_own:
            self.set(original)
        elif self.key is not None:
            del self.resolve_owner()[self.key()]
        else:  # it was inherited: our patch must not stay as a shadowing entry
            delattr(self.resolve_owner(), self.attr)

    def upstream_source(self) -> str:
        obj = resolve(self.fingerprint) if self.fingerprint else self.get()
        return source_of(obj)


@dataclasses.dataclass(frozen=True)
class Overlay:
    name: str
    purpose: str
    hooks: tuple[Hook, ...]
    # torch version -> {hook target: fingerprint of its upstream source}
    validated: dict[str, dict[str, str]]
    requires: tuple[str, ...] = ()
    # modules whose source is the overlay (cache key, export)
    modules: tuple[str, ...] = ()
    # graph passes run from Inductor's post-grad custom pass hooks
    post_grad_pre_passes: tuple[Callable[[Any], None], ...] = ()
    post_grad_post_passes: tuple[Callable[[Any], None], ...] = ()
    # motivation and measured figures: the body of the exported upstream patch
    # (tools/export_patches.py); figures only from BENCHMARKS.md / bench_results
    pr_body: str = ""


def resolve(path: str) -> Any:
    """Import the longest module prefix of ``path`` and getattr the rest."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(path)


def source_of(obj: Any) -> str:
    obj = inspect.unwrap(obj) if callable(obj) else obj
    try:
        return inspect.getsource(obj)
    except (TypeError, OSError):
        return repr(obj)


def fingerprint(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def torch_version() -> str:
    import torch

    return torch.__version__.split("+")[0]


@dataclasses.dataclass
class FingerprintCheck:
    target: str
    expected: str | None  # None: this torch version was never validated
    actual: str

    @property
    def ok(self) -> bool:
        return self.expected == self.actual


class Registry:
    def __init__(self) -> None:
        self._overlays: dict[str, Overlay] = {}
        # name -> [(hook, original object, owner held it itself)] of enabled overlays
        self._active: dict[str, list[tuple[Hook, Any, bool]]] = {}
        self._refused: dict[str, str] = {}
        self._pass_originals: dict[str, Any] = {}
        self._lock = threading.RLock()

    # -- declaration ---------------------------------------------------------
    def register(self, overlay: Overlay) -> Overlay:
        """Declare an overlay; returns the registered one. A module imported again
        (importlib.reload) gets its first declaration back: that one may be enabled."""
        known = self._overlays.get(overlay.name)
        if known is not None and known is not overlay:
            if known.modules[:1] == overlay.modules[:1] and overlay.modules:
                return known
            raise OverlayError(f"overlay {overlay.name!r} is declared twice")
        self._overlays[overlay.name] = overlay
        return overlay

    def order_by_modules(self, modules: Iterable[str]) -> None:
        """List overlays in the order of their declaring modules (OVERLAY_MODULES), not in
        the order something happened to import them; others keep theirs, after."""
        rank = {module: i for i, module in enumerate(modules)}
        last = len(rank)
        ordered = sorted(self._overlays.values(),
                         key=lambda o: rank.get(o.modules[0] if o.modules else "", last))
        self._overlays = {o.name: o for o in ordered}

    def unregister(self, name: str) -> None:
        self.disable([name])
        self._overlays.pop(name, None)
        self._refused.pop(name, None)

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
        return list(self._active)

    def refused(self) -> dict[str, str]:
        return dict(self._refused)

    # -- checks --------------------------------------------------------------
    def check(self, name: str) -> list[FingerprintCheck]:
        overlay = self.get(name)
        version = torch_version()
        expected = overlay.validated.get(version, {})
        checks = []
        for hook in overlay.hooks:
            try:
                actual = fingerprint(hook.upstream_source())
            except Exception as e:  # upstream object missing: that is drift too
                actual = f"missing ({type(e).__name__}: {e})"
            checks.append(FingerprintCheck(hook.target, expected.get(hook.target), actual))
        return checks

    # -- enable / disable ----------------------------------------------------
    def enable(self, names: Iterable[str] | None = None, *, force: bool = False) -> list[str]:
        """Enable overlays (all when ``names`` is None) and their requirements.

        Each overlay is all-or-nothing: if any hook fails, the hooks it already set
        are restored and OverlayError names the target. Enabling twice is a no-op.
        """
        with self._lock:
            order = self.with_requirements(list(self._overlays) if names is None else list(names))
            for name in order:
                if name not in self._active:
                    self._enable_one(self.get(name), force=force)
            return order

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

    def _enable_one(self, overlay: Overlay, *, force: bool) -> None:
        drift = [c for c in self.check(overlay.name) if not c.ok]
        if drift and not force:
            c = drift[0]
            versions = ", ".join(sorted(overlay.validated)) or "none"
            reason = (
                f"overlay {overlay.name!r} refused: upstream {c.target} on torch "
                f"{torch_version()} has fingerprint {c.actual}, "
                + (f"validated {c.expected}" if c.expected else "not validated on this version")
                + f" (validated torch versions: {versions}); pass force=True "
                "(TORCH_OVERLAY_FORCE=1) to enable it anyway"
            )
            self._refused[overlay.name] = reason
            raise OverlayError(reason)
        done: list[tuple[Hook, Any, bool]] = []
        try:
            for hook in overlay.hooks:
                if not hook.patches:
                    continue
                try:
                    original, was_own = hook.get(), hook.own()
                    hook.set(hook.build(original))
                except Exception as e:
                    raise OverlayError(
                        f"overlay {overlay.name!r}: failed to patch {hook.target}: "
                        f"{type(e).__name__}: {e}"
                    ) from e
                done.append((hook, original, was_own))
        except BaseException:
            for hook, original, was_own in reversed(done):
                hook.restore(original, was_own)
            raise
        self._refused.pop(overlay.name, None)
        self._active[overlay.name] = done
        self._sync_pass_hooks()
        log.debug("enabled overlay %s (%d hooks)", overlay.name, len(done))

    def disable(self, names: Iterable[str] | None = None) -> None:
        """Restore the original objects (all enabled overlays when ``names`` is None)."""
        with self._lock:
            targets = set(self._active if names is None else names)
            # an overlay goes with anything that requires it
            grew = True
            while grew:
                dependants = {n for n in self._active if set(self._overlays[n].requires) & targets}
                grew = not dependants <= targets
                targets |= dependants
            for name in reversed(list(self._active)):  # undo in reverse enable order
                if name in targets:
                    for hook, original, was_own in reversed(self._active.pop(name)):
                        hook.restore(original, was_own)
                    log.debug("disabled overlay %s", name)
            self._sync_pass_hooks()

    # -- Inductor's custom pass hooks: overlay graph passes and the cache key --
    _PASS_HOOKS = (("pre", "post_grad_custom_pre_pass"), ("post", "post_grad_custom_post_pass"))

    def _sync_pass_hooks(self) -> None:
        import torch._inductor.config as inductor_config

        from ._passes import OverlayGraphPass

        if self._active and not self._pass_originals:
            for stage, attr in self._PASS_HOOKS:
                original = getattr(inductor_config, attr)
                self._pass_originals[attr] = original
                setattr(inductor_config, attr,
                        OverlayGraphPass(stage, original))
        elif not self._active and self._pass_originals:
            for _, attr in self._PASS_HOOKS:
                setattr(inductor_config, attr, self._pass_originals.pop(attr))

    def active_passes(self, stage: str) -> list[Callable[[Any], None]]:
        field = "post_grad_pre_passes" if stage == "pre" else "post_grad_post_passes"
        return [p for name in self._active for p in getattr(self._overlays[name], field)]


REGISTRY = Registry()
