"""tools/export_patches.py: the upstream series is derived from the overlay code.

The golden run against the patched torch (overlays off) is ``python
tools/export_patches.py --check``, a CI step of its own (.ci/run); here it runs only
with ``TORCH_OVERLAY_EXPORT_GOLDENS=1``.
"""
from __future__ import annotations

import contextlib
import io
import os
import pathlib
import sys
import tempfile
import unittest
from unittest import mock

from torch._inductor.test_case import run_tests, TestCase

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))

import export_patches  # noqa: E402


def files(d: pathlib.Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


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
            self.assertEqual(len(series), 3)
            self.assertIn("matmul_meta", series[0])
            self.assertIn("tensorcore_mm", series[1])
            self.assertIn("gelu_add", series[2])
            pin = (a / "UPSTREAM_PIN").read_text()
            import torch

            self.assertIn(torch.version.git_version, pin)

    def test_edit_without_export_is_stale(self):
        real = export_patches.module_file

        def edited(module):
            path = real(module)
            if not module.endswith("gelu_add"):
                return path
            copy = pathlib.Path(self._tmp) / "gelu_add.py"
            copy.write_text(path.read_text().replace(
                "def gelu_add_pass(", "# an edit not exported\ndef gelu_add_pass(", 1))
            return copy

        with tempfile.TemporaryDirectory() as self._tmp, \
                mock.patch.object(export_patches, "module_file", edited):
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                rc = export_patches.check(run_tests=False)
        self.assertEqual(rc, 1)
        self.assertIn("patches/ is stale", err.getvalue())
        self.assertIn("gelu_add", err.getvalue())
        self.assertIn("run `python tools/export_patches.py`", err.getvalue())

    def test_declaration_stripped_and_imports_rewritten(self):
        path, text = export_patches.export_module("torch_overlay._inductor.kernel.mm_tensorcore")
        self.assertEqual(path, "torch/_inductor/kernel/mm_tensorcore.py")
        for gone in ("REGISTRY", "_registry", "Overlay(", "Hook(", "HOOKS", "torch_overlay._inductor"):
            self.assertNotIn(gone, text)
        self.assertIn("from ..fx_passes import matmul_meta", text)
        self.assertIn("def make_lowering(", text)  # the hooks' build stays
        path, text = export_patches.export_module("torch_overlay._inductor.fx_passes.matmul_meta")
        self.assertNotIn("REGISTRY", text)
        self.assertNotIn("_UPSTREAM", text)  # data only the declaration used
        self.assertIn("def _enabled() -> bool:\n    return True\n", text)
        self.assertIn("torch._inductor.fx_passes.matmul_meta", text)

    def test_lambda_build_is_refused(self):
        from torch_overlay._registry import Hook, Overlay

        overlay = Overlay(name="x", purpose="x", validated={}, modules=("torch_overlay._inductor.x",),
                          hooks=(Hook(owner="torch._inductor.scheduler.Scheduler", attr="flush",
                                      build=lambda original: original),))
        with self.assertRaisesRegex(export_patches.ExportError, "lambda or closure"):
            export_patches.activation(overlay)

    def test_series_applies_and_compiles(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            rc = export_patches.check(run_tests=False)
        self.assertEqual(rc, 0, out.getvalue())
        self.assertIn("applies and byte-compiles", out.getvalue())

    @unittest.skipUnless(os.environ.get("TORCH_OVERLAY_EXPORT_GOLDENS") == "1",
                         "the golden run is the CI step `python tools/export_patches.py --check`")
    def test_patched_torch_reproduces_goldens(self):
        self.assertEqual(export_patches.check(run_tests=True), 0)


if __name__ == "__main__":
    run_tests()
