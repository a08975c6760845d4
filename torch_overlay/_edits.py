"""Edits of upstream functions, kept as the unified diff itself and applied to the live code.

An edit is a ``.diff`` file beside the overlay path of the upstream file it changes
(``torch_overlay/_inductor/compile_fx.matmul_meta.diff`` edits
``torch/_inductor/compile_fx.py``): the very hunks the exported patch carries (a safety
net's, ``Overlay.safety_nets``, are applied at run time only). At run time
the hunks are applied to the installed module's source; every function (or method of a
top-level class) they touch is compiled again from the edited text against the module's
globals, and its ``__code__`` is swapped in place, so each reference to it (the lowerings
table, ``from ... import`` names, decorators' closures) runs the edited code. Restoring puts
the original code object back. A hunk whose context is not in the installed source is
drift: the edit is refused, naming the function and the torch version.

A Triton template's ``.jinja`` source is edited likewise: the live ``TritonTemplate``
objects built from the installed file render the edited text (``TemplateSwap``).

``config.py`` and a package's ``__init__.py`` are the files whose hunks are module-level:
the first declare the features' flags (``name: type = default``), installed into the live
``torch._inductor.config``; the second import the overlay's new modules of the package so
that they register, which the registry does when it enables the overlay.

Variants: ``<stem>.<overlay>.diff`` is made against the newest torch release the overlays
support (the one the exported series targets); the same edit made against an older
release whose source around it differs lies beside it as
``<stem>.<overlay>.torch-<major>.<minor>.diff``, named by the release it was made
against. ``select_edit`` takes the primary if its hunks apply to the installed source,
else the first variant that applies (newest release first): chosen by what applies,
never by version string.
"""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib
import inspect
import json
import linecache
import pathlib
import re
import sys
import textwrap
import types
from typing import Any, Iterator

PACKAGE_DIR = pathlib.Path(__file__).resolve().parent
OVERLAY_ROOT = PACKAGE_DIR / "_inductor"  # mirrors torch/_inductor
CONFIG_FILE = "torch/_inductor/config.py"


class EditError(RuntimeError):
    """An edit does not apply to the installed torch; the message says where and why."""


def torch_version() -> str:
    import torch

    return torch.__version__


@dataclasses.dataclass(frozen=True)
class Hunk:
    old_start: int  # 1-based line of the hunk in the file the diff was made against
    lines: tuple[str, ...]  # with their ' ', '-', '+' prefixes
    heading: str  # text after the second @@: the enclosing definition, as git writes it

    @property
    def old(self) -> list[str]:
        return [line[1:] for line in self.lines if line[0] in " -"]

    @property
    def new(self) -> list[str]:
        return [line[1:] for line in self.lines if line[0] in " +"]

    @property
    def added(self) -> list[str]:
        return [line[1:] for line in self.lines if line[0] == "+"]

    def changed_offsets(self) -> tuple[int, int]:
        """The first and last offset into ``old`` that the hunk removes or inserts before."""
        offsets, i = [], 0
        for line in self.lines:
            if line[0] == "-":
                offsets.append(i)
            elif line[0] == "+":
                offsets.append(i)  # an insertion sits between i - 1 and i
            if line[0] in " -":
                i += 1
        return min(offsets), max(offsets)


_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@ ?(.*)$")


