"""tools/export_patches.py: the upstream series is the overlays' own files, as they are.

The test runs against the patched and the pristine torch copies (overlays off) are
``python tools/export_patches.py --check``, a CI step of its own (.ci/run); here they run
only with ``TORCH_OVERLAY_EXPORT_GOLDENS=1``.
"""
from __future__ import annotations

import contextlib
import io
import os
import pathlib
import re
import shutil
import sys
import tempfile
import types
import unittest
from unittest import mock

import torch
from torch._inductor.test_case import run_tests, TestCase


REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))

import export_patches  # noqa: E402

NAMES = ("prologue_downcast", "downcast_mm", "bmm_prologue", "downcast_mm_bmm",
         "template_fill_order", "matmul_meta", "tensorcore_mm",
         "tensorcore_mm_bmm", "tensorcore_mm_splitk", "tensorcore_mm_dynamic",
         "tensorcore_mm_autotune", "tensorcore_mm_measure", "tensorcore_mm_decode", "gelu_add",
         "tensorcore_mm_gelu_add", "param_cast_cache", "tensorcore_mm_param_cast_cache")
# further patches of an overlay (Overlay.parts), each editing an earlier patch's modules
PARTS = {**{f"tensorcore_mm_{p}": "tensorcore_mm"
            for p in ("bmm", "splitk", "dynamic", "autotune", "measure", "decode")},
         "downcast_mm_bmm": "bmm_prologue",
         "tensorcore_mm_gelu_add": "gelu_add",
         "tensorcore_mm_param_cast_cache": "param_cast_cache"}

