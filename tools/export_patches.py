#!/usr/bin/env python3
"""Export the overlays as a ``git format-patch`` series for an upstream PyTorch PR.

    python tools/export_patches.py               # write patches/ (series, pin)
    python tools/export_patches.py --check       # CI: not stale, applies, compiles, fit for
                                                 # upstream, tests pass patched, fail pristine
    python tools/export_patches.py --show torch/_inductor/kernel/mm_tensorcore.py --after 5
    python tools/export_patches.py --rebase-parts [FILE ...]   # rewrite series/ from FILE

CONTRIBUTING.md ("The flow of a change", steps 4-6, and "Declaring an overlay") says what
a patch holds and what each step checks.
"""
from __future__ import annotations

import argparse
import ast
import collections
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
from typing import Iterable

REPO = pathlib.Path(__file__).resolve().parent.parent
PATCHES = REPO / "patches"
PACKAGE = REPO / "torch_overlay"
OVERLAY_ROOT = PACKAGE / "_inductor"  # mirrors torch/_inductor
LOGGING_EDITS = PACKAGE / "_logging"  # edits of torch/_logging: the log artifacts
SERIES = REPO / "series"  # the parts' edits of files the series adds: read only here
CONFIG = "torch/_inductor/config.py"
GENERATED = ("series", "UPSTREAM_PIN")  # besides *.patch; patches/*.md are inputs
# no user or system git config: the series is reproducible (its patches' authors and
# dates are the project's, ``authorship``; the scratch commits' are these)
GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "scratch", "GIT_AUTHOR_EMAIL": "scratch@localhost",
    "GIT_COMMITTER_NAME": "scratch", "GIT_COMMITTER_EMAIL": "scratch@localhost",
}
# an edit's variant for an older torch (<stem>.<overlay>.torch-2.11.diff): never exported
VARIANT = re.compile(r"\.torch-\d+\.\d+\.diff$")
FORBIDDEN = "torch_overlay"  # no added line of the series may name it


class ExportError(RuntimeError):
    pass


def git(cwd: pathlib.Path, *args: str, check: bool = True, input: str | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **GIT_ENV, **(env or {})}
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, text=True, input=input,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if check and proc.returncode != 0:
        raise ExportError(f"git {' '.join(args)} failed in {cwd}:\n{proc.stdout}{proc.stderr}")
    return proc


def commit_all(repo: pathlib.Path, *args: str, input: str | None = None,
               env: dict[str, str] | None = None) -> str:
    """Commit every change in ``repo`` (``args``: the message's options); its hash."""
    git(repo, "add", "-A")
    git(repo, "commit", "-q", *args, input=input, env=env)
    return git(repo, "rev-parse", "HEAD").stdout.strip()


def read_source(path: pathlib.Path) -> bytes:
    """The one place the export reads an overlay's files (tests substitute it)."""
    return path.read_bytes()


def rel(path: pathlib.Path) -> str:
    return str(path.relative_to(REPO) if path.is_relative_to(REPO) else path)


# -- the overlays, from the registry ------------------------------------------

@dataclasses.dataclass
class OverlayExport:
    name: str
    flag: str                      # its torch._inductor.config flag
    diffs: list[pathlib.Path]      # .diff files, applied in this order
    files: dict[str, pathlib.Path]  # upstream path -> source file (new modules, templates)
    tests: dict[str, pathlib.Path]  # upstream path -> source file (test, expect files)
    part_of: str | None = None     # a further patch of this overlay (Overlay.parts)

    @property
    def test_file(self) -> str:
        return f"test/inductor/test_{self.name}.py"

    @property
    def message(self) -> pathlib.Path:
        return PATCHES / f"{self.name}.md"


def overlay_tests(name: str) -> dict[str, pathlib.Path]:
    """Its test module and the expect files of the test classes there."""
    test = REPO / f"test/inductor/test_{name}.py"
    if not test.exists():
        raise ExportError(f"overlay {name}: no test file {rel(test)}")
    tree = ast.parse(read_source(test).decode())
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    files = {rel(test): test}
    for expect in sorted((REPO / "test" / "inductor" / "expect").glob("*.expect")):
        if expect.name.partition(".")[0] in classes:
            files[f"test/inductor/expect/{expect.name}"] = expect
    return files


def collect() -> list[OverlayExport]:
    """Series order (torch_overlay.OVERLAYS), each overlay after what it requires."""
    sys.path.insert(0, str(REPO))
    import torch_overlay
    from torch_overlay._registry import REGISTRY as registry

    out = []
    for name in registry.with_requirements([o.name for o in torch_overlay.OVERLAYS]):
        overlay = registry.get(name)
        files: dict[str, pathlib.Path] = {}
        for module, source in overlay.module_files().items():
            path = module.replace(".", "/") + ".py"
            if not source.exists():
                raise ExportError(f"overlay {name}: module {module} has no file {rel(source)}")
            files[path] = source
            # the templates beside it that it names: load_template("<stem>")
            text = read_source(source).decode()
            for tpl in sorted((source.parent / "templates").glob("*.jinja")):
                if re.search(rf"['\"]{re.escape(tpl.name.split('.')[0])}['\"]", text):
                    files[str(pathlib.PurePosixPath(path).parent / "templates" / tpl.name)] = tpl
        edits = [*overlay.own_edit_files, *sorted(LOGGING_EDITS.glob(f"*.{name}.diff"))]
        diffs = [p for p in edits if not VARIANT.search(p.name)]
        out.append(OverlayExport(name, overlay.flag, diffs, files, overlay_tests(name)))
        # its safety_nets are not: applied at run time, never exported
        for part in overlay.parts:
            # its edits of upstream files (flags among them), then of the files earlier
            # patches add (whose files here hold them)
            diffs = [*sorted(OVERLAY_ROOT.rglob(f"*.{part}.diff")),
                     *sorted(SERIES.rglob(f"*.{part}.diff"))]
            if not diffs:
                raise ExportError(f"overlay {name}: part {part} has no *.{part}.diff")
            out.append(OverlayExport(part, overlay.flag, diffs, {}, overlay_tests(part),
                                     part_of=name))
    return out


