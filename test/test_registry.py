# Owner(s): ["module: inductor"]
"""The overlay machinery: hunks applied to live functions, flags, drift, restore."""
import contextlib
import dataclasses
import difflib
import inspect
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import types
import unittest
from unittest import mock

import torch
from torch._inductor import config as inductor_config
from torch._inductor.test_case import run_tests, TestCase

import torch_overlay
from torch_overlay._edits import (
    OVERLAY_ROOT, EditError, FileDiff, apply_hunks, plan_swaps, select_edit, select_edits,
    variant_files, variant_name,
)
from torch_overlay._registry import REGISTRY, Overlay, OverlayError

MODULE = "torch_overlay_probe_module"
SOURCE = '''\
import functools


def plain(x):
    return x + 1


def decorate(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args)
    return wrapper


@decorate
def decorated(x):
    return x * 2


def make_closure():
    offset = 10

    def closure(x):
        return x + offset
    return closure


closure = make_closure()


class Base:
    def method(self):
        return "base"


class Child(Base):
    def method(self):
        return "child+" + super().method()
'''


def diff_of(old: str, new: str, path: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                        f"a/{path}", f"b/{path}"))


class TestEdits(TestCase):
    """Each kind of function an overlay edits: plain, decorated, closure, method with super()."""

    def setUp(self):
        super().setUp()
        self.tmp = tempfile.TemporaryDirectory()
        root = pathlib.Path(self.tmp.name)
        (root / f"{MODULE}.py").write_text(SOURCE)
        sys.path.insert(0, str(root))
        self.root = root
        import importlib

        self.module = importlib.import_module(MODULE)

    def tearDown(self):
        sys.path.remove(str(self.root))
        sys.modules.pop(MODULE, None)
        self.tmp.cleanup()
        super().tearDown()

    def swaps(self, old: str, new: str):
        path = self.root / "probe.diff"
        path.write_text(diff_of(SOURCE, SOURCE.replace(old, new, 1), f"{MODULE}.py"))
        return plan_swaps([FileDiff.read(path)])

    def test_each_kind_runs_the_edit_and_restores(self):
        m = self.module
        cases = [
            ("    return x + 1\n", "    return x + 100\n", lambda: m.plain(1), 2, 101),
            ("    return x * 2\n", "    return x * 3\n", lambda: m.decorated(2), 4, 6),
            ('        return "child+" + super().method()\n',
             '        return "edited+" + super().method()\n', lambda: m.Child().method(),
             "child+base", "edited+base"),
        ]
        for old, new, call, before, after in cases:
            (swap,) = self.swaps(old, new)
            self.assertEqual(call(), before)
            swap.apply()
            self.assertEqual(call(), after)
            swap.restore()
            self.assertEqual(call(), before)

    def test_nested_function_edit_is_refused(self):
        with self.assertRaisesRegex(EditError, "nested function 'closure'"):
            self.swaps("        return x + offset\n", "        return x - offset\n")

    def test_definitions_are_parsed_once_per_text(self):
        # enabling parses Inductor's large modules: memoized in the process and on disk
        from torch_overlay import _edits

        text = SOURCE + "\n\ndef added_for_this_test_%d():\n    pass\n" % os.getpid()
        with mock.patch.object(_edits, "_definitions_cache_dir", lambda: self.root / "c"):
            with mock.patch.object(_edits, "_parse_definitions",
                                   wraps=_edits._parse_definitions) as parse:
                first = _edits.definitions(text)
                self.assertEqual(_edits.definitions(text), first)
                _edits._DEFINITIONS.clear()  # a new process: from the disk
                self.assertEqual(_edits.definitions(text), first)
                self.assertEqual(parse.call_count, 1)
                # a damaged cache file is parsed again
                (cached,) = (self.root / "c").iterdir()
                cached.write_text("[[1, 2")
                _edits._DEFINITIONS.clear()
                self.assertEqual(_edits.definitions(text), first)
                self.assertEqual(parse.call_count, 2)
        self.assertEqual(
            (first["plain"].lineno, first["Child.method"].name), (4, "method"))
        self.assertEqual([n for n, *_ in first["decorate"].nested], ["wrapper"])

    def test_drift_names_the_hunk_and_torch_version(self):
        path = self.root / "drift.diff"
        path.write_text(diff_of(SOURCE.replace("x + 1", "x + 7"),
                                SOURCE.replace("x + 1", "x + 8"), f"{MODULE}.py"))
        with self.assertRaisesRegex(EditError, "does not apply to torch " + re.escape(torch.__version__)):
            plan_swaps([FileDiff.read(path)])

    def test_a_package_init_edit_names_the_modules_it_imports(self):
        path = self.root / "init.diff"
        old = "from . import (\n    a,\n)\n"
        path.write_text(diff_of(old, old + "from . import b  # noqa: F401\n"
                                "from ..sibling import c, d\n", "torch/pkg/sub/__init__.py"))
        diff = FileDiff.read(path)
        self.assertTrue(diff.imports_modules)
        self.assertEqual(diff.imported_modules(),
                         ["torch.pkg.sub.b", "torch.pkg.sibling.c", "torch.pkg.sibling.d"])
        # a name added to the package's own list, as upstream's heuristics/template does
        path.write_text(diff_of(old, "from . import (\n    a,\n    b,\n)\n",
                                "torch/pkg/sub/__init__.py"))
        self.assertEqual(FileDiff.read(path).imported_modules(), ["torch.pkg.sub.b"])

    def test_module_level_hunk_is_refused(self):
        path = self.root / "toplevel.diff"
        path.write_text(diff_of(SOURCE, SOURCE.replace("closure = make_closure()\n",
                                                       "closure = None\n"), f"{MODULE}.py"))
        with self.assertRaisesRegex(EditError, "outside a function"):
            plan_swaps([FileDiff.read(path)])

    def test_hunks_apply_at_an_offset(self):
        path = self.root / "offset.diff"
        path.write_text(diff_of(SOURCE, SOURCE.replace("x * 2", "x * 5"), f"{MODULE}.py"))
        shifted = "# one\n# two\n" + SOURCE
        edited, _ = apply_hunks(shifted, FileDiff.read(path))
        self.assertIn("x * 5", edited)
        self.assertTrue(edited.startswith("# one\n# two\n"))

    def variants(self, **sources: str) -> pathlib.Path:
        """probe.matmul.diff made against SOURCE edited by sources["primary"], and
        probe.matmul.torch-X.Y.diff against the others: each the x + 1 -> x + 100 edit."""
        primary = self.root / "probe.matmul.diff"
        for release, made_against in sources.items():
            path = primary if release == "primary" else self.root / f"probe.matmul.{release}.diff"
            path.write_text(diff_of(made_against, made_against.replace("x + 1\n", "x + 100\n"),
                                    f"{MODULE}.py"))
        return primary

    def test_the_first_edit_that_applies_is_used_primary_then_newest_release(self):
        newer = SOURCE.replace("def plain(x):\n", "def plain(x):\n    x = x  # newer\n")
        older = SOURCE.replace("def plain(x):\n", "def plain(x):\n    x = x  # older\n")
        primary = self.variants(primary=newer, **{"torch-2.9": older, "torch-2.11": SOURCE})
        self.assertEqual([variant_name(p) for p in variant_files(primary)],
                         ["torch-2.11", "torch-2.9"])
        chosen = select_edit(primary)  # the installed module is SOURCE
        self.assertEqual(chosen.path.name, "probe.matmul.torch-2.11.diff")
        (swap,) = plan_swaps([chosen])
        swap.apply()
        try:
            self.assertEqual(self.module.plain(1), 101)
        finally:
            swap.restore()
        primary = self.variants(primary=SOURCE)
        self.assertEqual(select_edit(primary).path, primary)

    def test_no_variant_applies_refuses_with_the_primarys_hunk(self):
        newer = SOURCE.replace("def plain(x):\n", "def plain(x):\n    x = x  # newer\n")
        older = SOURCE.replace("def plain(x):\n", "def plain(x):\n    x = x  # older\n")
        primary = self.variants(primary=newer, **{"torch-2.9": older})
        with self.assertRaisesRegex(EditError, r"probe\.matmul\.diff: the hunk at .*py:3 "
                                    r"\(.*\) does not apply to torch " + re.escape(torch.__version__)
                                    + r".*variants .* \(probe\.matmul\.torch-2\.9\.diff\)"):
            select_edit(primary)

    def test_an_edit_builds_on_an_earlier_ones_lines(self):
        first = self.variants(primary=SOURCE)  # x + 1 -> x + 100
        edited = SOURCE.replace("x + 1\n", "x + 100\n")
        second = self.root / "probe.later.diff"
        second.write_text(diff_of(edited, edited.replace("x + 100\n", "x + 200\n"),
                                  f"{MODULE}.py"))
        with self.assertRaisesRegex(EditError, "does not apply"):
            select_edit(second)  # alone, its context is missing
        swaps = plan_swaps(select_edits([first, second]))
        for swap in swaps:
            swap.apply()
        try:
            self.assertEqual(self.module.plain(1), 201)
        finally:
            for swap in swaps:
                swap.restore()

    def test_a_variant_for_a_release_without_the_function(self):
        # the primary edits a function the installed module lacks: the variant that
        # names it absent applies, and edits nothing
        newer = SOURCE.replace("def plain(x):\n", "def plain(x):\n    x = x  # newer\n")
        primary = self.variants(primary=newer)
        variant = self.root / "probe.matmul.torch-2.9.diff"
        header = f"--- a/{MODULE}.py\n+++ b/{MODULE}.py\n"
        variant.write_text("Older releases lack it.\n\nabsent: not_here\n" + header)
        chosen = select_edit(primary)
        self.assertEqual((chosen.path, chosen.absent, chosen.hunks), (variant, "not_here", ()))
        self.assertEqual(plan_swaps([chosen]), [])
        # where the function is defined, the variant does not apply
        variant.write_text("absent: plain\n" + header)
        with self.assertRaisesRegex(EditError, "variants for older releases do not apply"):
            select_edit(primary)
        # a function of another module that the edit builds on
        variant.write_text("absent: torch/nn/functional.py:not_here\n" + header)
        self.assertEqual(select_edit(primary).path, variant)
        variant.write_text("absent: torch/nn/functional.py:relu\n" + header)
        with self.assertRaisesRegex(EditError, "variants for older releases do not apply"):
            select_edit(primary)