@dataclasses.dataclass(frozen=True)
class FileDiff:
    """The hunks of one ``.diff`` file: one upstream file, one feature."""

    path: pathlib.Path  # the .diff file
    upstream: str  # e.g. torch/_inductor/kernel/mm.py
    hunks: tuple[Hunk, ...]
    text: str
    # a variant for a release that lacks this function: no hunks, nothing to edit there
    absent: str | None = None

    @classmethod
    def read(cls, path: pathlib.Path) -> "FileDiff":
        text = path.read_text()
        upstream, hunks, current, heading, start = None, [], None, "", 0
        absent = None
        for line in text.splitlines():
            if m := _HUNK_HEADER.match(line):
                if current:
                    hunks.append(Hunk(start, tuple(current), heading))
                start, heading, current = int(m.group(1)), m.group(2), []
            elif current is None:  # the file header, before the first hunk
                if line.startswith("+++ "):
                    upstream = line[4:].strip().removeprefix("b/")
                elif line.startswith("absent: "):
                    absent = line.removeprefix("absent: ").strip()
            elif line[:1] in (" ", "-", "+"):
                current.append(line)
            elif line == "":
                current.append(" ")  # an empty context line some editors strip the space of
        if current:
            hunks.append(Hunk(start, tuple(current), heading))
        if upstream is None or not (hunks or absent):
            raise EditError(f"{path}: not a unified diff of one upstream file")
        return cls(path, upstream, tuple(hunks), text, absent)

    @property
    def module(self) -> str:
        return module_of(self.upstream)

    @property
    def declares_config(self) -> bool:
        """The config.py diff: module-level flag declarations, not a function edit."""
        return self.upstream == CONFIG_FILE

    @property
    def imports_modules(self) -> bool:
        """A package ``__init__.py`` diff: the package imports the overlay's new modules so
        that they register (template heuristics); at run time the registry imports them."""
        return self.upstream.endswith("/__init__.py")

    def imported_modules(self) -> list[str]:
        """The modules the added ``from X import y`` lines import, or the names added to a
        ``from X import (...)`` list (opened in the hunk or its heading), by absolute name."""
        package = self.module.removesuffix(".__init__")

        def absolute(dots: str, base: str) -> str:
            if not dots:
                return base
            parts = package.split(".")[:len(package.split(".")) + 1 - len(dots)]  # "." = the package
            return ".".join(parts + ([base] if base else []))

        names = []
        for hunk in self.hunks:
            within = None  # the base of the parenthesized import list the line is in
            for line in [" " + hunk.heading, *hunk.lines]:
                text = line[1:]
                if m := re.match(r"\s*from\s+(\.*)([\w.]*)\s+import\s+\(\s*$", text):
                    within = absolute(*m.groups())
                elif m := re.match(r"\s*from\s+(\.*)([\w.]*)\s+import\s+([\w\s,]+)", text):
                    if line[0] == "+":
                        names += [f"{absolute(*m.groups()[:2])}.{n.strip()}"
                                  for n in m.group(3).split(",") if n.strip()]
                elif within is not None and text.strip().startswith(")"):
                    within = None
                elif within is not None and line[0] == "+":
                    names += [f"{within}.{n.strip()}" for n in text.split("#")[0].split(",")
                              if n.strip()]
        return names

    @property
    def template(self) -> bool:
        """A Triton template's jinja source, not a Python module."""
        return self.upstream.endswith(".jinja")

    @property
    def module_level(self) -> bool:
        """Hunks outside any function: not applied at run time (see the two above)."""
        return self.declares_config or self.imports_modules


def _find(lines: list[str], block: list[str], near: int) -> int:
    """Index where ``block`` occurs in ``lines``, the occurrence nearest ``near``; -1 if none."""
    hits = [i for i in range(len(lines) - len(block) + 1) if lines[i:i + len(block)] == block]
    return min(hits, key=lambda i: abs(i - near)) if hits else -1


def apply_hunks(source: str, diff: FileDiff) -> tuple[str, list[tuple[int, int]]]:
    """Apply the hunks to ``source`` (by context, at any offset, as patch does).

    Returns the edited text and, per hunk, the 1-based range of old lines it changes.
    """
    lines = source.splitlines()
    changed, shift = [], 0
    for hunk in diff.hunks:
        at = _find(lines, hunk.old, hunk.old_start - 1 + shift)
        if at < 0:
            where = hunk.heading.strip() or f"line {hunk.old_start}"
            raise EditError(
                f"{diff.path.name}: the hunk at {diff.upstream}:{hunk.old_start} ({where}) does "
                f"not apply to torch {torch_version()}: upstream changed that code")
        first, last = hunk.changed_offsets()
        # 1-based lines of the source before the edit (no earlier hunk's shift)
        changed.append((at - shift + first + 1, at - shift + last + 1))
        lines[at:at + len(hunk.old)] = hunk.new
        shift += len(hunk.new) - len(hunk.old)
    return "\n".join(lines) + "\n", changed


_VARIANT = re.compile(r"\.torch-(\d+)\.(\d+)\.diff$")


def variant_files(primary: pathlib.Path) -> list[pathlib.Path]:
    """The variants of the edit ``primary`` for older releases, newest release first."""
    stem = primary.name.removesuffix(".diff")
    found = []
    for path in primary.parent.glob(f"{stem}.torch-*.diff"):
        if m := _VARIANT.search(path.name[len(stem):]):
            found.append(((int(m.group(1)), int(m.group(2))), path))
    return [path for _, path in sorted(found, reverse=True)]


