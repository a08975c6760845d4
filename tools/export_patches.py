#!/usr/bin/env python3
"""Export the overlays as a ``git format-patch`` series for an upstream PyTorch PR.

    python tools/export_patches.py               # write patches/ (series, pin)
    python tools/export_patches.py --check       # CI: the series applies, compiles,
                                                 # reproduces the goldens, is not stale
    python tools/export_patches.py --upstream PATH   # try the series on a pytorch checkout

One source of truth: everything in a patch is derived from the overlay code.

- New files: each module an ``Overlay`` declares in ``modules`` (and a kernel
  template next to it) at its upstream path (``torch_overlay/_inductor/X`` ->
  ``torch/_inductor/X``), ``torch_overlay._inductor.`` rewritten to
  ``torch._inductor.``, and the overlay declaration removed by AST: top-level
  statements that use ``REGISTRY`` / ``Overlay`` / ``Hook`` or import
  ``torch_overlay._registry``, then top-level assignments only those used. A
  function that asks the registry whether the overlay is on is kept with the body
  its ``# upstream: <expr>`` comment gives (``return <expr>``).
- Activation: from the same ``Hook`` declarations the registry patches with, one
  line ``<owner> = <module>.<build>(<owner>)`` per patching hook, appended to
  ``torch/_inductor/compile_fx.py`` (imported after everything the hooks touch);
  ``Hook.depends_on`` hooks generate nothing. Post-grad passes become call sites in
  ``fx_passes/post_grad.py``'s ``post_grad_passes``, just before the point where the
  runtime runs them (``config.post_grad_custom_pre_pass`` /
  ``post_grad_custom_post_pass``).
- Tests: ``test/test_<name>.py`` -> ``test/inductor/test_<name>.py`` and the expect
  files of its classes -> ``test/inductor/expect/``.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterable

REPO = pathlib.Path(__file__).resolve().parent.parent
PATCHES = REPO / "patches"
PACKAGE = REPO / "torch_overlay"
HOST = "torch/_inductor/compile_fx.py"  # where activation lines go
POST_GRAD = "torch/_inductor/fx_passes/post_grad.py"
PASS_ANCHORS = {
    "pre": "if post_grad_custom_pre_pass := config.post_grad_custom_pre_pass:",
    "post": "if post_grad_custom_post_pass := config.post_grad_custom_post_pass:",
}
DECLARATION_NAMES = {"REGISTRY", "Overlay", "Hook"}
# fixed identity and dates: the series is byte-for-byte reproducible
GIT_ENV = {
    "GIT_AUTHOR_NAME": "torch_overlay export",
    "GIT_AUTHOR_EMAIL": "torch-overlay@users.noreply.github.com",
    "GIT_COMMITTER_NAME": "torch_overlay export",
    "GIT_COMMITTER_EMAIL": "torch-overlay@users.noreply.github.com",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}
TEST_HARNESS_NOTE = (
    "The tests import torch_overlay.testing (a GPU-free CUDA codegen harness and the\n"
    "GoldenMixin expect-file helper): a test dependency of this series that upstream\n"
    "would replace with requires_gpu + run_and_get_code."
)


class ExportError(RuntimeError):
    pass


def git(cwd: pathlib.Path, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **GIT_ENV}
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, text=True, input=input,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if check and proc.returncode != 0:
        raise ExportError(f"git {' '.join(args)} failed in {cwd}:\n{proc.stdout}{proc.stderr}")
    return proc


# ---------------------------------------------------------------------------
# The overlays, from the registry


@dataclasses.dataclass
class OverlayExport:
    name: str
    purpose: str
    pr_body: str
    requires: tuple[str, ...]
    files: dict[str, str]          # upstream path -> content (new files)
    activation: list[str]          # lines for compile_fx.py
    imports: list[str]             # import lines the activation needs
    passes: dict[str, list[tuple[str, str]]]  # stage -> [(module, function)]
    tests: dict[str, str]          # upstream path -> content
    golden_ids: list[str]          # pytest node ids (repo-relative) of the golden tests


def load_registry():
    sys.path.insert(0, str(REPO))
    import torch_overlay
    from torch_overlay._registry import REGISTRY

    torch_overlay.load_overlays()
    return torch_overlay, REGISTRY


def ordered_names() -> list[str]:
    """Registry order (OVERLAY_MODULES) with each overlay after what it requires."""
    _, registry = load_registry()
    return registry.with_requirements(registry.names)


def upstream_path(module: str) -> str:
    prefix = "torch_overlay._inductor."
    if not module.startswith(prefix):
        raise ExportError(f"overlay module {module} is not under torch_overlay._inductor: "
                          "it has no upstream path")
    return "torch/_inductor/" + module[len(prefix):].replace(".", "/") + ".py"


def module_file(module: str) -> pathlib.Path:
    return REPO / (module.replace(".", "/") + ".py")


# -- the declaration, stripped by AST ------------------------------------------


def _names_used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _defined(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    return set()


def _is_registry_import(node: ast.stmt) -> bool:
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").endswith("_registry") and (
            node.level > 0 or (node.module or "").startswith("torch_overlay"))
    if isinstance(node, ast.Import):
        return any(a.name.startswith("torch_overlay._registry") for a in node.names)
    return False


def strip_declaration(source: str, filename: str) -> str:
    """The module without the overlay declaration (see the module docstring)."""
    tree = ast.parse(source, filename)
    lines = source.splitlines(keepends=True)
    body = tree.body
    removed: set[int] = set()
    replaced: dict[int, str] = {}
    for i, node in enumerate(body):
        if _is_registry_import(node):
            removed.add(i)
        elif _names_used(node) & DECLARATION_NAMES:
            upstream = None
            if isinstance(node, ast.FunctionDef):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Return):
                        m = re.search(r"#\s*upstream:\s*(.+?)\s*$", lines[sub.end_lineno - 1])
                        if m:
                            upstream = (sub, m.group(1))
            if upstream is not None:
                ret, expr = upstream
                indent = re.match(r"\s*", lines[ret.lineno - 1]).group(0)
                replaced[i] = (ret.lineno, ret.end_lineno, f"{indent}return {expr}\n")
            else:
                removed.add(i)
    # then data only the removed statements used (a table of upstream names, say);
    # functions stay: the activation lines call the hooks' build functions
    changed = True
    while changed:
        changed = False
        for i, node in enumerate(body):
            if i in removed or not isinstance(node, (ast.Assign, ast.AnnAssign)):
                continue
            names = _defined(node)
            used_by_removed = any(names & _names_used(body[j]) for j in removed)
            used_by_kept = any(names & _names_used(body[j]) for j in range(len(body))
                               if j != i and j not in removed)
            if names and used_by_removed and not used_by_kept:
                removed.add(i)
                changed = True
    # a removed name that kept code still uses cannot be exported
    kept_use = set()
    for i, node in enumerate(body):
        if i not in removed and i not in replaced:  # a replaced body no longer asks
            kept_use |= _names_used(node)
    for i in removed:
        missing = _defined(body[i]) & kept_use
        missing -= {n for j, b in enumerate(body) if j not in removed for n in _defined(b)}
        if missing:
            raise ExportError(f"{filename}: the declaration defines {sorted(missing)}, which code "
                              "that goes upstream uses; move it out of the declaration")
    out = list(lines)
    drop: set[int] = set()
    for i in removed:
        node = body[i]
        start = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])
        drop.update(range(start - 1, node.end_lineno))
    for i, (lo, hi, text) in replaced.items():
        out[lo - 1] = text
        drop.update(range(lo, hi))
    result = "".join(l for k, l in enumerate(out) if k not in drop)
    # comment-only section headers left dangling and runs of blank lines
    result = re.sub(r"\n(# -{10,}\n# Declaration\n)+", "\n", result)
    result = re.sub(r"\n{3,}", "\n\n\n", result).rstrip("\n") + "\n"
    ast.parse(result, filename)
    return result


def rewrite_imports(source: str, filename: str) -> str:
    source = source.replace("torch_overlay._inductor.", "torch._inductor.")
    tree = ast.parse(source, filename)
    for node in ast.walk(tree):
        bad = None
        if isinstance(node, ast.ImportFrom):
            if node.level == 0 and (node.module or "").startswith("torch_overlay"):
                bad = node.module
            elif node.level > 0:
                # the package it names: torch._inductor or below, else torch_overlay's own
                if len(pathlib.PurePosixPath(filename).parts) - node.level < 2:
                    bad = "." * node.level + (node.module or "")
        elif isinstance(node, ast.Import):
            bad = next((a.name for a in node.names if a.name.startswith("torch_overlay")), None)
        if bad:
            raise ExportError(f"{filename}:{node.lineno}: imports {bad} from torch_overlay outside "
                              "_inductor, which cannot go upstream")
    return source


def export_module(module: str) -> tuple[str, str]:
    path = upstream_path(module)
    source = module_file(module).read_text()
    return path, rewrite_imports(strip_declaration(source, path), path)


# -- activation, from the Hook declarations ------------------------------------


def _owner_expr(owner: str, imports: list[str]) -> str:
    import importlib

    parts = owner.split(".")
    for i in range(len(parts), 0, -1):
        mod = ".".join(parts[:i])
        try:
            importlib.import_module(mod)
        except ImportError:
            continue
        if upstream_file(mod) == HOST:
            return ".".join(parts[i:])  # a global of compile_fx itself
        line = f"import {mod}"
        if line not in imports:
            imports.append(line)
        return owner
    raise ExportError(f"cannot resolve owner {owner}")


def upstream_file(module: str) -> str:
    return module.replace(".", "/") + ".py"


def _value_expr(value: Any, hook: Any) -> str:
    if hook.key is not None and value is hook.key():
        return _key_expr(hook)
    raise ExportError(f"hook {hook.target}: build argument {value!r} has no source expression")


def _key_expr(hook: Any) -> str:
    import torch

    expr = f"torch.ops.{hook.key_repr}"
    obj = eval(expr, {"torch": torch})
    if obj is not hook.key():
        raise ExportError(f"hook {hook.target}: key_repr {hook.key_repr} is not its key")
    return expr


def _callable_name(fn: Any, hook: Any, alias: dict[str, str]) -> tuple[str, list[str]]:
    """(dotted name of the build function in the exported code, leading args)."""
    args: list[str] = []
    if isinstance(fn, functools.partial):
        if fn.keywords:
            raise ExportError(f"hook {hook.target}: keyword arguments of a partial build")
        args = [_value_expr(a, hook) for a in fn.args]
        fn = fn.func
    name, module = getattr(fn, "__qualname__", ""), getattr(fn, "__module__", "")
    if "<" in name or "." in name or module not in alias:
        raise ExportError(
            f"hook {hook.target}: build {name or fn!r} is not a module-level function of an "
            "overlay module (a lambda or closure cannot be named in the exported edit): make "
            "it one, or a functools.partial of one")
    return f"{alias[module]}.{name}", args


def activation(overlay: Any) -> tuple[list[str], list[str], dict[str, list[tuple[str, str]]]]:
    alias = {m: "_" + m.rsplit(".", 1)[1] for m in overlay.modules}
    imports: list[str] = []
    lines: list[str] = []
    for hook in overlay.hooks:
        if not hook.patches:
            continue  # Hook.depends_on: fingerprint only
        owner = _owner_expr(hook.owner, imports)
        target = f"{owner}[{_key_expr(hook)}]" if hook.key is not None else (
            f"{owner}.{hook.attr}" if owner else hook.attr)
        fn, args = _callable_name(hook.build, hook, alias)
        lines.append(f"{target} = {fn}({', '.join(args + [target])})")
    used = {a for a in alias.values() if any(l.split(" = ", 1)[1].startswith(a + ".") for l in lines)}
    for module, a in alias.items():
        if a in used:
            pkg, _, leaf = module.replace("torch_overlay._inductor.", "torch._inductor.").rpartition(".")
            imports.insert(0, f"from {pkg} import {leaf} as {a}")
    passes: dict[str, list[tuple[str, str]]] = {"pre": [], "post": []}
    for stage, field in (("pre", "post_grad_pre_passes"), ("post", "post_grad_post_passes")):
        for fn in getattr(overlay, field):
            if fn.__module__ not in alias or "." in fn.__qualname__ or "<" in fn.__qualname__:
                raise ExportError(f"overlay {overlay.name}: pass {fn!r} is not a module-level "
                                  "function of an overlay module")
            passes[stage].append((fn.__module__.replace("torch_overlay._inductor.", "torch._inductor."),
                                  fn.__qualname__))
    return imports, lines, passes


# -- tests ---------------------------------------------------------------------


def overlay_tests(name: str) -> tuple[dict[str, str], list[str]]:
    test = REPO / "test" / f"test_{name}.py"
    if not test.exists():
        raise ExportError(f"overlay {name}: no test file {test.relative_to(REPO)}")
    tree = ast.parse(test.read_text())
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    files = {f"test/inductor/test_{name}.py": test.read_text()}
    golden: list[str] = []
    for expect in sorted((REPO / "test" / "expect").glob("*.expect")):
        cls, _, rest = expect.name.partition(".")
        if cls in classes:
            # FX graph comments name the overlay's module: the same mechanical rewrite
            files[f"test/inductor/expect/{expect.name}"] = expect.read_text().replace(
                "torch_overlay._inductor.", "torch._inductor.")
            test_name = rest[: -len(".expect")].split("-")[0]
            node = f"test/inductor/test_{name}.py::{cls}::{test_name}"
            if node not in golden:
                golden.append(node)
    return files, golden


def collect() -> list[OverlayExport]:
    _, registry = load_registry()
    out = []
    for name in ordered_names():
        overlay = registry.get(name)
        files: dict[str, str] = {}
        for module in overlay.modules:
            path, text = export_module(module)
            files[path] = text
            # a kernel template the module loads by name (load_template("<stem>", ...))
            templates = module_file(module).parent / "templates"
            for tpl in sorted(templates.glob("*.jinja")) if templates.is_dir() else ():
                stem = tpl.name.split(".")[0]
                if re.search(rf"['\"]{stem}['\"]", module_file(module).read_text()):
                    files[str(pathlib.PurePosixPath(path).parent / "templates" / tpl.name)] = tpl.read_text()
        imports, lines, passes = activation(overlay)
        tests, golden = overlay_tests(name)
        out.append(OverlayExport(name, overlay.purpose, overlay.pr_body, overlay.requires, files,
                                 lines, imports, passes, tests, golden))
    return out


# ---------------------------------------------------------------------------
# Trees and the series


def torch_info() -> dict[str, str]:
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "missing"
    return {"torch": torch.__version__, "git_version": torch.version.git_version,
            "triton": triton_version, "root": str(pathlib.Path(torch.__file__).resolve().parent)}


def pristine_tree(dest: pathlib.Path) -> pathlib.Path:
    """torch/_inductor/**/*.py and *.jinja of the installed torch, committed in a git repo."""
    info = torch_info()
    src = pathlib.Path(info["root"]) / "_inductor"
    for path in sorted(src.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".jinja") and "__pycache__" not in path.parts:
            target = dest / "torch" / "_inductor" / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", f"pristine torch {info['torch']} ({info['git_version']})")
    return dest


def _insert_pass_calls(text: str, overlay: OverlayExport) -> str:
    for stage, calls in overlay.passes.items():
        if not calls:
            continue
        anchor = PASS_ANCHORS[stage]
        if text.count(anchor) != 1:
            raise ExportError(f"{POST_GRAD}: the anchor {anchor!r} is not there exactly once")
        at = text.index(anchor)
        line_start = text.rindex("\n", 0, at) + 1
        indent = text[line_start:at]
        block = [f"{indent}# {overlay.name}: {overlay.purpose}"]
        for module, fn in calls:
            block.append(f"{indent}from {module} import {fn}")
            block.append("")
            block.append(f'{indent}GraphTransformObserver(gm, "{fn}").apply_graph_pass({fn})')
        text = text[:line_start] + "\n".join(block) + "\n\n" + text[line_start:]
    return text


def _append_activation(text: str, overlay: OverlayExport) -> str:
    if not overlay.activation:
        return text
    block = ["", "",
             f"# {overlay.name}: {overlay.purpose}",
             *(f"{line}  # noqa: E402" for line in overlay.imports),
             "",
             *overlay.activation]
    return text.rstrip("\n") + "\n" + "\n".join(block) + "\n"


def commit_message(overlay: OverlayExport, info: dict[str, str]) -> str:
    body = overlay.pr_body.strip() or "(no pr_body declared for this overlay)"
    parts = [f"[inductor] {overlay.name}: {overlay.purpose}", "", body, ""]
    if overlay.requires:
        parts += [f"Requires: {', '.join(overlay.requires)} (earlier in this series).", ""]
    parts += ["New files: " + ", ".join(sorted(overlay.files)) + ".",
              "Activation: " + (f"{len(overlay.activation)} line(s) at the end of {HOST}"
                                if overlay.activation else "none in compile_fx.py")
              + ("; call sites in post_grad_passes" if any(overlay.passes.values()) else "")
              + ".", "",
              TEST_HARNESS_NOTE, "",
              f"Exported by tools/export_patches.py from torch_overlay, against torch "
              f"{info['torch']} ({info['git_version']})."]
    return "\n".join(parts) + "\n"


def build_series(out_dir: pathlib.Path, work: pathlib.Path) -> list[str]:
    """Write the series (and pin) into ``out_dir``; ``work`` is scratch space."""
    info = torch_info()
    overlays = collect()
    repo = pristine_tree(work / "tree")
    for overlay in overlays:
        for path, text in {**overlay.files, **overlay.tests}.items():
            target = repo / path
            if target.exists():
                raise ExportError(f"overlay {overlay.name}: {path} exists upstream; an overlay "
                                  "module must be a new file")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        host = repo / HOST
        host.write_text(_append_activation(host.read_text(), overlay))
        post_grad = repo / POST_GRAD
        post_grad.write_text(_insert_pass_calls(post_grad.read_text(), overlay))
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-F", "-", input=commit_message(overlay, info))
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.patch"):
        old.unlink()
    proc = git(repo, "format-patch", "-q", "--zero-commit", "--no-signature", "--no-numbered",
               "-o", str(out_dir), "HEAD~%d" % len(overlays))
    names = sorted(p.name for p in out_dir.glob("*.patch"))
    (out_dir / "series").write_text("".join(n + "\n" for n in names))
    (out_dir / "UPSTREAM_PIN").write_text(
        f"torch {info['torch']}\n"
        f"git_version {info['git_version']}\n"
        f"triton {info['triton']}\n"
        "# the series applies to pytorch/pytorch at git_version (torch/_inductor as installed)\n")
    return names


# ---------------------------------------------------------------------------
# Staleness


_VOLATILE = re.compile(r"^(From [0-9a-f]{40} .*|Date: .*)$", re.M)


def normalized(text: str) -> str:
    return _VOLATILE.sub("", text)


def stale(patches: pathlib.Path, fresh: pathlib.Path) -> list[str]:
    """Differences between the committed series and a fresh export ([] when none)."""
    problems = []
    names = lambda d: sorted(p.name for p in d.iterdir() if p.name != "README.md") if d.exists() else []
    have, want = names(patches), names(fresh)
    for n in sorted(set(want) - set(have)):
        problems.append(f"missing {n}")
    for n in sorted(set(have) - set(want)):
        problems.append(f"extra {n}")
    for n in sorted(set(have) & set(want)):
        if normalized((patches / n).read_text()) != normalized((fresh / n).read_text()):
            problems.append(f"differs: {n}")
    return problems


# ---------------------------------------------------------------------------
# --check


def apply_series(repo: pathlib.Path, patches: pathlib.Path, *, three_way: bool = False) -> list[str]:
    """``git am`` each patch of the series; ExportError naming the patch and hunk on failure."""
    names = [l.strip() for l in (patches / "series").read_text().splitlines() if l.strip()]
    for name in names:
        patch = patches / name
        check = git(repo, "apply", "--check", "-v", str(patch), check=False)
        if check.returncode != 0:
            detail = check.stderr.strip()
            if three_way:
                am = git(repo, "am", "-q", "--3way", str(patch), check=False)
                if am.returncode == 0:
                    continue
                git(repo, "am", "--abort", check=False)
                detail += "\n" + am.stdout + am.stderr
            raise ExportError(f"patch {name} does not apply:\n{_hunk_report(detail)}")
        git(repo, "am", "-q", str(patch))
    return names


def _hunk_report(git_output: str) -> str:
    lines = []
    for line in git_output.splitlines():
        if re.search(r"error|patch failed|Hunk|does not apply|while searching|Checking patch|"
                     r"already exists|No such file|conflict|CONFLICT", line, re.I):
            lines.append("  " + line)
    return "\n".join(lines) or git_output


def patched_torch(tree: pathlib.Path, changed: Iterable[str], dest: pathlib.Path) -> pathlib.Path:
    """``dest/torch``: the installed torch's entries as symlinks, the changed files real."""
    root = pathlib.Path(torch_info()["root"])
    changed = [pathlib.PurePosixPath(c) for c in changed if c.startswith("torch/")]
    rel = {pathlib.PurePosixPath(*c.parts[1:]) for c in changed}
    ancestors = {p for c in rel for p in c.parents if str(p) != "."}

    def build(src: pathlib.Path, dst: pathlib.Path, prefix: pathlib.PurePosixPath) -> None:
        dst.mkdir(parents=True, exist_ok=True)
        names = {p.name for p in src.iterdir()} if src.is_dir() else set()
        names |= {c.parts[len(prefix.parts)] for c in rel if c.parts[: len(prefix.parts)] == prefix.parts
                  and len(c.parts) > len(prefix.parts)}
        for name in sorted(names):
            r = prefix / name
            if r in rel:
                shutil.copyfile(tree / "torch" / r, dst / name)
            elif r in ancestors:
                build(src / name, dst / name, r)
            elif name != "__pycache__":
                os.symlink(src / name, dst / name)

    build(root, dest / "torch", pathlib.PurePosixPath())
    return dest