# -- unified diffs: hunks and added lines --------------------------------------

@dataclasses.dataclass
class FilePatch:
    path: str                       # b/ path
    new_file: bool
    hunks: list[tuple[str, ...]]    # each hunk's lines, with their ' ', '-', '+' prefixes
    added: dict[int, str]           # line number in the new file -> added text
    # lines of the old file that the hunks change, and for a pure insertion the lines on
    # either side of it
    rewritten: set[int] = dataclasses.field(default_factory=set)


_HUNK = re.compile(r"^@@ -(?P<old>\d+)(?:,(?P<old_n>\d+))? \+(?P<new>\d+)(?:,(?P<new_n>\d+))? @@")


def parse_diff(text: str) -> dict[str, FilePatch]:
    """The files of a unified diff (a .diff file or a git patch), by their b/ path."""
    files: dict[str, FilePatch] = {}
    lines = text.splitlines()
    i, current, new_file = 0, None, False
    while i < len(lines):
        line, i = lines[i], i + 1
        if line.startswith("diff --git "):
            current, new_file = None, False
        elif line.startswith("new file mode"):
            new_file = True
        elif line.startswith("--- ") and i < len(lines) and lines[i].startswith("+++ "):
            new_file = new_file or line[4:].strip() == "/dev/null"
            path = lines[i][4:].strip().split("\t")[0].removeprefix("b/")
            current = files.setdefault(path, FilePatch(path, new_file, [], {}))
            i += 1
        elif (m := _HUNK.match(line)) and current is not None:
            i = _read_hunk(lines, i, m, current)
    return files


def _read_hunk(lines: list[str], i: int, header: re.Match, fp: FilePatch) -> int:
    """Read the hunk of ``header``, from ``lines[i]`` on, into ``fp``; the index past it."""
    old_left, new_left = (int(n) if n is not None else 1 for n in header.group("old_n", "new_n"))
    old_no, new_no, hunk = int(header["old"]), int(header["new"]), []
    removed = False  # the change under way replaces lines
    while i < len(lines) and (old_left > 0 or new_left > 0):
        body = lines[i] or " "  # an empty context line stripped of its space
        if body[0] not in " +-\\":
            break
        i += 1
        if body[0] == "\\":  # "\ No newline at end of file"
            continue
        hunk.append(body)
        if body[0] == "-":
            fp.rewritten.add(old_no)
        elif body[0] == "+" and not removed:
            fp.rewritten.update((old_no - 1, old_no))
        removed = body[0] == "-" or (removed and body[0] == "+")
        if body[0] in " -":
            old_no, old_left = old_no + 1, old_left - 1
        if body[0] in " +":
            if body[0] == "+":
                fp.added[new_no] = body[1:]
            new_no, new_left = new_no + 1, new_left - 1
    fp.hunks.append(tuple(hunk))
    return i


# -- trees and the series -----------------------------------------------------

def torch_info() -> dict[str, str]:
    import torch

    try:
        from triton import __version__ as triton_version
    except ImportError:
        triton_version = "missing"
    return {"torch": torch.__version__, "git_version": torch.version.git_version,
            "triton": triton_version, "root": str(pathlib.Path(torch.__file__).resolve().parent)}


def require_pinned_torch() -> None:
    """The series is made against one release: refuse another one, saying which."""
    pin = PATCHES / "UPSTREAM_PIN"
    m = re.search(r"^git_version (\w+)", pin.read_text(), re.M) if pin.exists() else None
    info, pinned = torch_info(), m and m.group(1)
    if pinned and info["git_version"] != pinned:
        raise ExportError(
            f"the series targets the torch of patches/UPSTREAM_PIN (git {pinned[:12]}); this is "
            f"torch {info['torch']} (git {info['git_version'][:12]}). Run the export with that "
            "torch (.ci/constraints-newest.txt), or, to move the series to this one, delete "
            "patches/UPSTREAM_PIN first")


def pristine_tree(dest: pathlib.Path) -> pathlib.Path:
    """torch/_inductor/**/*.py and *.jinja and torch/_logging/*.py of the installed torch,
    committed in a git repo."""
    info = torch_info()
    root = pathlib.Path(info["root"])
    for path in [*(root / "_inductor").rglob("*"), *(root / "_logging").glob("*.py")]:
        if path.is_file() and path.suffix in (".py", ".jinja") and "__pycache__" not in path.parts:
            target = dest / "torch" / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    git(dest, "init", "-q", "-b", "main")
    commit_all(dest, "-m", f"pristine torch {info['torch']} ({info['git_version']})")
    return dest


MAX_SUBJECT = 72  # git's and upstream's convention


@functools.cache
def _renames() -> tuple[tuple[str, str], ...]:
    """(old, new) path of each rename in the project's history, newest first."""
    proc = subprocess.run(["git", "log", "-M", "--diff-filter=R", "--name-status", "--format="],
                          cwd=REPO, text=True, capture_output=True)
    return tuple((f[1], f[2]) for line in proc.stdout.splitlines()
                 if len(f := line.split("\t")) == 3 and f[0].startswith("R"))