def variant_name(path: pathlib.Path) -> str:
    """``torch-2.11`` for a variant, ``primary`` for the edit made against the newest release."""
    m = _VARIANT.search(path.name)
    return f"torch-{m.group(1)}.{m.group(2)}" if m else "primary"


def installed_source(diff: FileDiff) -> str:
    """The source of the installed upstream module (or template) ``diff`` edits."""
    if diff.template:
        import torch

        return pathlib.Path(torch.__file__).parent.parent.joinpath(diff.upstream).read_text()
    return inspect.getsource(importlib.import_module(diff.module))


def select_edit(primary: pathlib.Path, sources: dict[str, str] | None = None) -> FileDiff:
    """The primary edit if its hunks apply to the installed torch (to ``sources[module]``,
    the module's text as earlier edits left it, where given), else the first variant
    (``variant_files``) that applies. Raises the primary's EditError (the hunk, function
    and torch version) when none does.

    A config.py edit only declares flags, an ``__init__.py`` edit only imports: where none
    of its variants' contexts is found the primary still serves (its hunks are not applied
    at run time).
    """
    candidates = [FileDiff.read(primary)] + [FileDiff.read(p) for p in variant_files(primary)]
    if candidates[0].imports_modules:  # the package may not exist in an older release
        return candidates[0]
    error = None
    for diff in candidates:
        try:
            # a variant may edit the file where an older release has it
            try:
                source = (sources or {}).get(diff.module) or installed_source(diff)
            except (ImportError, OSError) as e:
                raise EditError(f"{diff.path.name}: {diff.upstream} is not in torch "
                                f"{torch_version()} ({e})") from e
            if diff.absent is not None:
                _check_absent(source, diff)
            else:
                apply_hunks(source, diff)
            return diff
        except EditError as e:
            error = error or e
    if candidates[0].declares_config:
        return candidates[0]
    if len(candidates) > 1:
        others = ", ".join(d.path.name for d in candidates[1:])
        raise EditError(f"{error}; its variants for older releases do not apply either ({others})")
    raise error


def select_edits(paths: list[pathlib.Path]) -> list[FileDiff]:
    """``select_edit`` of each path in order, each against its module as the edits before
    it left it: an edit may build on lines an earlier one adds."""
    texts: dict[str, str] = {}
    diffs = []
    for path in paths:
        diff = select_edit(path, texts)
        if not diff.module_level and diff.absent is None:
            source = texts.get(diff.module) or installed_source(diff)
            texts[diff.module] = apply_hunks(source, diff)[0]
        diffs.append(diff)
    return diffs


def module_of(upstream: str) -> str:
    """``torch._inductor.kernel.mm`` of ``torch/_inductor/kernel/mm.py``."""
    return upstream.removesuffix(".py").replace("/", ".")


def _check_absent(source: str, diff: FileDiff) -> None:
    """A variant for releases without ``diff.absent`` (a function of the edited file, or
    ``torch/...py:name`` of another that the edit builds on) applies where it is not
    defined."""
    upstream, _, name = diff.absent.rpartition(":")
    if upstream:
        source = inspect.getsource(importlib.import_module(module_of(upstream)))
    if name in dict(_parse_definitions(source)):
        raise EditError(f"{diff.path.name}: {upstream or diff.upstream} defines {name} "
                        f"in torch {torch_version()}")


@dataclasses.dataclass(frozen=True)
class Definition:
    """A top-level function or a method of a top-level class, by its lines."""

    qualname: str
    name: str
    lineno: int  # of the ``def`` (decorators above it are not part of the body)
    end_lineno: int
    nested: tuple[tuple[str, int, int], ...]  # (name, first, last) of inner functions


_DEFINITIONS: dict[str, dict[str, Definition]] = {}


def definitions(source: str) -> dict[str, Definition]:
    """qualname -> ``Definition`` of ``source``; memoized in the process and on disk by the
    text's digest, as parsing Inductor's large modules is most of enabling's time."""
    key = hashlib.sha256(f"{sys.version_info[:2]}\0{source}".encode()).hexdigest()
    found = _DEFINITIONS.get(key)
    if found is None:
        path = _definitions_cache_dir() / f"defs-{key[:40]}.json"
        try:
            found = {d[0]: Definition(d[0], d[1], d[2], d[3], tuple(map(tuple, d[4])))
                     for d in json.loads(path.read_text())}
        except (OSError, ValueError, IndexError, TypeError):
            found = dict(_parse_definitions(source))
            _write_atomic(path, json.dumps([dataclasses.astuple(d) for d in found.values()]))
        _DEFINITIONS[key] = found
    return found