def files(d: pathlib.Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def committed_series() -> list[pathlib.Path]:
    series = export_patches.PATCHES / "series"
    return [export_patches.PATCHES / n for n in series.read_text().split()]


def edited_source(path_suffix: str, *replacements: str):
    """A read_source that sees one overlay file edited (and not re-exported): each
    (old, new) pair of ``replacements`` replaces the first ``old``."""
    real = export_patches.read_source

    def read(path: pathlib.Path) -> bytes:
        data = real(path)
        if str(path).endswith(path_suffix):
            text = data.decode()
            for old, new in zip(replacements[::2], replacements[1::2]):
                assert old in text, f"{old!r} not in {path}"
                text = text.replace(old, new, 1)
            return text.encode()
        return data

    return mock.patch.object(export_patches, "read_source", read)


def on_pinned_torch() -> bool:
    try:
        export_patches.require_pinned_torch()
        return True
    except export_patches.ExportError:
        return False


@unittest.skipUnless(on_pinned_torch(), "the series is made against the torch of "
                     "patches/UPSTREAM_PIN (the newest validated release): CI exports it there")
class TestExportPatches(TestCase):
    def export(self, tmp: pathlib.Path, name: str) -> pathlib.Path:
        out = tmp / name
        export_patches.build_series(out, tmp / f"work_{name}")
        return out

    def test_deterministic_and_up_to_date(self):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = pathlib.Path(tmp)
            a, b = self.export(tmp, "a"), self.export(tmp, "b")
            self.assertEqual(files(a), files(b))
            self.assertEqual(
                export_patches.stale(export_patches.PATCHES, a), [],
                "patches/ is stale: run `python tools/export_patches.py` and commit patches/")
            series = (a / "series").read_text().split()
            self.assertEqual(len(series), len(NAMES))
            for name, patch in zip(NAMES, series):
                self.assertIn(name, patch)
            pin = (a / "UPSTREAM_PIN").read_text()
            import torch

            self.assertIn(torch.version.git_version, pin)

    def test_edited_module_without_export_is_stale(self):
        with edited_source("fx_passes/gelu_add.py", "def gelu_add_pass(",
                           "# an edit not exported\ndef gelu_add_pass("):
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                rc = export_patches.check(run_tests=False)
        self.assertEqual(rc, 1)
        self.assertIn("patches/ is stale", err.getvalue())
        self.assertIn("gelu_add", err.getvalue())
        self.assertIn("run `python tools/export_patches.py`", err.getvalue())

    def test_edited_diff_without_export_is_stale(self):
        with tempfile.TemporaryDirectory() as tmp, \
                edited_source("config.gelu_add.diff", "+gelu_add_fusion: bool = False",
                              "+gelu_add_fusion: bool = False  # an edit not exported"):
            fresh = self.export(pathlib.Path(tmp), "fresh")
            problems = export_patches.stale(export_patches.PATCHES, fresh)
        number = NAMES.index("gelu_add") + 1
        self.assertRegex(problems[0], rf"^differs: {number:04d}-inductor-gelu_add-")
        # a later patch of config.py differs too: its index line hashes the file
        for later in problems[1:]:
            name = later.removeprefix("differs: ")
            self.assertGreater(int(name[:4]), number, problems)
            self.assertIn("--- a/torch/_inductor/config.py",
                          (export_patches.PATCHES / name).read_text(), problems)

    def test_part_diff_that_is_not_the_edit_is_refused(self):
        # the module's file changed where the part's edit is: the part's .diff no longer
        # takes it back to the overlay's own patch
        with tempfile.TemporaryDirectory() as tmp, \
                edited_source("kernel/mm_tensorcore.py", "def _lower_gemv(", "def _lower_gemv_(",
                              "result, sums = _lower_gemv(", "result, sums = _lower_gemv_("):
            with self.assertRaisesRegex(export_patches.ExportError,
                                        r"part tensorcore_mm_decode: .*mm_tensorcore\.tensorcore_mm_decode"
                                        r"\.diff is not the edit"):
                self.export(pathlib.Path(tmp), "x")

    def test_diff_that_does_not_apply_is_refused(self):
        with tempfile.TemporaryDirectory() as tmp, \
                edited_source("compile_fx.matmul_meta.diff",
                              "     model_ = _recursive_pre_grad_passes(model_, example_inputs_)",
                              "     model_ = drifted"):
            with self.assertRaisesRegex(export_patches.ExportError,
                                        r"compile_fx\.matmul_meta\.diff does not apply"):
                self.export(pathlib.Path(tmp), "x")

    def test_patch_has_the_hunks_of_the_diff(self):
        # two lines of context instead of git's three: git applies it, but would write
        # the edit as another hunk, so the patch would not carry the .diff's hunk
        text = (REPO / "torch_overlay" / "_inductor" / "config.gelu_add.diff").read_text()
        header = re.search(r"^@@ -(\d+),6 \+(\d+),11 @@(.*\n)", text, re.M)
        lines = text[header.end():].splitlines(True)
        shorter = f"@@ -{int(header[1]) + 1},4 +{int(header[2]) + 1},9 @@{header[3]}"
        with tempfile.TemporaryDirectory() as tmp, \
                edited_source("config.gelu_add.diff",
                              header[0] + lines[0], shorter,  # the first context line
                              lines[-2] + lines[-1], lines[-2]):  # and the last
            with self.assertRaisesRegex(export_patches.ExportError, "config.gelu_add.diff applies, but git "
                                        "writes the edit of torch/_inductor/config.py as other hunks"):
                self.export(pathlib.Path(tmp), "x")

    def test_series_shape(self):
        patches = committed_series()
        self.assertEqual(len(patches), len(NAMES))
        for name, patch in zip(NAMES, patches):
            with self.subTest(patch=patch.name):
                text = patch.read_text()
                self.assertIn(f"Subject: [PATCH] [inductor] {name}: ", text)
                parsed = export_patches.parse_diff(text)
                if name in PARTS:
                    # a part edits an earlier patch's new modules, under its overlay's flag
                    module = ("torch/_inductor/kernel/mm_downcast.py" if name == "downcast_mm_bmm"
                              else "torch/_inductor/kernel/mm_tensorcore.py")
                    self.assertIn(module, parsed)
                    self.assertFalse(parsed[module].new_file)
                else:
                    # each overlay's patch declares its feature's flag in config.py
                    self.assertIn("torch/_inductor/config.py", parsed)
                    self.assertTrue(parsed["torch/_inductor/config.py"].added)
                added = [(path, line) for path, fp in parsed.items() for line in fp.added.values()]
                # no added line names the project, tests included (the GPU-free harness
                # reaches them from outside, as a pytest plugin)
                self.assertEqual([(p, l) for p, l in added if "torch_overlay" in l], [])
                self.assertIn(f"test/inductor/test_{name}.py", parsed)

    def test_exported_tests_are_byte_identical(self):
        with tempfile.TemporaryDirectory() as tmp:
            tree = export_patches.pristine_tree(pathlib.Path(tmp) / "tree")
            export_patches.apply_series(tree, export_patches.PATCHES)
            exported = sorted((tree / "test" / "inductor").glob("test_*.py"))
            self.assertEqual([p.name for p in exported], sorted(f"test_{n}.py" for n in NAMES))
            for path in exported:
                with self.subTest(test=path.name):
                    self.assertEqual(path.read_bytes(),
                                     (REPO / "test" / "inductor" / path.name).read_bytes())
            # and every new module is the overlay's file, byte for byte
            for overlay in export_patches.collect():
                for upstream, source in overlay.files.items():
                    self.assertEqual((tree / upstream).read_bytes(), source.read_bytes(), upstream)

    def test_top_level_reassignment_is_found(self):
        source = (
            "import torch\n"
            "from torch._inductor.scheduler import Scheduler\n"
            "from torch._inductor.lowering import lowerings\n"
            "class Mine:\n"
            "    x = 1\n"
            "Mine.y = 2\n"
            "torch._inductor.lowering.lowerings[torch.ops.aten.mm.default] = None\n"
            "Scheduler.x = None\n"
            "if True:\n"
            "    lowerings[\n"
            "        torch.ops.aten.bmm.default\n"
            "    ] = None\n"
            "setattr(Scheduler, 'y', None)\n"
            "def f():\n"
            "    Scheduler.z = None\n"
            "table = {}\n"
        )
        hits = export_patches.top_level_reassignments(source, set(range(1, 17)), True, "new.py")
        self.assertEqual([h.split(":")[1] for h in hits], ["7", "8", "10", "13"])
        # in an upstream file, its own classes are upstream objects too
        hits = export_patches.top_level_reassignments(source, {6}, False, "torch/_inductor/x.py")
        self.assertEqual(len(hits), 1)
        # only added lines count
        self.assertEqual(export_patches.top_level_reassignments(source, {1, 2, 16}, True, "new.py"), [])

    def test_series_applies_and_compiles(self):
        # staleness is test_deterministic_and_up_to_date's; the series-wide formatter and
        # lint run (40 s) is CI's `export_patches --check` step, TestUpstreamStyle the rule's
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            rc = export_patches.check(run_tests=False, stale_step=False, style_step=False)
        self.assertEqual(rc, 0, out.getvalue())
        self.assertIn("applies and byte-compiles", out.getvalue())

    @unittest.skipUnless(os.environ.get("TORCH_OVERLAY_EXPORT_GOLDENS") == "1",
                         "the test runs are the CI step `python tools/export_patches.py --check`")
    def test_patched_passes_pristine_fails(self):
        self.assertEqual(export_patches.check(run_tests=True), 0)


class TestSafetyNets(TestCase):
    """An overlay's safety nets (Overlay.safety_nets) are applied at run time, never
    exported: no patch, no series/ diff, no exported test, nothing a patch adds."""

    def test_applied_at_run_time_not_exported(self):
        import torch_overlay
        from torch_overlay._registry import REGISTRY

        nets = {n: o.name for o in torch_overlay.OVERLAYS for n in o.safety_nets}
        self.assertEqual(nets, {"tensorcore_mm_fallback": "tensorcore_mm"})
        runs = [p.name for p in REGISTRY.get("tensorcore_mm").edit_files]
        self.assertIn("compile_fx.tensorcore_mm_fallback.diff", runs)
        self.assertIn("config.tensorcore_mm_fallback.diff", runs)
        overlays = export_patches.collect()
        self.assertEqual([o.name for o in overlays], list(NAMES))
        exported = [d.name for o in overlays for d in o.diffs]
        self.assertFalse([d for d in exported if d.endswith(".tensorcore_mm_fallback.diff")])
        self.assertFalse(list(export_patches.SERIES.rglob("*.tensorcore_mm_fallback.diff")))
        self.assertFalse((REPO / "test/inductor/test_tensorcore_mm_fallback.py").exists())
        self.assertFalse((export_patches.PATCHES / "tensorcore_mm_fallback.md").exists())

    def test_no_patch_adds_the_whole_graph_retry(self):
        # the decline counters tensorcore_mm_fallback:<reason> are the series'; the
        # retry, its flag and its counter are not
        for patch in committed_series():
            parsed = export_patches.parse_diff(patch.read_text())
            added = [line for fp in parsed.values() for line in fp.added.values()]
            self.assertEqual([line for line in added if re.search(
                r"compile_with_stock_fallback|tensorcore_mm_fallback\b(?!:)|"
                r"tensorcore_mm_fallback:compile_error", line)], [], patch.name)


class TestProfiles(TestCase):
    def test_a_smaller_gpus_profile_may_skip_every_test(self):
        # under the default profile each patch must pass one of its tests; where a smaller
        # GPU offers no mm template (is_big_gpu), a patch's tests may all skip
        self.assertFalse(export_patches.skips_allowed([]))
        self.assertFalse(export_patches.skips_allowed(["--gpu-free-profile=h200"]))
        self.assertTrue(export_patches.skips_allowed(["--gpu-free-profile=l4"]))
        self.assertTrue(export_patches.skips_allowed(["-x", "--gpu-free-profile", "a10g"]))


class TestUpstreamStyle(TestCase):
    """Added lines are held to upstream's formatter and lint; the rest of a file is not."""

    SOURCE = (
        "from typing import Optional\n"
        "\n"
        "x = max(1,\n"
        "        2)\n"
        "y: Optional[int] = None\n"
        "z = 1\n"
    )

    def problems(self, added: set[int], new_file: bool = False) -> list[str]:
        with tempfile.TemporaryDirectory() as tmp:
            tree = pathlib.Path(tmp)
            path = "torch/_inductor/x.py"
            (tree / path).parent.mkdir(parents=True)
            (tree / path).write_text(self.SOURCE)
            lines = self.SOURCE.splitlines()
            fp = export_patches.FilePatch(path, new_file, [], {n: lines[n - 1] for n in added})
            found = export_patches.style_problems(tree, {path: fp})
            self.assertFalse((tree / "pyproject.toml").exists())  # the settings go again
            return found

    def test_only_added_lines_count(self):
        self.assertEqual(self.problems({6}), [])

    def test_a_line_the_formatter_rewrites(self):
        (found,) = self.problems({3, 4})
        self.assertRegex(found, r"^torch/_inductor/x\.py:3: ruff format rewrites 2 added")

    def test_a_lint_finding(self):
        (found,) = self.problems({5})
        self.assertRegex(found, r"^torch/_inductor/x\.py:5:\d+: UP045 ")

    def test_tools_beside_the_interpreter_off_path(self):
        # a virtualenv's python run without activating it: its ruff and usort, not PATH's
        here = os.path.dirname(sys.executable)
        if not all(shutil.which(t, path=here) for t in ("ruff", "usort")):
            self.skipTest("ruff and usort are not installed beside this interpreter")
        with mock.patch.dict(os.environ, {"PATH": os.devnull}):
            (found,) = self.problems({3, 4})
        self.assertRegex(found, r"^torch/_inductor/x\.py:3: ruff format rewrites 2 added")

    def test_audit_without_the_style_step(self):
        # --no-style-step (a GPU machine without ruff and usort): the other checks only
        part = types.SimpleNamespace(flag="f", part_of="o", tests={}, diffs=[])
        with tempfile.TemporaryDirectory() as tmp:
            tree = pathlib.Path(tmp)
            (tree / "torch").mkdir()
            (tree / "torch/x.py").write_text(self.SOURCE)
            patch = tree / "x.patch"
            patch.write_text(
                "diff --git a/torch/x.py b/torch/x.py\nnew file mode 100644\n"
                "--- /dev/null\n+++ b/torch/x.py\n@@ -0,0 +1,6 @@\n"
                + "".join("+" + line + "\n" for line in self.SOURCE.splitlines()))
            with mock.patch.object(export_patches, "style_problems",
                                   return_value=["x"]) as style:
                self.assertEqual(export_patches.audit_patch(tree, patch, part, style=False), [])
                style.assert_not_called()
                self.assertEqual(export_patches.audit_patch(tree, patch, part), ["x"])

    def test_style_fix(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "x.py"
            path.write_text("from __future__ import annotations\n" + self.SOURCE)
            left = export_patches.style_fix([path])
            self.assertEqual(left, [])
            self.assertIn("x = max(1, 2)\ny: int | None = None\n", path.read_text())


MODULE = "torch/_inductor/kernel/mm_tensorcore.py"


def sources(changed: dict[pathlib.Path, str]):
    """A read_source that sees the files of ``changed`` with the given text."""
    real = export_patches.read_source
    return mock.patch.object(export_patches, "read_source",
                             lambda path: changed[path].encode() if path in changed else real(path))


class TestSeriesFiles(TestCase):
    """--show and --rebase-parts on the files the series adds: no torch needed."""

    def committed(self, path: str, upto: int) -> str | None:
        """``path`` as the committed patches 1..upto leave it (None: not there)."""
        with tempfile.TemporaryDirectory() as tmp:
            repo = pathlib.Path(tmp)
            for patch in committed_series()[:upto]:
                export_patches.git(repo, "apply", f"--include={path}", str(patch))
            return (repo / path).read_text() if (repo / path).exists() else None

    def test_show_is_the_file_as_the_committed_patches_leave_it(self):
        number = {n: i + 1 for i, n in enumerate(NAMES)}
        for after in ("tensorcore_mm", "0007", "9", "tensorcore_mm_decode", "tensorcore_mm_gelu_add"):
            upto = number.get(after) or int(after)
            self.assertEqual(export_patches.show(MODULE, after), self.committed(MODULE, upto), after)
        # a part's edit of an earlier patch's test file
        test = "test/inductor/test_tensorcore_mm.py"
        bmm = number["tensorcore_mm_bmm"]
        self.assertEqual(export_patches.show(test, "tensorcore_mm_bmm"), self.committed(test, bmm))
        self.assertNotEqual(self.committed(test, bmm), self.committed(test, bmm - 1))
        # the last patch leaves the whole file; the project path names it too
        whole = (REPO / "torch_overlay/_inductor/kernel/mm_tensorcore.py").read_text()
        self.assertEqual(export_patches.show("torch_overlay/_inductor/kernel/mm_tensorcore.py"), whole)

    def test_show_before_the_patch_that_adds_it(self):
        meta, adds = NAMES.index("matmul_meta") + 1, NAMES.index("tensorcore_mm") + 1
        with self.assertRaisesRegex(export_patches.ExportError,
                                    rf"not in the tree after patch {meta:04d} \(matmul_meta\); "
                                    rf"patch {adds:04d} \(tensorcore_mm\) adds it"):
            export_patches.show(MODULE, "matmul_meta")
        past = str(len(NAMES) + 1)
        with self.assertRaisesRegex(export_patches.ExportError, rf"no patch '{past}' in the series"):
            export_patches.show(MODULE, past)

    def test_show_command(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = export_patches.main(["--show", MODULE, "--after", "tensorcore_mm_splitk"])
        self.assertEqual(rc, 0)
        self.assertEqual(out.getvalue(), self.committed(MODULE, NAMES.index("tensorcore_mm_splitk") + 1))

    def rebased(self, path: str) -> tuple[dict[pathlib.Path, str], str | None]:
        with tempfile.TemporaryDirectory() as tmp:
            return export_patches.rebased_parts(export_patches.collect(), path, pathlib.Path(tmp))

    def test_rebase_of_unedited_files_rewrites_nothing(self):
        overlays = export_patches.collect()
        targets = {export_patches.diff_target(d) for o in overlays for d in o.diffs
                   if d.is_relative_to(export_patches.SERIES)}
        self.assertIn("test/inductor/test_tensorcore_mm.py", targets)
        self.assertIn("torch/_inductor/kernel/templates/tensorcore_mm.py.jinja", targets)
        for path in sorted(targets):
            texts, problem = self.rebased(path)
            self.assertIsNone(problem)
            self.assertEqual(sorted(texts), sorted(d for _, d in export_patches.part_diffs(overlays, path)))
            for diff, text in texts.items():
                self.assertEqual(text, diff.read_text(), diff)

    def test_rebase_carries_an_edit_of_a_context_line(self):
        # a line of the module's first patch that a part's hunk shows as context: that
        # hunk no longer applies as it is, and the part's diff takes the new line
        module = REPO / "torch_overlay/_inductor/kernel/mm_tensorcore.py"
        old = "    # to the 16-bit dtype and back: the value eager autocast holds in memory"
        new = "    # to the 16-bit dtype and back: the value eager autocast keeps in memory"
        edited = module.read_text().replace(old, new)
        with sources({module: edited}):
            with self.assertRaisesRegex(export_patches.ExportError, r"is not the edit"):
                export_patches.show(MODULE, "tensorcore_mm")
            texts, problem = self.rebased(MODULE)
        self.assertIsNone(problem)
        changed = {d: t for d, t in texts.items() if t != d.read_text()}
        self.assertEqual(len(changed), 1, list(changed))
        ((diff, text),) = changed.items()
        # the context line's prefix: a space
        self.assertEqual(text, diff.read_text().replace(f"\n {old}\n", f"\n {new}\n"))
        # with the rewritten diff the series holds the edit from the module's first patch on
        with sources({module: edited, diff: text}):
            first = export_patches.show(MODULE, "tensorcore_mm")
            self.assertIn(new, first)
            upto = NAMES.index("tensorcore_mm") + 1
            self.assertEqual(first, self.committed(MODULE, upto).replace(old, new))

    def test_rebase_of_a_file_no_part_edits(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = export_patches.main(["--rebase-parts", "torch_overlay/_inductor/fx_passes/gelu_add.py"])
        self.assertEqual(rc, 1)
        self.assertIn("torch/_inductor/fx_passes/gelu_add.py: not a file the series adds that a "
                      "part edits", err.getvalue())

    def test_rebase_names_the_part_whose_lines_changed(self):
        module = REPO / "torch_overlay/_inductor/kernel/mm_tensorcore.py"
        edited = module.read_text().replace("def _lower_gemv(", "def _lower_gemv_(")
        with sources({module: edited}):
            texts, problem = self.rebased(MODULE)
        self.assertEqual(texts, {})
        self.assertRegex(problem, r"^part tensorcore_mm_decode: series/torch/_inductor/kernel/"
                                  r"mm_tensorcore\.tensorcore_mm_decode\.diff no longer applies "
                                  r".*edit it by hand")


class TestPinnedTorch(TestCase):
    def test_another_torch_is_refused_naming_both(self):
        other = dict(export_patches.torch_info(), torch="2.99.0", git_version="f" * 40)
        with mock.patch.object(export_patches, "torch_info", lambda: other):
            with self.assertRaisesRegex(export_patches.ExportError,
                                        r"targets the torch of patches/UPSTREAM_PIN \(git \w{12}\); "
                                        r"this is torch 2\.99\.0 \(git ffffffffffff\)"):
                export_patches.require_pinned_torch()
            self.assertEqual(export_patches.main(["--check", "--no-tests"]), 1)


if __name__ == "__main__":
    run_tests()