def run_goldens(pythonpath: pathlib.Path, node_ids: list[str], cache: pathlib.Path,
                tree: pathlib.Path = REPO) -> tuple[bool, str]:
    """The upstream-shaped tests of the patched tree (test/inductor/), against its goldens."""
    env = dict(os.environ)
    env.update(TORCH_OVERLAY_DISABLE="1", PYTHONPATH=os.pathsep.join(
        [str(pythonpath), str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])),
        TORCHINDUCTOR_CACHE_DIR=str(cache), PYTHONDONTWRITEBYTECODE="1")
    env.pop("EXPECTTEST_ACCEPT", None)
    probe = subprocess.run(
        [sys.executable, "-c", "import torch._inductor, torch._inductor.compile_fx; print(torch._inductor.__file__)"],
        cwd=REPO, env=env, text=True, capture_output=True)
    where = probe.stdout.strip()
    if probe.returncode != 0 or not where.startswith(str(pythonpath)):
        return False, f"the patched torch does not import from {pythonpath}: {where}\n{probe.stderr[-3000:]}"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--show-capture=no", "--tb=short", "--rootdir", str(tree), *node_ids],
                          cwd=tree, env=env, text=True, capture_output=True)
    return proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]


def check(run_tests: bool = True) -> int:
    t0 = time.time()
    if not (PATCHES / "series").exists():
        print("patches/series missing: run `python tools/export_patches.py`", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="export_check_") as tmp:
        tmp = pathlib.Path(tmp)
        # 1. stale?
        build_series(tmp / "fresh", tmp / "work")
        problems = stale(PATCHES, tmp / "fresh")
        if problems:
            print("patches/ is stale against the overlay code (" + "; ".join(problems) + "): run "
                  "`python tools/export_patches.py` and commit patches/", file=sys.stderr)
            return 1
        print(f"[check] patches/ is up to date ({time.time() - t0:.0f}s)")
        # 2. apply the committed series to a pristine tree, one prefix per overlay
        tree = pristine_tree(tmp / "pristine")
        overlays = collect()
        names = [l.strip() for l in (PATCHES / "series").read_text().splitlines() if l.strip()]
        if len(names) != len(overlays):
            print("patches/series does not have one patch per overlay", file=sys.stderr)
            return 1
        ok = True
        for i, (name, overlay) in enumerate(zip(names, overlays)):
            try:
                single = tmp / f"one_{i}"
                single.mkdir()
                shutil.copyfile(PATCHES / name, single / name)
                (single / "series").write_text(name + "\n")
                apply_series(tree, single)
            except ExportError as e:
                print(str(e), file=sys.stderr)
                return 1
            comp = subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "torch")],
                                  capture_output=True, text=True)
            if comp.returncode != 0:
                print(f"after {name}: the patched sources do not byte-compile:\n{comp.stdout}{comp.stderr}",
                      file=sys.stderr)
                return 1
            print(f"[check] {name} applies and byte-compiles ({time.time() - t0:.0f}s)")
            if not run_tests:
                continue
            changed = git(tree, "diff", "--name-only", "HEAD~%d" % (i + 1), "HEAD").stdout.split()
            site = patched_torch(tree, changed, tmp / f"site_{i}")
            passed, output = run_goldens(site, overlay.golden_ids, tmp / f"cache_{i}", tree)
            status = "reproduced" if passed else "FAILED"
            print(f"[check] goldens of {overlay.name} against patches 1-{i + 1}, overlays off "
                  f"(TORCH_OVERLAY_DISABLE=1): {len(overlay.golden_ids)} tests {status} "
                  f"({time.time() - t0:.0f}s)")
            if not passed:
                print(output, file=sys.stderr)
                ok = False
    if ok:
        print(f"[check] OK in {time.time() - t0:.0f}s")
    return 0 if ok else 1