def _parse_definitions(source: str) -> Iterator[tuple[str, Definition]]:
    def define(qualname: str, node: ast.AST) -> tuple[str, Definition]:
        nested = tuple((inner.name, inner.lineno, inner.end_lineno) for inner in ast.walk(node)
                       if inner is not node
                       and isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)))
        return qualname, Definition(qualname, node.name, node.lineno, node.end_lineno, nested)

    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield define(node.name, node)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield define(f"{node.name}.{item.name}", item)


def _definitions_cache_dir() -> pathlib.Path:
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return pathlib.Path(cache_dir()) / "torch_overlay"


def _write_atomic(path: pathlib.Path, text: str) -> None:
    from torch._inductor.codecache import write_atomic

    try:  # a cache: a read-only or full disk only costs the next process a parse
        write_atomic(str(path), text, make_dirs=True)
    except OSError:
        pass


def _enclosing(defs: dict[str, Definition], first: int, last: int) -> str | None:
    """The function or method whose body holds lines first..last. A nested function is
    refused: the live closures made from it would keep their old code."""
    for qualname, d in defs.items():
        if d.lineno < first and last <= d.end_lineno + 1:
            for name, lo, hi in d.nested:
                if lo <= last and first <= hi:
                    raise EditError(f"{qualname}: the edit reaches the nested function "
                                    f"{name!r}, whose live closures would keep the old code")
            return qualname
    return None


def live_function(module: types.ModuleType, qualname: str) -> types.FunctionType:
    """The function object whose code runs for ``module.qualname``, under its decorators."""
    owner, name = module, qualname
    if "." in qualname:
        cls_name, name = qualname.split(".")
        owner = vars(module)[cls_name]
    obj = vars(owner)[name]
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    filename = inspect.getsourcefile(module)
    for _ in range(8):  # decorators that keep __wrapped__ (register_lowering, functools.wraps)
        code = getattr(obj, "__code__", None)
        # an edited function's code names the file it was edited from
        if (code is not None and code.co_name == name
                and code.co_filename.startswith(filename)):
            return obj
        obj = getattr(obj, "__wrapped__", None)
        if obj is None:
            break
    raise EditError(f"{module.__name__}.{qualname}: no function of that name defined in "
                    f"{filename}")


def compile_function(edited: str, node: Definition, original: types.FunctionType,
                     module: types.ModuleType, filename: str) -> types.CodeType:
    """The code object of the definition ``node`` of the ``edited`` module source.

    Compiled inside a factory that binds the original's free variables (``__class__`` of a
    method calling ``super()``, a decorator's closure), so the closure it is swapped under
    fits, and padded so that tracebacks give the line in the edited file.
    """
    lines = edited.splitlines()[node.lineno - 1:node.end_lineno]
    body = textwrap.indent(textwrap.dedent("\n".join(lines)), "    ")
    freevars = original.__code__.co_freevars
    header = ["def __torch_overlay_edit__():", *(f"    {v} = None" for v in freevars)]
    pad = max(0, node.lineno - 1 - len(header))
    source = "\n" * pad + "\n".join(header) + "\n" + body + f"\n    return {node.name}\n"
    namespace: dict[str, Any] = {}
    exec(compile(source, filename, "exec"), vars(module), namespace)
    code = namespace["__torch_overlay_edit__"]().__code__
    if code.co_freevars != freevars:
        raise EditError(f"{module.__name__}.{node.name}: the edit changes the free variables "
                        f"{freevars} -> {code.co_freevars}; it cannot replace the live code")
    return code


@dataclasses.dataclass
class Swap:
    """One live function whose code an edit replaced."""

    target: str  # torch._inductor.kernel.mm.tuned_mm
    function: types.FunctionType
    original: types.CodeType
    edited: types.CodeType

    def apply(self) -> None:
        self.function.__code__ = self.edited

    def restore(self) -> None:
        self.function.__code__ = self.original


