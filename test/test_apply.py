# Owner(s): ["module: inductor"]
"""tools/apply.py: install/remove of the activation hook, status, run, demo, refusals."""
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import textwrap
import warnings
from unittest import mock

from torch._inductor.test_case import run_tests, TestCase

import torch_overlay
from torch_overlay._autoload import declare_flags, prepend_pythonpath, write_sitecustomize
from torch_overlay._registry import REGISTRY

REPO = pathlib.Path(__file__).resolve().parent.parent
APPLY = REPO / "tools" / "apply.py"
spec = importlib.util.spec_from_file_location("apply_tool", APPLY)
apply_tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(apply_tool)

# what a user's process reports once torch.compile has imported Inductor
PROBE = ("import torch._inductor.compile_fx, torch_overlay;"
         "print('enabled=' + ','.join(torch_overlay._registry.REGISTRY.enabled()))")


# a user's process that sets a flag before anything has compiled; the import of compile_fx
# is what the first torch.compile does, and where the hook enables the overlays
SET_EARLY = textwrap.dedent("""
    import json, sys
    torch_at_start = "torch" in sys.modules
    import torch._inductor.config as c
    declared = {f: getattr(c, f) for f in sys.argv[1:]}
    c.tensorcore_mm_autocast = False
    import torch._inductor.compile_fx, torch_overlay
    print(json.dumps({"torch_at_start": torch_at_start, "declared": declared,
                      "after": {f: getattr(c, f) for f in sys.argv[1:]},
                      "enabled": torch_overlay._registry.REGISTRY.enabled(),
                      "digest": "torch_overlay_digest" in c._config}))
""")
PATCH_EARLY = textwrap.dedent("""
    import json
    import torch._inductor.config as c
    with c.patch(tensorcore_mm_autocast=False):
        import torch._inductor.compile_fx, torch_overlay
        inside = c.tensorcore_mm_autocast
    print(json.dumps({"inside": inside, "after": c.tensorcore_mm_autocast,
                      "enabled": torch_overlay._registry.REGISTRY.enabled()}))
""")
STOCK = textwrap.dedent("""
    import torch._inductor.config as c
    try:
        c.tensorcore_mm_autocast = False
    except AttributeError as e:
        print("AttributeError:", e)
    print("declared:", any(hasattr(c, f) for f in ("autocast_matmul_meta",
          "tensorcore_mm_autocast", "gelu_add_fusion")))
""")


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

    def with_hook(self, env=None):
        """``env`` with the activation hook at interpreter start (as ``apply.py run``)."""
        folder = tempfile.mkdtemp(prefix="torch_overlay_hook_")
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        return prepend_pythonpath(dict(env or self.env), write_sitecustomize(folder))

    def test_flags_can_be_set_before_the_first_compile(self):
        flags = [o.flag for o in torch_overlay.OVERLAYS]
        out = self.run_cmd(sys.executable, "-c", SET_EARLY, *flags, env=self.with_hook())
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        got = json.loads(out.stdout.strip().splitlines()[-1])
        # the hook imports no torch at start, and declares the flags on with the config
        self.assertFalse(got["torch_at_start"])
        self.assertEqual(got["declared"], dict.fromkeys(flags, True))
        # enabling the overlays at the first compile keeps the user's value, and only that
        self.assertEqual(got["after"], dict(dict.fromkeys(flags, True), tensorcore_mm_autocast=False))
        self.assertEqual(got["enabled"], torch_overlay.load_overlays())
        self.assertTrue(got["digest"])

    def test_flags_can_be_patched_before_the_first_compile(self):
        out = self.run_cmd(sys.executable, "-c", PATCH_EARLY, env=self.with_hook())
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        got = json.loads(out.stdout.strip().splitlines()[-1])
        # enabled inside the patch, the flag stays off there and is back on after it
        self.assertEqual(got, {"inside": False, "after": True,
                               "enabled": torch_overlay.load_overlays()})

    def test_log_artifacts_can_be_named_in_torch_logs(self):
        # torch reads $TORCH_LOGS while it is imported: the hook names the artifacts first
        probe = ("import torch\nfrom torch._logging._internal import log_state\n"
                 "print('enabled', log_state.is_artifact_enabled('tensorcore_mm'))")
        env = dict(self.with_hook(), TORCH_LOGS="tensorcore_mm")
        out = self.run_cmd(sys.executable, "-c", probe, env=env)
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        self.assertIn("enabled True", out.stdout)
        stock = self.run_cmd(sys.executable, "-c", probe, env=dict(self.env, TORCH_LOGS="tensorcore_mm"))
        self.assertNotEqual(stock.returncode, 0)  # unknown to a stock torch

    def test_without_the_hook_the_flags_do_not_exist(self):
        out = self.run_cmd(sys.executable, "-c", STOCK)
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        self.assertIn("AttributeError: torch._inductor.config.tensorcore_mm_autocast does not exist",
                      out.stdout)
        self.assertIn("declared: False", out.stdout)

    def test_flags_declared_early_follow_the_selection_and_the_kill_switch(self):
        # in this process: the overlays off, then what the hook does at the config's import
        from torch._inductor import config

        if torch_overlay.killed():
            self.skipTest("TORCH_OVERLAY_DISABLE is set")
        flags = {o.name: o.flag for o in torch_overlay.OVERLAYS}
        self.addCleanup(torch_overlay.enable)
        with mock.patch.dict(os.environ):
            os.environ.pop("TORCH_OVERLAY", None)  # a caller's selection
            torch_overlay.disable()
            with mock.patch.dict(os.environ, {"TORCH_OVERLAY_DISABLE": "1"}):
                declare_flags()
            self.assertFalse(any(f in config._config for f in flags.values()))
            with mock.patch.dict(os.environ, {"TORCH_OVERLAY": "tensorcore_mm"}):
                declare_flags()  # with what it requires
            self.assertEqual([n for n, f in flags.items() if f in config._config],
                             ["matmul_meta", "tensorcore_mm"])
            self.assertTrue(config.tensorcore_mm_autocast)
            config.tensorcore_mm_autocast = False
            torch_overlay.enable()
            # adopted as the user left it; a flag not declared early is turned on
            self.assertFalse(config.tensorcore_mm_autocast)
            self.assertTrue(config.autocast_matmul_meta and config.gelu_add_fusion)
            torch_overlay.disable()  # removes adopted flags as its own
            self.assertFalse(any(f in config._config for f in flags.values()))
            declare_flags()
            torch_overlay.disable()  # and flags declared early that no enable adopted
            self.assertFalse(any(f in config._config for f in flags.values()))
            self.assertEqual(REGISTRY._early, {})

    def test_the_hook_removes_the_flags_of_overlays_it_could_not_enable(self):
        from torch._inductor import config

        from torch_overlay._autoload import activate

        self.addCleanup(torch_overlay.enable)
        torch_overlay.disable()
        declare_flags()
        refusal = torch_overlay.OverlayError("overlay 'x' refused: drift")
        # not assertWarns: it reads every module in sys.modules, and transformers' lazy
        # modules import optional packages (torchvision) when read
        with mock.patch.object(torch_overlay, "enable", side_effect=refusal):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                activate()
        self.assertEqual(
            [str(w.message) for w in caught if "stock Inductor in use" in str(w.message)],
            [f"torch_overlay: overlays not enabled, stock Inductor in use: {refusal}"],
        )
        self.assertFalse(any(o.flag in config._config for o in torch_overlay.OVERLAYS))

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
        # and the command's exit status is run's
        first = names[0]
        out = self.apply("--overlays", first, "run", "--", sys.executable, "-c",
                         PROBE + "; raise SystemExit(3)")
        self.assertIn(f"enabled={first}\n", out.stdout, out.stderr)
        self.assertEqual(out.returncode, 3)
        self.assertFalse(self.pth.exists())

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