# ---------------------------------------------------------------------------
# --upstream


def try_upstream(path: pathlib.Path) -> int:
    path = path.resolve()
    if git(path, "rev-parse", "--git-dir", check=False).returncode != 0:
        print(f"{path} is not a git checkout", file=sys.stderr)
        return 2
    head = git(path, "rev-parse", "HEAD").stdout.strip()
    names = [l.strip() for l in (PATCHES / "series").read_text().splitlines() if l.strip()]
    failures = 0
    with tempfile.TemporaryDirectory(prefix="export_upstream_") as tmp:
        work = pathlib.Path(tmp) / "wt"
        # a detached scratch worktree: the user's checkout and branches are not touched
        git(path, "worktree", "add", "-q", "--detach", str(work), head)
        try:
            print(f"series against {path} at {head[:12]}:")
            for name in names:
                patch = PATCHES / name
                proc = git(work, "apply", "--check", "-v", str(patch), check=False)
                if proc.returncode == 0:
                    git(work, "am", "-q", str(patch))
                    print(f"  {name}: applies")
                    continue
                am = git(work, "am", "-q", "--3way", str(patch), check=False)
                if am.returncode == 0:
                    print(f"  {name}: applies with a 3-way merge (context moved upstream)")
                    continue
                git(work, "am", "--abort", check=False)
                failures += 1
                print(f"  {name}: DOES NOT APPLY\n{_hunk_report(proc.stderr + am.stdout + am.stderr)}")
                # later patches are tried on top of what applied so far
        finally:
            git(path, "worktree", "remove", "--force", str(work), check=False)
            git(path, "worktree", "prune", check=False)
    return 1 if failures else 0


# ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="fail if patches/ is stale, does not apply, compile or reproduce the goldens")
    parser.add_argument("--no-tests", action="store_true", help="with --check: skip the golden run")
    parser.add_argument("--upstream", type=pathlib.Path, metavar="PATH",
                        help="report how the series applies to a pytorch checkout (left untouched)")
    parser.add_argument("--out", type=pathlib.Path, default=PATCHES, help="output directory")
    args = parser.parse_args(argv)
    try:
        if args.check:
            return check(run_tests=not args.no_tests)
        if args.upstream:
            return try_upstream(args.upstream)
        with tempfile.TemporaryDirectory(prefix="export_") as tmp:
            names = build_series(args.out, pathlib.Path(tmp))
        for n in names:
            print(args.out / n)
        return 0
    except ExportError as e:
        print(f"export_patches: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