def authorship(overlay: OverlayExport) -> dict[str, str]:
    """Author and date of the project's last commit that changed the overlay's exported
    sources (edits, modules, templates, tests, message), as git environment variables.
    A commit that only moves some of them (a rename, content unchanged) does not count."""
    paths = [rel(p) for p in [*overlay.diffs, *overlay.files.values(),
                              *overlay.tests.values(), overlay.message]]
    for old, new in _renames():
        if new in paths and old not in paths:
            paths.append(old)
    proc = subprocess.run(["git", "log", "-M", "--name-status",
                           "--format=%x01%an%x00%ae%x00%aI", "--", *paths],
                          cwd=REPO, text=True, capture_output=True)
    fields = []
    for commit in proc.stdout.split("\x01")[1:]:
        header, _, changes = commit.partition("\n")
        if any(not line.startswith("R100\t") for line in changes.splitlines() if line):
            fields = header.split("\0")
            break
    if proc.returncode != 0 or len(fields) != 3:
        raise ExportError(f"overlay {overlay.name}: no git history of its files to take the "
                          f"patch's author and date from (run in a git checkout): {proc.stderr}")
    name, email, date = fields
    return {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_AUTHOR_DATE": date,
            "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email, "GIT_COMMITTER_DATE": date}


def commit_message(overlay: OverlayExport) -> str:
    text = read_source(overlay.message).decode() if overlay.message.exists() else ""
    lines = text.rstrip("\n").split("\n")
    if (not lines[0].startswith(f"[inductor] {overlay.name}: ") or len(lines) < 3
            or lines[1].strip() or not "".join(lines[2:]).strip()):
        raise ExportError(f"{rel(overlay.message)}: missing, or not the subject '[inductor] "
                          f"{overlay.name}: ...', then a blank line, then the PR body")
    if len(lines[0]) > MAX_SUBJECT:
        raise ExportError(f"{rel(overlay.message)}: the subject has {len(lines[0])} characters, "
                          f"more than {MAX_SUBJECT}")
    return text.rstrip("\n") + "\n"


def later_parts(overlays: list[OverlayExport], overlay: OverlayExport) -> list[OverlayExport]:
    return [o for o in overlays[overlays.index(overlay) + 1:] if o.part_of is not None]


def diff_target(diff: pathlib.Path) -> str:
    """The tree path a one-file .diff edits (its ``+++ b/`` line)."""
    for line in read_source(diff).decode().splitlines():
        if line.startswith("+++ b/"):
            return line[len("+++ b/"):].strip()
    raise ExportError(f"{rel(diff)}: no +++ b/ line")


def _apply_diff(repo: pathlib.Path, overlay: OverlayExport, diff: pathlib.Path,
                reverse: bool = False) -> None:
    proc = git(repo, "apply", "--whitespace=nowarn", "-v", *(["-R"] if reverse else []),
               input=read_source(diff).decode(), check=False)
    if proc.returncode != 0:
        why = (f"part {overlay.name}: {rel(diff)} is not the edit that makes "
               f"{diff_target(diff)} what its file holds (`python tools/export_patches.py "
               "--rebase-parts` rewrites it from the file as it is)") if reverse else (
               f"overlay {overlay.name}: {rel(diff)} does not apply to the pristine torch "
               "with the earlier patches")
        raise ExportError(f"{why}:\n{_hunk_report(proc.stderr)}")


def commit_series(repo: pathlib.Path, overlays: list[OverlayExport],
                  added_only: bool = False) -> list[str]:
    """Commit each overlay's patch on top of ``repo`` (a pristine tree); the commits'
    hashes. ``added_only``: only the files the series adds, which need no upstream file,
    in an empty ``repo``."""
    added = {p for o in overlays for p in (*o.files, *o.tests)}
    commits = []
    for overlay in overlays:
        for diff in overlay.diffs:
            if not added_only or diff_target(diff) in added:
                _apply_diff(repo, overlay, diff)
        for path, source in {**overlay.files, **overlay.tests}.items():
            target = repo / path
            if target.exists():
                raise ExportError(f"overlay {overlay.name}: {path} exists upstream; change an "
                                  "existing file by a .diff, add only new files")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(read_source(source))
        # the new modules without what later parts add to them
        for part in reversed(later_parts(overlays, overlay)):
            for diff in reversed(part.diffs):
                if diff_target(diff) in {**overlay.files, **overlay.tests}:
                    _apply_diff(repo, part, diff, reverse=True)
        if added_only:
            commits.append(commit_all(repo, "--allow-empty", "-m", overlay.name))
        else:
            commits.append(commit_all(repo, "--cleanup=whitespace", "-F", "-",
                                      input=commit_message(overlay), env=authorship(overlay)))
    return commits


def build_series(out_dir: pathlib.Path, work: pathlib.Path) -> list[str]:
    """Write the series (and pin) into ``out_dir``; ``work`` is scratch space."""
    info = torch_info()
    overlays = collect()
    repo = pristine_tree(work / "tree")
    commit_series(repo, overlays)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.patch"):
        old.unlink()
    git(repo, "format-patch", "-q", "--zero-commit", "--no-signature", "--no-numbered",
        "-o", str(out_dir), "HEAD~%d" % len(overlays))
    names = sorted(p.name for p in out_dir.glob("*.patch"))
    for overlay, name in zip(overlays, names):  # each .diff's hunks are the patch's
        made = parse_diff((out_dir / name).read_text())
        for diff in overlay.diffs:
            for path, fp in parse_diff(read_source(diff).decode()).items():
                if not set(fp.hunks) <= set(made[path].hunks if path in made else ()):
                    raise ExportError(
                        f"overlay {overlay.name}: {rel(diff)} applies, but git writes the edit "
                        f"of {path} as other hunks (context or hunk bounds differ): regenerate "
                        "the .diff with `git diff` against pristine torch")
    (out_dir / "series").write_text("".join(n + "\n" for n in names))
    (out_dir / "UPSTREAM_PIN").write_text(
        f"torch {info['torch']}\n"
        f"git_version {info['git_version']}\n"
        f"triton {info['triton']}\n"
        "# the series applies to pytorch/pytorch at git_version (torch/_inductor as installed)\n")
    return names


# -- a file at any point of the series; the parts' diffs from an edited file ----

def tree_path(path: str) -> str:
    """The series' path of a project file: torch_overlay/_inductor/ is torch/_inductor/."""
    path = rel(pathlib.Path(path).resolve()) if pathlib.Path(path).is_absolute() else path
    path = path.removeprefix("./")
    if path.startswith("torch_overlay/_inductor/"):
        return "torch/_inductor/" + path.removeprefix("torch_overlay/_inductor/")
    return path


def patch_index(overlays: list[OverlayExport], after: str) -> int:
    """The 0-based index of patch ``after``: its number (5, 0005, its file) or its name."""
    names = [o.name for o in overlays]
    if after in names:
        return names.index(after)
    if (m := re.match(r"^(\d+)(-|$)", after)) and 1 <= int(m[1]) <= len(overlays):
        return int(m[1]) - 1
    raise ExportError(f"no patch {after!r} in the series: a number from 1 to {len(overlays)} or "
                      f"one of {', '.join(names)}")


def show(path: str, after: str | None = None) -> str:
    """``path`` as it stands after the patch ``after`` (the last when None). A file the
    series adds is replayed from the project's files alone; an upstream file needs the
    torch of patches/UPSTREAM_PIN."""
    overlays, path = collect(), tree_path(path)
    index = len(overlays) - 1 if after is None else patch_index(overlays, after)
    added_only = any(path in {**o.files, **o.tests} for o in overlays)
    with tempfile.TemporaryDirectory(prefix="export_show_") as tmp:
        work = pathlib.Path(tmp)
        if added_only:
            repo = work / "tree"
            git(work, "init", "-q", "-b", "main", repo.name)
        else:
            require_pinned_torch()
            repo = pristine_tree(work / "tree")
        # all of them: a patch that adds a file writes it less the later parts' edits
        commits = commit_series(repo, overlays, added_only)
        proc = git(repo, "show", f"{commits[index]}:{path}", check=False)
        if proc.returncode != 0:
            # the first patch whose tree holds it (a part may add a template)
            adds = [f"{i + 1:04d} ({o.name})" for i, (o, c) in enumerate(zip(overlays, commits))
                    if git(repo, "cat-file", "-e", f"{c}:{path}", check=False).returncode == 0]
            raise ExportError(f"{path} is not in the tree after patch {index + 1:04d} "
                              f"({overlays[index].name})"
                              + (f"; patch {adds[0]} adds it" if adds else ""))
        return proc.stdout


def part_diffs(overlays: list[OverlayExport], path: str) -> list[tuple[str, pathlib.Path]]:
    """(part, series/ diff) of each part that edits ``path``, in series order."""
    return [(o.name, d) for o in overlays if o.part_of is not None for d in o.diffs
            if d.is_relative_to(SERIES) and diff_target(d) == path]


def rebased_parts(overlays: list[OverlayExport], path: str,
                  work: pathlib.Path) -> tuple[dict[pathlib.Path, str], str | None]:
    """Each part's diff of ``path`` (a file the series adds) as git writes it from the file
    as it now is; or why a part's hunks no longer apply to it even with fuzz."""
    source = next(s for o in overlays for p, s in {**o.files, **o.tests}.items() if p == path)
    diffs = part_diffs(overlays, path)
    repo = work / "tree"
    git(repo.parent, "init", "-q", "-b", "main", repo.name)
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_bytes(read_source(source))
    states = [commit_all(repo, "-m", "whole")]
    for part, diff in reversed(diffs):
        for context in (3, 2, 1):  # git's default first: changed context lines then fuzz
            proc = git(repo, "apply", "-R", f"-C{context}", "--whitespace=nowarn",
                       input=read_source(diff).decode(), check=False)
            if proc.returncode == 0:
                break
        else:
            return {}, (f"part {part}: {rel(diff)} no longer applies to {rel(source)} (lines it "
                        f"adds changed there): edit it by hand\n" + _hunk_report(proc.stderr))
        states.insert(0, commit_all(repo, "-m", f"before {part}"))
    texts = {}
    for (part, diff), before, after in zip(diffs, states, states[1:]):
        text = git(repo, "diff", before, after, "--", path).stdout
        texts[diff] = text[text.index("\n--- ") + 1:]  # a part's new file: --- /dev/null
    return texts, None


def rebase_parts(paths: Iterable[str] = ()) -> tuple[list[pathlib.Path], list[str]]:
    """Rewrite the series/ diffs of the parts that edit ``paths`` (every file the series
    adds that a part edits, when empty) from those files as they now are. Returns the
    diffs rewritten and the parts whose hunks no longer apply."""
    overlays = collect()
    targets = [tree_path(p) for p in paths] or sorted(
        {diff_target(d) for o in overlays for d in o.diffs if d.is_relative_to(SERIES)})
    added = {p for o in overlays for p in (*o.files, *o.tests)}
    rewritten, problems = [], []
    for path in targets:
        if path not in added or not part_diffs(overlays, path):
            problems.append(f"{path}: not a file the series adds that a part edits (series/ "
                            "has no diff of it)")
            continue
        with tempfile.TemporaryDirectory(prefix="export_rebase_") as tmp:
            texts, problem = rebased_parts(overlays, path, pathlib.Path(tmp))
        if problem:
            problems.append(problem)
        for diff, text in texts.items():
            if read_source(diff).decode() != text:
                diff.write_text(text)
                rewritten.append(diff)
    return rewritten, problems


# -- staleness -----------------------------------------------------------------

_VOLATILE = re.compile(r"^(From [0-9a-f]{40} .*|Date: .*)$", re.M)


def stale(patches: pathlib.Path, fresh: pathlib.Path) -> list[str]:
    """Differences between the committed series and a fresh export ([] when none)."""
    def generated(d):
        return {p.name for p in d.glob("*") if p.name in GENERATED or p.suffix == ".patch"}

    def text(path):
        return _VOLATILE.sub("", path.read_text())
    have, want = generated(patches), generated(fresh)
    return ([f"missing {n}" for n in sorted(want - have)]
            + [f"extra {n}" for n in sorted(have - want)]
            + [f"differs: {n}" for n in sorted(have & want)
               if text(patches / n) != text(fresh / n)])


# -- what the series adds: no project name, no import-time reassignment --------

def _import_time_statements(body: list[ast.stmt]) -> Iterable[ast.stmt]:
    """Statements that run when the module is imported (not inside a def or class)."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.ExceptHandler,
                             getattr(ast, "TryStar", ast.Try))):
            for field in ("body", "orelse", "finalbody", "handlers"):
                yield from _import_time_statements(getattr(node, field, []))


def _assigned(target: ast.expr) -> list[ast.expr]:
    """The attributes and items an assignment's target sets, tuples unpacked."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return [a for element in target.elts for a in _assigned(element)]
    if isinstance(target, ast.Starred):
        return _assigned(target.value)
    return [target] if isinstance(target, (ast.Attribute, ast.Subscript)) else []


def _root(expr: ast.expr) -> str | None:
    while isinstance(expr, (ast.Attribute, ast.Subscript)):
        expr = expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def top_level_reassignments(source: str, added: set[int], new_file: bool, path: str) -> list[str]:
    """Import-time assignments, among ``added`` lines, to an attribute or item of an
    upstream object (``lowerings[aten.mm] = ...``, ``Scheduler.x = ...``, setattr(...)).
    In a file the series adds, the module's own classes and functions are not upstream."""
    tree = ast.parse(source, path)
    defined = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    own = {n.name for n in tree.body if isinstance(n, defined)} if new_file else set()
    found = []
    for node in _import_time_statements(tree.body):
        lines = set(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        if not lines & added:
            continue
        if isinstance(node, ast.Assign):
            targets = [a for t in node.targets for a in _assigned(t)]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = _assigned(node.target)
        elif (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
              and isinstance(node.value.func, ast.Name) and node.value.func.id == "setattr"
              and node.value.args):
            targets = [node.value.args[0]]
        else:
            continue
        if any(_root(t) not in own for t in targets):
            text = ast.get_source_segment(source, node) or ast.unparse(node)
            found.append(f"{path}:{node.lineno}: {text.splitlines()[0]}")
    return found


def audit_patch(tree: pathlib.Path, patch: pathlib.Path, overlay: OverlayExport,
                edited_later: set[str] = frozenset(), style: bool = True) -> list[str]:
    """What the patch (applied in ``tree``) must not add or must add; [] when all is well.
    No added line names the project, tests included: the project's harness reaches them
    from outside, as a pytest plugin (torch_overlay.testing.gpu_free)."""
    problems = []
    files = parse_diff(patch.read_text())
    for path, fp in files.items():
        for no, text in sorted(fp.added.items()):
            if FORBIDDEN in text:
                problems.append(f"{path}:{no}: names {FORBIDDEN}: {text.strip()[:120]}")
        if path.endswith(".py") and fp.added:
            try:
                source = (tree / path).read_text()
                problems += [f"{hit} (a top-level reassignment of an upstream object)"
                             for hit in top_level_reassignments(source, set(fp.added), fp.new_file, path)]
            except SyntaxError as e:
                problems.append(f"{path}: does not parse: {e}")
    if style:
        problems += style_problems(tree, files)
    flag = re.compile(rf"^{re.escape(overlay.flag)}\s*(:[^=]*)?=")
    config_lines = files[CONFIG].added.values() if CONFIG in files else ()
    if overlay.part_of is None and not any(flag.match(text) for text in config_lines):
        problems.append(f"{CONFIG}: the patch does not declare the flag {overlay.flag}")
    # the tests as the project runs them, once no later part edits them
    tests = {**overlay.tests, **{t: REPO / t for t in map(diff_target, overlay.diffs)
                                 if t.startswith("test/")}}
    for path, source in tests.items():
        if path in edited_later:
            continue
        target = tree / path
        if not target.exists():
            problems.append(f"{path}: not in the patched tree")
        elif target.read_bytes() != source.read_bytes():
            problems.append(f"{path}: differs from {rel(source)} (must be byte-identical)")
    return problems


# -- upstream's style: its formatter and lint leave every added line as it is --

STYLE = REPO / "tools" / "upstream_style.toml"  # [tool.ruff] and [tool.usort], as upstream's


def _tool(tree: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    # beside this interpreter (a virtualenv's, activated or not), else on PATH
    found = shutil.which(args[0], path=os.path.dirname(sys.executable)) or shutil.which(args[0])
    if found is None:
        raise ExportError(f"{args[0]} is not installed: `pip install -e .[test]`")
    return subprocess.run([found, *args[1:]], cwd=tree, capture_output=True, text=True)


def style_problems(tree: pathlib.Path, files: dict[str, FilePatch]) -> list[str]:
    """Added Python lines that upstream's formatter (ruff format, usort) would rewrite or
    its ruff lint flags, in ``tree`` as patched; [] when none."""
    shutil.copyfile(STYLE, tree / "pyproject.toml")  # untracked: the tools' settings
    problems = []
    for path, fp in sorted(files.items()):
        if not path.endswith(".py") or not fp.added:
            continue
        added = set(fp.added)
        for tool, args in (("ruff format", ("ruff", "format", "--diff")),
                           ("usort", ("usort", "diff"))):
            out = _tool(tree, *args, path)
            if out.returncode not in (0, 1) or (out.returncode and not out.stdout):
                problems.append(f"{path}: {tool} failed: {out.stderr.strip()[:300]}")
            elif lines := sorted(added.intersection(set().union(
                    *(f.rewritten for f in parse_diff(out.stdout).values())))):
                problems.append(f"{path}:{lines[0]}: {tool} rewrites {len(lines)} added "
                                f"line(s): `python tools/export_patches.py --style-fix FILE`")
        out = _tool(tree, "ruff", "check", "--output-format", "concise", "--quiet", path)
        for line in out.stdout.splitlines():
            m = re.match(rf"{re.escape(path)}:(\d+):\d+: ", line)
            if m and int(m.group(1)) in added:
                problems.append(line)
    (tree / "pyproject.toml").unlink()
    return problems


def style_fix(paths: Iterable[pathlib.Path]) -> list[str]:
    """Format files as upstream would (usort, ruff's safe fixes, ruff format) in place;
    the lint findings left to fix by hand."""
    left = []
    with tempfile.TemporaryDirectory(prefix="style_") as tmp:
        tree = pathlib.Path(tmp)
        shutil.copyfile(STYLE, tree / "pyproject.toml")
        for src in paths:
            # under its upstream name, so that per-file settings apply as upstream's
            name = tree_path(str(src.resolve()))
            if pathlib.Path(name).is_absolute():  # not a project file
                name = src.name
            f = tree / name
            f.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, f)
            for args in (("usort", "format"), ("ruff", "check", "--fix", "--quiet"),
                         ("ruff", "format", "--quiet"), ("usort", "format"),
                         ("ruff", "format", "--quiet")):
                _tool(tree, *args, name)
            out = _tool(tree, "ruff", "check", "--output-format", "concise", "--quiet", name)
            left += [f"{src}{line[len(name):]}" for line in out.stdout.splitlines()
                     if line.startswith(name)]
            shutil.copyfile(f, src)
    return left


# -- --check -------------------------------------------------------------------

def apply_series(repo: pathlib.Path, patches: pathlib.Path,
                 names: list[str] | None = None) -> None:
    """``git am`` each patch of the series (or ``names``), naming the one that fails."""
    for name in names or (patches / "series").read_text().split():
        patch = patches / name
        check = git(repo, "apply", "--check", "-v", str(patch), check=False)
        if check.returncode != 0:
            raise ExportError(f"patch {name} does not apply:\n{_hunk_report(check.stderr.strip())}")
        git(repo, "am", "-q", str(patch))


def _hunk_report(git_output: str) -> str:
    """The lines of git's output that say which file and hunk failed."""
    failed = re.compile(r"error|patch failed|Hunk|does not apply|while searching|"
                        r"already exists|No such file|conflict", re.I)
    lines = [f"  {line}" for line in git_output.splitlines() if failed.search(line)]
    return "\n".join(lines) or git_output


def patched_torch(tree: pathlib.Path, changed: Iterable[str], dest: pathlib.Path) -> pathlib.Path:
    """``dest/torch``: links to the installed torch's files, the changed files copies."""
    shutil.copytree(torch_info()["root"], dest / "torch", copy_function=os.symlink,
                    ignore=shutil.ignore_patterns("__pycache__"))
    for path in changed:
        if path.startswith("torch/"):
            (dest / path).unlink(missing_ok=True)
            (dest / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(tree / path, dest / path)
    return dest


# A pytest plugin for the runs below. torch_overlay imports its new modules under their
# upstream names (a meta path finder, installed when torch_overlay is imported, even
# under TORCH_OVERLAY_DISABLE=1); the GPU-free plugin is part of torch_overlay, so without
# this the overlay's files would shadow the torch copy's own. The copy under test is then
# what every torch._inductor import finds.
ISOLATION_PLUGIN = '''\
"""tools/export_patches.py --check: the torch on PYTHONPATH is the one under test."""
import sys


def isolate():
    from torch_overlay._registry import UPSTREAM_MODULES as finder

    while finder in sys.meta_path:
        sys.meta_path.remove(finder)
    finder.files.clear()


def pytest_configure(config):
    isolate()
'''
PLUGIN_NAME = "_export_check_isolation"
GPU_FREE_PLUGIN = "torch_overlay.testing.gpu_free"


def counts(outcomes: dict[str, str]) -> str:
    """``outcomes``: test_x::Class::test -> PASSED / FAILED / ERROR / SKIPPED."""
    n = collections.Counter(outcomes.values())
    return f"{n['PASSED']} passed, {n['FAILED'] + n['ERROR']} failed, {n['SKIPPED']} skipped"


def junit_outcomes(junit: pathlib.Path) -> dict[str, str]:
    """test_x::Class::test -> outcome, from pytest's junit xml. A module that does not
    import is reported as one entry with no class: it is left out (see ``expected``)."""
    import xml.etree.ElementTree as ET

    out = {}
    for case in ET.parse(junit).iter("testcase"):
        # classname: "test.inductor.test_x.Class" (a torch tree) or "test_x.Class"
        module, _, cls = case.get("classname", "").rpartition(".")
        module = module.rpartition(".")[2]
        if not module.startswith("test_") or not cls:
            continue
        kinds = {child.tag for child in case}
        out[f"{module}::{cls}::{case.get('name')}"] = (
            "FAILED" if "failure" in kinds else "ERROR" if "error" in kinds
            else "SKIPPED" if "skipped" in kinds else "PASSED")
    return out


def run_exported_tests(pythonpath: pathlib.Path, files: list[str], cache: pathlib.Path,
                       tree: pathlib.Path, new_modules: Iterable[str] = (),
                       expected: Iterable[str] = (),
                       pytest_args: Iterable[str] = ()) -> tuple[dict[str, str], str]:
    """The exported test files (tree-relative) against the torch in ``pythonpath``, every
    overlay off (TORCH_OVERLAY_DISABLE=1), GPU-free through the project's pytest plugin:
    their outcomes and pytest's output. Tests in ``expected`` that pytest did not even
    report (a module that does not import) count as ERROR."""
    plugin_dir = cache / "plugin"
    plugin_dir.mkdir(parents=True, exist_ok=True)
    (plugin_dir / f"{PLUGIN_NAME}.py").write_text(ISOLATION_PLUGIN)
    path = [str(pythonpath), str(plugin_dir), str(REPO), os.environ.get("PYTHONPATH")]
    env = {**os.environ, "TORCH_OVERLAY_DISABLE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, path)),
           "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("EXPECTTEST_ACCEPT", None)
    modules = ["torch._inductor.compile_fx",
               *(m.removesuffix(".py").replace("/", ".") for m in new_modules)]
    probe = subprocess.run(
        [sys.executable, "-c", f"import {PLUGIN_NAME} as p, importlib, torch_overlay\n"
         f"p.isolate()\nfor m in {modules!r}:\n    print(importlib.import_module(m).__file__)"],
        cwd=tree, env=env, text=True, capture_output=True)
    where = probe.stdout.split()
    if probe.returncode != 0 or not all(w.startswith(str(pythonpath)) for w in where):
        raise ExportError(f"the torch under test does not import from {pythonpath}: {where}\n"
                          f"{probe.stderr[-3000:]}")
    junit = cache / "junit.xml"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", PLUGIN_NAME, "-p", GPU_FREE_PLUGIN, "--show-capture=no",
                           "--tb=short", f"--junitxml={junit}", "--rootdir", str(tree),
                           *pytest_args, *files],
                          cwd=tree, env=env, text=True, capture_output=True)
    outcomes = {n: "ERROR" for n in expected}  # not reported: not even collected
    if junit.exists():
        outcomes.update(junit_outcomes(junit))
    return outcomes, proc.stdout[-8000:] + proc.stderr[-3000:]


def check(run_tests: bool = True, compare_junit: pathlib.Path | None = None,
          pytest_args: Iterable[str] = (), stale_step: bool = True,
          style_step: bool = True) -> int:
    """``stale_step`` False: a copy without the git history the export dates from;
    ``style_step`` False: a machine without the formatter and lint (CI runs them)."""
    t0 = time.time()
    try:
        if not (PATCHES / "series").exists():
            raise ExportError("patches/series missing: run `python tools/export_patches.py`")
        require_pinned_torch()
        with tempfile.TemporaryDirectory(prefix="export_check_") as tmp:
            ok = _check_in(pathlib.Path(tmp), t0, run_tests, compare_junit, pytest_args,
                           stale_step, style_step)
    except ExportError as e:
        print(f"export_patches: {e}", file=sys.stderr)
        return 1
    print(f"[check] {'OK' if ok else 'FAILED'} in {time.time() - t0:.0f}s")
    return 0 if ok else 1


def _check_in(tmp: pathlib.Path, t0: float, run_tests, compare_junit, pytest_args,
              stale_step, style_step) -> bool:
    if stale_step:  # 1. stale?
        build_series(tmp / "fresh", tmp / "work")
        problems = stale(PATCHES, tmp / "fresh")
        if problems:
            raise ExportError(f"patches/ is stale against the overlay code ({'; '.join(problems)}"
                              "): run `python tools/export_patches.py` and commit patches/")
        print(f"[check] patches/ is up to date ({time.time() - t0:.0f}s)")
    # 2. the committed series on a pristine tree, one patch at a time
    tree = pristine_tree(tmp / "pristine")
    overlays = collect()
    names = (PATCHES / "series").read_text().split()
    if len(names) != len(overlays):
        raise ExportError("patches/series does not have one patch per overlay and part")
    ok, patched, new_modules = True, {}, []
    for i, (name, overlay) in enumerate(zip(names, overlays)):
        apply_series(tree, PATCHES, [name])
        comp = subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "torch")],
                              capture_output=True, text=True)
        if comp.returncode != 0:
            raise ExportError(f"after {name}: the patched sources do not byte-compile:\n"
                              f"{comp.stdout}{comp.stderr}")
        print(f"[check] {name} applies and byte-compiles ({time.time() - t0:.0f}s)")
        # 3. what it adds
        edited_later = {diff_target(d) for p in later_parts(overlays, overlay) for d in p.diffs}
        ok &= _report_audit(name, overlay, audit_patch(
            tree, PATCHES / name, overlay, edited_later, style=style_step), style_step)
        new_modules += [p for p in overlay.files if p.endswith(".py")]
        if not run_tests:
            continue
        # 4. its tests against the patched copy, overlays off, GPU-free
        changed = git(tree, "diff", "--name-only", f"HEAD~{i + 1}", "HEAD").stdout.split()
        outcomes, output = run_exported_tests(
            patched_torch(tree, changed, tmp / f"site_{i}"), [overlay.test_file],
            tmp / f"cache_{i}", tree, new_modules, pytest_args=pytest_args)
        patched[overlay.test_file] = outcomes
        print(f"[check] tests of {overlay.name} against the patched copy (patches 1-{i + 1}, "
              f"TORCH_OVERLAY_DISABLE=1, -p {GPU_FREE_PLUGIN}): {counts(outcomes)} "
              f"({time.time() - t0:.0f}s)")
        bad = [f"{n} ({o})" for n, o in outcomes.items() if o in ("FAILED", "ERROR")]
        if bad or ("PASSED" not in outcomes.values() and not skips_allowed(pytest_args)):
            ok = False
            print(f"not passing: {', '.join(bad)}\n{output}", file=sys.stderr)
        if compare_junit is not None:
            ok &= same_as_project_run(outcomes, overlay.test_file, compare_junit)
    if run_tests:
        ok &= _pristine_fails(tree, tmp, patched, pytest_args, t0)
    return ok