@contextlib.contextmanager
def probe_overlay(name: str, edit_file: str, diff: str, **fields):
    """A throwaway overlay ``name`` whose one edit is ``diff`` (as ``edit_file``),
    registered for the block and forgotten after it."""
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / edit_file
        path.write_text(diff)

        @dataclasses.dataclass(frozen=True)
        class Probe(Overlay):
            @property
            def edit_files(self):
                return [path]

        REGISTRY.register(Probe(name=name, purpose="probe", flag=name, **fields))
        try:
            yield
        finally:
            REGISTRY._overlays.pop(name)
            REGISTRY._refused.pop(name, None)


class TestOverlays(TestCase):
    """The real overlays on the installed torch."""

    def test_every_edit_applies_and_replaces_only_what_the_series_edits(self):
        status = torch_overlay.status()
        edited = sorted({f for o in status.overlays for f in o.functions})
        self.assertEqual(len(edited), 16)
        self.assertLessEqual(len(status.replaced), len(edited))
        for overlay in status.overlays:
            self.assertEqual(overlay.state, "active", overlay.reason)
        self.assertIn("torch._inductor.compile_fx.fx_codegen_and_compile", edited)
        # the matmul paths are reached through V.choices: the lowerings stay upstream's
        self.assertFalse([f for f in edited if f.startswith("torch._inductor.kernel.")])

    def test_a_parts_edits_of_upstream_files_apply_with_its_overlay(self):
        # config.py's hunk of tensorcore_mm_measure is a part's, fx_codegen_and_compile's
        # a safety net's (tensorcore_mm_fallback, applied at run time, never exported);
        # a part's edits of the new modules only cut the series and are never applied:
        # the modules here are whole
        names = [p.name for p in REGISTRY.get("tensorcore_mm").edit_files]
        self.assertIn("config.tensorcore_mm_measure.diff", names)
        self.assertIn("compile_fx.tensorcore_mm_fallback.diff", names)
        self.assertEqual(REGISTRY.get("tensorcore_mm").safety_nets, ("tensorcore_mm_fallback",))
        self.assertNotIn("tensorcore_mm_fallback", REGISTRY.get("tensorcore_mm").parts)
        self.assertFalse([n for n in names if n.startswith(("mm_tensorcore", "tensorcore_mm."))])
        (functions,) = [o.functions for o in torch_overlay.status().overlays
                        if o.name == "tensorcore_mm"]
        self.assertIn("torch._inductor.compile_fx.fx_codegen_and_compile", functions)

    def test_status_names_the_edit_used_per_file(self):
        for overlay in torch_overlay.status().overlays:
            # one variant per upstream file; config.py may have several edits (the flags
            # of an overlay's parts)
            # where the newest release has the file: its primary edit's
            primary = {e: re.sub(r"\.torch-\d+\.\d+\.diff$", ".diff", e) for e in overlay.edits}
            upstream_of = {e: FileDiff.read(OVERLAY_ROOT / primary[e]).upstream.removeprefix(
                "torch/_inductor/") for e in overlay.edits}
            self.assertEqual(set(overlay.variants), set(upstream_of.values()))
            own = [e for e in overlay.edits if re.search(rf"\.{overlay.name}(\.torch-[\d.]+)?\.diff$", e)]
            for edit in own:
                variant = re.search(r"\.(torch-\d+\.\d+)\.diff$", edit)
                upstream = upstream_of[edit]
                self.assertEqual(overlay.variants[upstream],
                                 variant.group(1) if variant else "primary")
        self.assertRegex(str(torch_overlay.status()), r"(?m)^    variant: ")

    def test_flags_declared_by_the_config_hunks(self):
        for overlay in torch_overlay.OVERLAYS:
            self.assertIn(overlay.flag, inductor_config._config)
        self.assertIn("torch_overlay_digest", inductor_config.save_config_portable())

    def test_disable_restores_code_and_removes_flags(self):
        from torch._inductor import choices, compile_fx

        fn = inspect.unwrap(compile_fx.fx_codegen_and_compile)
        edited = fn.__code__
        self.assertIn("edited by", edited.co_filename)
        try:
            torch_overlay.disable()
            self.assertEqual(fn.__code__.co_filename, inspect.getsourcefile(compile_fx))
            self.assertNotIn("tensorcore_mm_autocast", inductor_config._config)
            self.assertEqual(REGISTRY.swaps, [])
            self.assertEqual(choices.registered_inductor_choices(), ())
        finally:
            torch_overlay.enable()
        self.assertEqual(fn.__code__.co_filename, edited.co_filename)
        self.assertEqual([k for k, _ in choices.registered_inductor_choices()],
                         ["downcast_mm", "tensorcore_mm"])

    def test_disabling_a_requirement_disables_its_dependants(self):
        try:
            torch_overlay.disable("matmul_meta")
            self.assertEqual(REGISTRY.enabled(),
                             ["prologue_downcast", "downcast_mm", "bmm_prologue",
                              "template_fill_order", "gelu_add", "param_cast_cache"])
        finally:
            torch_overlay.enable()
        self.assertEqual(REGISTRY.enabled(), ["prologue_downcast", "downcast_mm",
                                              "bmm_prologue", "template_fill_order",
                                              "matmul_meta", "tensorcore_mm", "gelu_add",
                                              "param_cast_cache"])

    def test_a_drifted_overlay_is_refused_and_the_rest_stays(self):
        drift = ("--- a/torch/_inductor/kernel/mm.py\n+++ b/torch/_inductor/kernel/mm.py\n"
                 "@@ -1,2 +1,2 @@ def tuned_mm(\n-no such line\n+an edit\n context\n")
        with probe_overlay("drifted", "mm.drifted.diff", drift):
            before = [s.target for s in REGISTRY.swaps]
            with self.assertRaisesRegex(OverlayError, r"'drifted' refused: .*mm.py:1 "
                                        r"\(def tuned_mm\(\) does not apply to torch "
                                        + re.escape(torch.__version__)):
                torch_overlay.enable("drifted")
            self.assertEqual([s.target for s in REGISTRY.swaps], before)
            self.assertIn("drifted", REGISTRY.refused())

    def test_an_overlay_whose_module_does_not_import_is_refused_at_enable(self):
        # a new module written against another torch's internals: refused here with the
        # reason, not an ImportError in the middle of a compile
        flag = ("--- a/torch/_inductor/config.py\n+++ b/torch/_inductor/config.py\n"
                "@@ -1,1 +1,2 @@\n import os\n+unimportable: bool = False\n")
        with probe_overlay("unimportable", "config.unimportable.diff", flag,
                           modules=("fx_passes.no_such_module",)):
            before = [s.target for s in REGISTRY.swaps]
            with self.assertRaisesRegex(OverlayError, r"'unimportable' refused: its modules "
                                        r"do not import: \w+Error: .*no_such_module"):
                torch_overlay.enable("unimportable")
            self.assertEqual([s.target for s in REGISTRY.swaps], before)
            self.assertNotIn("unimportable", REGISTRY.enabled())
            self.assertNotIn("unimportable", inductor_config._config)  # its flag went too

    def test_kill_switch(self):
        import os
        from unittest import mock

        with mock.patch.dict(os.environ, {"TORCH_OVERLAY_DISABLE": "1"}):
            self.assertEqual(torch_overlay.enable(), [])

    def test_enable_imports_the_modules_a_package_init_edit_names(self):
        # upstream's heuristics/template/__init__.py imports each heuristic so that it
        # registers; enabling does it for the overlay's (its kernel does not import it),
        # under the package's older name too (torch 2.11's template_heuristics)
        probe = textwrap.dedent("""
            import sys, torch_overlay
            torch_overlay.enable()
            from torch._inductor.kernel.mm_tensorcore import tensorcore_mm_template as t
            from torch._inductor.heuristics.template.registry import get_template_heuristic
            print(type(get_template_heuristic(t.uid, "cuda", "tensorcore_mm")).__name__)
        """)
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             env={**os.environ, "TORCH_OVERLAY_DISABLE": ""})
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.split()[-1], "TensorCoreMMTemplateConfigHeuristic")

    def test_an_older_torchs_difference_is_adapted_outside_the_module(self):
        # the kernel unpacks (node, choice) as the pinned release returns; torch 2.11
        # returns the node alone, which _compat pairs up as the registry loads the module
        from torch_overlay import _compat

        module = types.SimpleNamespace(__name__="torch._inductor.kernel.mm_tensorcore",
                                       autotune_select_algorithm=lambda *a, **k: "node")
        with mock.patch("inspect.getsource", return_value="return autotune_select_algorithm("):
            _compat.adapt(module)
        self.assertEqual(module.autotune_select_algorithm(), ("node", None))
        with mock.patch("inspect.getsource", return_value="node, _ = autotune_select_algorithm("):
            _compat.adapt(module)  # a torch that returns the pair: left as it is
        self.assertEqual(module.autotune_select_algorithm(), ("node", None))

    def test_new_modules_load_once_under_their_upstream_names(self):
        import importlib

        upstream = importlib.import_module("torch._inductor.kernel.mm_tensorcore")
        alias = importlib.import_module("torch_overlay._inductor.kernel.mm_tensorcore")
        self.assertIs(alias, upstream)
        self.assertIsInstance(upstream, types.ModuleType)


