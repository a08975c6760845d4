# Owner(s): ["module: inductor"]
"""tools/apply.py: install/remove of the activation hook, status, run, demo, refusals."""
import importlib.util
import os
import pathlib
import subprocess
import sys
from unittest import mock

from torch._inductor.test_case import run_tests, TestCase

import torch_overlay

REPO = pathlib.Path(__file__).resolve().parent.parent
APPLY = REPO / "tools" / "apply.py"
spec = importlib.util.spec_from_file_location("apply_tool", APPLY)
apply_tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(apply_tool)

# what a user's process reports once torch.compile has imported Inductor
PROBE = ("import torch._inductor.compile_fx, torch_overlay;"
         "print('enabled=' + ','.join(torch_overlay._registry.REGISTRY.enabled()))")


def snapshot(directory: pathlib.Path) -> dict:
    return {p.name: (p.is_dir(), p.stat().st_size if p.is_file() else None)
            for p in directory.iterdir()}


class TestApply(TestCase):
    def setUp(self):
        super().setUp()
        self.site = apply_tool.site_packages()
        self.pth = self.site / apply_tool.PTH_NAME
        # a developer's own activation survives the test
        self.saved = self.pth.read_text() if self.pth.exists() else None
        if self.saved is not None:
            self.pth.unlink()
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("TORCH_OVERLAY", "TORCH_OVERLAY_DISABLE", "TORCH_OVERLAY_FORCE")}
        # without the activation conftest gives the suite's child processes: these tests
        # start processes with and without it themselves
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in self.env.get("PYTHONPATH", "").split(os.pathsep)
            if p and not os.path.basename(p).startswith("torch_overlay_children_"))

    def tearDown(self):
        if self.pth.exists():
            self.pth.unlink()
        if self.saved is not None:
            self.pth.write_text(self.saved)
        super().tearDown()

    def run_cmd(self, *args, env=None):
        return subprocess.run(list(args), capture_output=True, text=True, timeout=600,
                              env=env or self.env, cwd=REPO)

    def apply(self, *args, env=None):
        return self.run_cmd(sys.executable, str(APPLY), *args, env=env)

    def test_install_activates_every_process_and_remove_restores_site_packages(self):
        before = snapshot(self.site)
        out = self.apply()
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn(f"installed {self.pth}", out.stdout)
        self.assertIn("activation hook: installed", out.stdout)
        names = torch_overlay.load_overlays()
        probe = self.run_cmd(sys.executable, "-c", PROBE)
        self.assertIn("enabled=" + ",".join(names), probe.stdout, probe.stderr)
        # the kill switch wins over the hook
        killed = self.run_cmd(sys.executable, "-c", PROBE,
                              env=dict(self.env, TORCH_OVERLAY_DISABLE="1"))
        self.assertIn("enabled=\n", killed.stdout, killed.stderr)
        out = self.apply("--remove")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(snapshot(self.site), before)
        probe = self.run_cmd(sys.executable, "-c", PROBE)
        self.assertIn("enabled=\n", probe.stdout, probe.stderr)

    def test_status(self):
        out = self.apply("status")
        self.assertEqual(out.returncode, 0, out.stderr)
        import torch
        import triton

        self.assertIn(f"torch {torch.__version__}, triton {triton.__version__}", out.stdout)
        for name in torch_overlay.load_overlays():
            self.assertRegex(out.stdout, rf"(?m)^{name}: ")
        self.assertIn("activation hook: not installed", out.stdout)

    def test_run_activates_one_command_only(self):
        names = torch_overlay.load_overlays()
        out = self.apply("run", "--", sys.executable, "-c", PROBE)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("enabled=" + ",".join(names), out.stdout)
        # Python 3.11's site reports a sitecustomize that leaves sys.modules without it
        self.assertNotIn("Error in sitecustomize", out.stderr)
        first = names[0]
        out = self.apply("--overlays", first, "run", "--", sys.executable, "-c", PROBE)
        self.assertIn(f"enabled={first}\n", out.stdout, out.stderr)
        self.assertFalse(self.pth.exists())
        out = self.apply("run", "--", sys.executable, "-c", "raise SystemExit(3)")
        self.assertEqual(out.returncode, 3)

    def test_unknown_overlay_is_one_line_and_installs_nothing(self):
        before = snapshot(self.site)
        out = self.apply("--overlays", "nope")
        self.assertEqual(out.returncode, 2)
        self.assertEqual(out.stderr.strip().count("\n"), 0, out.stderr)
        self.assertIn("unknown overlay(s) nope", out.stderr)
        self.assertEqual(snapshot(self.site), before)

    def test_unsupported_torch_and_missing_triton_are_refused(self):
        with mock.patch("torch.__version__", "2.9.1"):
            with self.assertRaisesRegex(apply_tool.UsageError, "torch 2.9.1 is not supported"):
                apply_tool.check_stack(None, force=False)
        with mock.patch.dict(sys.modules, {"triton": None}):
            with self.assertRaisesRegex(apply_tool.UsageError, "triton is missing"):
                apply_tool.check_stack(None, force=False)

    def test_demo(self):
        out = self.apply("demo")
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        self.assertIn("MLP block", out.stdout)
        self.assertIn("overlays: " + ", ".join(torch_overlay.load_overlays()), out.stdout)
        # the diff is of generated Triton code: stock on the left, overlays on the right
        self.assertIn("--- stock inductor", out.stdout)
        self.assertIn("+++ torch_overlay", out.stdout)


if __name__ == "__main__":
    run_tests()