def skips_allowed(pytest_args: Iterable[str]) -> bool:
    """Whether a patch's tests may all skip: under a smaller GPU's profile than the default
    one, where upstream's ``is_big_gpu`` offers no mm template, the feature has nothing to do;
    under the default profile each patch must pass one test."""
    profiles = re.findall(r"--gpu-free-profile[= ](\S+)", " ".join(pytest_args))
    from torch_overlay.testing.gpu_profiles import DEFAULT_PROFILE

    return any(p != DEFAULT_PROFILE for p in profiles)


def _report_audit(name: str, overlay: OverlayExport, problems: list[str], style: bool) -> bool:
    if problems:
        print(f"[check] {name}: {len(problems)} added line(s) or file(s) not fit for upstream:\n  "
              + "\n  ".join(problems), file=sys.stderr)
        return False
    flag = (f"declares {CONFIG}:{overlay.flag}" if overlay.part_of is None
            else f"a part of {overlay.part_of}")
    print(f"[check] {name}: no added line under torch/ names {FORBIDDEN} or reassigns "
          f"an upstream object at top level; {flag}; tests byte-identical; "
          + ("added lines as upstream's formatter and lint leave them" if style
             else "formatter and lint not run (--no-style-step)"))
    return True


def _pristine_fails(tree: pathlib.Path, tmp: pathlib.Path, patched: dict[str, dict[str, str]],
                    pytest_args, t0: float) -> bool:
    """5. The exported tests against the pristine copy: each must fail."""
    expected = [n for outcomes in patched.values() for n in outcomes]
    outcomes, _ = run_exported_tests(patched_torch(tree, [], tmp / "site_pristine"),
                                     list(patched), tmp / "cache_pristine", tree,
                                     expected=expected, pytest_args=pytest_args)
    print(f"[check] the same {len(expected)} tests against the pristine copy (torch "
          f"{torch_info()['torch']}, TORCH_OVERLAY_DISABLE=1): {counts(outcomes)} "
          f"({time.time() - t0:.0f}s)")
    passing = [n for n in expected if outcomes[n] not in ("FAILED", "ERROR")]
    if passing:
        print("[check] these pass (or skip) without the series, so they do not test it:\n  "
              + "\n  ".join(passing), file=sys.stderr)
    every = {n: o for outcomes in patched.values() for n, o in outcomes.items()}
    print(f"[check] the {len(expected)} exported tests: patched copy {counts(every)} (values: "
          f"GPU only); pristine copy {len(expected) - len(passing)} failed")
    return not passing