class TestChoicesContributor(TestCase):
    def test_composes_with_the_configured_class(self):
        # a thread makes its V.choices from config.inductor_choices_class; downcast_mm's
        # contributor (registered through the 2.15 API, or _compat's on older releases)
        # serves its hooks and the configured class the others
        import threading

        from torch._inductor.choices import InductorChoices
        from torch._inductor.kernel.mm_downcast import DowncastMMChoices
        from torch._inductor.virtualized import V

        class Mine(InductorChoices):
            def uuid(self):
                return "mine"

            def customize_fused_kernel_name(self, fused_name, src_code):
                return "mine_" + fused_name

        seen = {}

        def fresh_thread():
            with inductor_config.patch(inductor_choices_class=Mine):
                handler = V.choices
                seen["name"] = handler.customize_fused_kernel_name("k", "")
                seen["finalize"] = handler._finalize_template_configs.__func__

        thread = threading.Thread(target=fresh_thread)
        thread.start()
        thread.join()
        self.assertEqual(seen["name"], "mine_k")
        self.assertIs(seen["finalize"], DowncastMMChoices._finalize_template_configs)

    def test_withdrawn_while_disabled(self):
        # the contributor reads downcast_mm's flag, which disabling removes: a compile then
        # must not meet it
        from torch._inductor.choices import registered_inductor_choices

        from torch_overlay.testing import get_code

        def linear(x, w):
            with torch.autocast("cuda", torch.bfloat16):
                return torch.nn.functional.linear(x, w)

        args = torch.randn(16, 2048), torch.randn(2048, 2048)
        try:
            torch_overlay.disable("downcast_mm")
            self.assertNotIn("downcast_mm", dict(registered_inductor_choices()))
            self.assertNotIn("downcast_mm_template", inductor_config._config)
            self.assertIn("extern_kernels.mm", get_code(torch.compile(linear), *args)[0])
        finally:
            torch_overlay.enable()
        self.assertIn("downcast_mm", dict(registered_inductor_choices()))