def plan_swaps(diffs: list[FileDiff]) -> list[Swap | TemplateSwap]:
    """Swaps that realise ``diffs`` (function and template edits) on the installed torch;
    none done yet.

    Diffs of one module apply in the order given, each to the text the previous left, and
    every function any of them touches is compiled once from the final text. Raises
    EditError naming the function and torch version where a hunk does not apply, or where
    a hunk lies outside any function.
    """
    by_module: dict[str, list[FileDiff]] = {}
    for diff in diffs:
        by_module.setdefault(diff.module, []).append(diff)
    swaps: list[Swap | TemplateSwap] = []
    for upstream in [m for m in by_module if by_module[m][0].template]:
        swaps.append(template_swap(by_module.pop(upstream)))
    for module_name, module_diffs in by_module.items():
        module = importlib.import_module(module_name)
        edited = inspect.getsource(module)
        qualnames: list[str] = []
        for diff in module_diffs:
            before = definitions(edited)
            edited, changed = apply_hunks(edited, diff)
            for (first, last), hunk in zip(changed, diff.hunks):
                qualname = _enclosing(before, first, last)
                if qualname is None:
                    raise EditError(
                        f"{diff.path.name}: the hunk at {diff.upstream}:{hunk.old_start} changes "
                        "code outside a function; only function bodies are edited at run time")
                if qualname not in qualnames:
                    qualnames.append(qualname)
        names = "+".join(d.path.name for d in module_diffs)
        filename = f"{inspect.getsourcefile(module)} (edited by {names})"
        # tracebacks through the edited code show the edited lines
        linecache.cache[filename] = (len(edited), None, edited.splitlines(True), filename)
        new_defs = definitions(edited)
        for qualname in qualnames:
            function = live_function(module, qualname)
            code = compile_function(edited, new_defs[qualname], function, module, filename)
            swaps.append(Swap(f"{module_name}.{qualname}", function, function.__code__, code))
    return swaps


@dataclasses.dataclass
class TemplateSwap:
    """The live Triton templates built from one jinja file, rendering an edit of it."""

    target: str  # torch/_inductor/kernel/templates/triton_bmm.py.jinja
    templates: tuple[Any, ...]  # its TritonTemplate objects
    original: tuple[tuple[Any, str], ...]  # each one's jinja template and hash
    edited: str

    def apply(self) -> None:
        compiled = self.templates[0]._template_from_string(self.edited)
        # the hash keys Inductor's caches of the template's code
        self._use([(compiled, _sha256(self.edited))] * len(self.templates))

    def restore(self) -> None:
        self._use(self.original)

    def _use(self, states: Any) -> None:
        for template, (jinja, digest) in zip(self.templates, states):
            template.template, template._hash = jinja, digest
            template._generated_code_cache.cache_clear()


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def template_swap(diffs: list[FileDiff]) -> TemplateSwap:
    """The swap that makes the templates built from ``diffs[0].upstream`` render it as
    ``diffs`` edit it; none done yet. The modules beside its ``templates/`` folder that
    name the file (``load_kernel_template("triton_bmm")``) are imported first: they build
    its templates."""
    from torch._inductor.select_algorithm import TritonTemplate

    original = installed_source(diffs[0])
    edited = original
    for diff in diffs:
        edited = apply_hunks(edited, diff)[0]
    upstream = pathlib.PurePosixPath(diffs[0].upstream)
    stem = upstream.name.split(".")[0]
    package = upstream.parent.parent  # torch/_inductor/kernel
    folder = pathlib.Path(importlib.import_module(str(package).replace("/", ".")).__file__).parent
    for source in sorted(folder.glob("*.py")):
        if f'"{stem}"' in source.read_text():
            importlib.import_module(module_of(str(package / source.name)))
    # the edit's hash too: a plan made while it is applied
    hashes = {_sha256(original), _sha256(edited)}
    templates = tuple(t for t in TritonTemplate.all_templates.values() if t.src_hash in hashes)
    if not templates:
        raise EditError(f"{diffs[0].path.name}: no Triton template of torch {torch_version()} "
                        f"is built from {diffs[0].upstream}")
    return TemplateSwap(diffs[0].upstream, templates,
                        tuple((t.template, t._hash) for t in templates), edited)


def config_declarations(diff: FileDiff) -> dict[str, tuple[Any, type]]:
    """The flags a config.py diff declares: name -> (default, type)."""
    source = "\n".join(line for hunk in diff.hunks for line in hunk.added)
    namespace: dict[str, Any] = {}
    exec(compile(source, str(diff.path), "exec"), {}, namespace)
    annotations = namespace.pop("__annotations__", {})
    return {name: (value, annotations.get(name, type(value)))
            for name, value in namespace.items()}