def same_as_project_run(outcomes: dict[str, str], test_file: str, junit: pathlib.Path) -> bool:
    """The exported file's outcomes equal those of the same file in ``pytest test/``
    (runtime overlays on): the export tests what the project tests."""
    stem = pathlib.PurePosixPath(test_file).stem
    project = {k: v for k, v in junit_outcomes(junit).items() if k.startswith(stem + "::")}
    differ = sorted(k for k in set(project) | set(outcomes) if project.get(k) != outcomes.get(k))
    if differ:
        print(f"[check] {test_file}: outcomes differ from pytest test/ ({junit}):\n  "
              + "\n  ".join(f"{k}: project {project.get(k)}, export {outcomes.get(k)}"
                             for k in differ[:40]), file=sys.stderr)
        return False
    print(f"[check] {test_file}: the same {len(project)} outcomes as in pytest test/")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--check", action="store_true", help="fail if patches/ is stale, does not apply or compile, "
        "adds what upstream cannot take, or its tests do not pass patched and fail pristine")
    add("--no-tests", action="store_true", help="with --check: skip the test runs")
    add("--compare-junit", type=pathlib.Path, metavar="XML",
        help="with --check: each exported test file has its outcomes of this `pytest test/`")
    add("--pytest-arg", action="append", default=[], metavar="ARG",
        help="with --check: passed to the pytest runs (e.g. -n=12 on the GPU)")
    add("--no-stale-step", action="store_true", help="with --check: no staleness step (no .git)")
    add("--no-style-step", action="store_true", help="with --check: no formatter, lint (no ruff)")
    add("--show", metavar="PATH", help="print a file as it stands after a patch (--after)")
    add("--after", metavar="PATCH", help="with --show: a patch's number, overlay or part name")
    add("--rebase-parts", nargs="*", metavar="FILE",
        help="rewrite the series/ diffs of the parts that edit these files (default: all)")
    add("--style-fix", type=pathlib.Path, nargs="+", metavar="FILE",
        help="format files as upstream's formatter would; print the lint left to fix")
    args = parser.parse_args(argv)
    try:
        if args.style_fix:
            left = style_fix(args.style_fix)
            print("\n".join(left))
            return 1 if left else 0
        if args.show:
            sys.stdout.write(show(args.show, args.after))
            return 0
        if args.rebase_parts is not None:
            rewritten, problems = rebase_parts(args.rebase_parts)
            for diff in rewritten:
                print(f"rewrote {rel(diff)}")
            for problem in problems:
                print(problem, file=sys.stderr)
            if rewritten:
                print("then re-export: `python tools/export_patches.py`")
            return 1 if problems else 0
        if args.check:
            return check(run_tests=not args.no_tests, compare_junit=args.compare_junit,
                         pytest_args=args.pytest_arg,
                         stale_step=not args.no_stale_step,
                         style_step=not args.no_style_step)
        require_pinned_torch()
        with tempfile.TemporaryDirectory(prefix="export_") as tmp:
            names = build_series(PATCHES, pathlib.Path(tmp))
        for n in names:
            print(PATCHES / n)
        return 0
    except ExportError as e:
        print(f"export_patches: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