class TestPackageHoldsWhatRuns(TestCase):
    """Every ``.diff`` in the package is an edit of an upstream file that some overlay
    applies at run time on some supported release; the parts' edits of the files the
    series adds (``series/``, read by tools/export_patches.py) are not shipped."""

    PACKAGE = pathlib.Path(torch_overlay.__file__).resolve().parent
    REPO = PACKAGE.parent

    def runtime_edits(self) -> set[pathlib.Path]:
        older = {f"torch-{release}" for release in torch_overlay.SUPPORTED_TORCH[:-1]}
        runs = set()
        for overlay in torch_overlay.OVERLAYS:
            for primary in overlay.edit_files:
                runs.add(primary)
                runs.update(v for v in variant_files(primary) if variant_name(v) in older)
        names = {n for o in torch_overlay.OVERLAYS for n in (o.name, *o.parts, *o.safety_nets)}
        runs.update(p for p in (self.PACKAGE / "_logging").glob("_registrations.*.diff")
                    if p.name.split(".")[1] in names)
        return runs

    def problems(self, found: set[pathlib.Path]) -> list[str]:
        runs = self.runtime_edits()
        out = [f"{p}: applied by no overlay on any supported release"
               for p in sorted(found - runs)]
        # the files the overlays add are whole here: an edit of one runs nowhere
        added = {f"torch/_inductor/{p.relative_to(OVERLAY_ROOT)}"
                 for o in torch_overlay.OVERLAYS for p in o.module_files().values()}
        added |= {f"torch/_inductor/{p.relative_to(OVERLAY_ROOT)}"
                  for p in OVERLAY_ROOT.rglob("*.jinja")}
        out += [f"{p}: edits {FileDiff.read(p).upstream}, which the overlays add whole; "
                "a part's edit of it belongs in series/"
                for p in sorted(runs) if FileDiff.read(p).upstream in added]
        return out

    def test_every_diff_in_the_package_runs(self):
        self.assertEqual(self.problems(set(self.PACKAGE.rglob("*.diff"))), [])

    def test_a_diff_that_runs_nowhere_is_found(self):
        from torch_overlay import _registry

        with tempfile.TemporaryDirectory() as tmp:
            part = pathlib.Path(tmp) / "mm_tensorcore.tensorcore_mm_bmm.diff"
            shutil.copyfile(self.REPO / "series/torch/_inductor/kernel" / part.name, part)
            unknown = pathlib.Path(tmp) / "compile_fx.no_such_overlay.diff"
            shutil.copyfile(OVERLAY_ROOT / "compile_fx.matmul_meta.diff", unknown)
            real = _registry._diff_files()
            with mock.patch.object(_registry, "_diff_files", lambda: sorted(real + [part, unknown])):
                problems = self.problems(set(self.PACKAGE.rglob("*.diff")) | {part, unknown})
        self.assertEqual(len(problems), 2, problems)
        self.assertRegex(problems[0], r"compile_fx\.no_such_overlay\.diff: applied by no overlay")
        self.assertRegex(problems[1], r"mm_tensorcore\.tensorcore_mm_bmm\.diff: edits "
                                      r"torch/_inductor/kernel/mm_tensorcore\.py, which the "
                                      r"overlays add whole")

    @unittest.skipUnless((REPO / "setup.cfg").exists(), "a source checkout")
    def test_the_package_ships_no_series_file(self):
        # build_py writes what a wheel's purelib holds: the packages and their package_data
        with tempfile.TemporaryDirectory() as tmp:
            tmp = pathlib.Path(tmp)
            for name in ("setup.cfg", "pyproject.toml", "README.md"):
                shutil.copyfile(self.REPO / name, tmp / name)
            for tree in ("torch_overlay", "series"):
                shutil.copytree(self.REPO / tree, tmp / tree,
                                ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
            subprocess.run([sys.executable, "-c", "from setuptools import setup; "
                            "setup(script_args=['-q', 'build_py', '--build-lib', 'out'])"],
                           cwd=tmp, check=True, capture_output=True)
            shipped = {p.relative_to(tmp / "out") for p in (tmp / "out").rglob("*") if p.is_file()}
        self.assertIn(pathlib.Path("torch_overlay/_inductor/kernel/mm_tensorcore.py"), shipped)
        self.assertEqual(sorted(str(p) for p in shipped if p.parts[0] != "torch_overlay"), [])
        self.assertEqual(sorted(p for p in shipped if p.suffix == ".diff"),
                         sorted(p.relative_to(self.REPO) for p in self.runtime_edits()))


class TestTemplateEdits(TestCase):
    """A ``.jinja`` edit: the live TritonTemplate objects built from the file render it."""

    def bmm_template(self):
        from torch._inductor.kernel.bmm import bmm_template

        return bmm_template

    def upcast_bmm_code(self):
        from torch_overlay.testing import get_code
        from torch_overlay.testing.golden import normalize

        a = torch.randn(2, 32, 64, device="cuda", dtype=torch.float16)
        b = torch.randn(2, 64, 96, device="cuda")
        with inductor_config.patch(max_autotune=True, max_autotune_gemm_backends="TRITON",
                                   **{"test_configs.max_mm_configs": 1}):
            torch._dynamo.reset()
            return normalize(get_code(torch.compile(lambda a, b: torch.bmm(a.to(b.dtype), b)), a, b))

    def test_enable_renders_the_edit_and_disable_restores(self):
        template = self.bmm_template()
        torch_overlay.disable(["bmm_prologue"])
        try:
            stock = (template.template, template.src_hash)
            torch_overlay.enable(["bmm_prologue"])
            self.assertNotEqual(template.src_hash, stock[1])
            torch_overlay.disable(["bmm_prologue"])
            self.assertEqual((template.template, template.src_hash), stock)
        finally:
            torch_overlay.enable()

    def test_flag_off_is_stock_code(self):
        torch_overlay.disable(["bmm_prologue"])
        try:
            stock = self.upcast_bmm_code()
        finally:
            torch_overlay.enable()
        with inductor_config.patch(bmm_prologue_fusion=False):
            off = self.upcast_bmm_code()
        with inductor_config.patch(bmm_prologue_fusion=True, prologue_fusion=True):
            on = self.upcast_bmm_code()
        self.assertEqual(off, stock)
        self.assertNotEqual(on, stock)
        self.assertIn("PROLOGUE_LOADS : tl.constexpr = True", on)

    def test_an_edit_of_another_template_is_refused(self):
        diff = FileDiff.read(OVERLAY_ROOT / "kernel/templates/triton_bmm.bmm_prologue.diff")
        other = dataclasses.replace(diff, upstream=diff.upstream.replace("triton_bmm",
                                                                         "triton_mm"))
        with self.assertRaisesRegex(EditError, "does not apply|no Triton template"):
            plan_swaps([other])


if __name__ == "__main__":
    run_tests()
