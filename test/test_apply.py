# Owner(s): ["module: inductor"]
"""The torch-overlay command (tools/apply.py in a checkout): install/remove of the
activation hook, status, run, demo, refusals; the flags and log artifacts it gives.

The hook is installed into a temporary virtualenv that sees this environment's packages,
never into this environment's own site-packages, where every other process would meet it."""
import contextlib
import io
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
from torch_overlay import cli
from torch_overlay._autoload import declare_flags, prepend_pythonpath, write_sitecustomize
from torch_overlay._registry import REGISTRY

REPO = pathlib.Path(__file__).resolve().parent.parent
APPLY = REPO / "tools" / "apply.py"

# makes a temporary virtualenv see this environment's packages (their .pth files
# processed, as site does), except the activation hook's
PARENT_SITE = textwrap.dedent("""
    import os, site, sys
    for d in {dirs!r}:
        if os.path.isdir(d) and d not in sys.path:
            sys.path.append(d)
            for name in sorted(os.listdir(d)):
                if name.endswith(".pth") and name != {pth!r}:
                    site.addpackage(d, name, None)
""")


def temporary_env(folder: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """A virtualenv in ``folder`` over this environment's packages: its python and its
    site-packages (where the hook goes)."""
    import site
    import sysconfig

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = pathlib.Path(subprocess.check_output(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        text=True).strip())
    dirs = [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]
    (purelib / "_torch_overlay_parent_site.py").write_text(
        PARENT_SITE.format(dirs=dirs, pth=cli.PTH_NAME))
    (purelib / "_torch_overlay_parent_site.pth").write_text("import _torch_overlay_parent_site\n")
    return python, purelib

# what a user's process reports once torch.compile has imported Inductor
PROBE = ("import torch._inductor.compile_fx, torch_overlay;"
         "print('enabled=' + ','.join(torch_overlay._registry.REGISTRY.enabled()))")


# a user's process that sets one flag and patches another before anything has compiled;
# the import of compile_fx is what the first torch.compile does, and where the hook enables
# the overlays. Setting a flag that is not declared raises AttributeError.
EARLY = textwrap.dedent("""
    import json, sys
    torch_at_start = "torch" in sys.modules
    import torch._inductor.config as c
    declared = {f: getattr(c, f) for f in sys.argv[1:]}
    c.tensorcore_mm_autocast = False
    with c.patch(gelu_add_fusion=False):
        import torch._inductor.compile_fx, torch_overlay
        inside = c.gelu_add_fusion
    print(json.dumps({"torch_at_start": torch_at_start, "declared": declared, "inside": inside,
                      "after": {f: getattr(c, f) for f in sys.argv[1:]},
                      "enabled": torch_overlay._registry.REGISTRY.enabled(),
                      "digest": "torch_overlay_digest" in c._config}))
""")
# a process without the hook: the flags do not exist (cheaper than PROBE: no compile_fx)
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
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = pathlib.Path(tempfile.mkdtemp(prefix="torch_overlay_env_"))
        cls.python, cls.site = temporary_env(cls.tmp / "venv")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)
        super().tearDownClass()

    def setUp(self):
        super().setUp()
        self.pth = self.site / cli.PTH_NAME
        # this environment's own site-packages, which no test may change
        self.own = snapshot(cli.site_packages())
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("TORCH_OVERLAY", "TORCH_OVERLAY_DISABLE", "TORCH_OVERLAY_FORCE")}
        # without the activation conftest gives the suite's child processes: these tests
        # start processes with and without it themselves
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in self.env.get("PYTHONPATH", "").split(os.pathsep)
            if p and not os.path.basename(p).startswith("torch_overlay_children_"))

    def tearDown(self):
        self.pth.unlink(missing_ok=True)
        self.assertEqual(snapshot(cli.site_packages()), self.own)
        super().tearDown()

    def run_cmd(self, *args, env=None, cwd=REPO):
        return subprocess.run([str(a) for a in args], capture_output=True, text=True,
                              timeout=600, env=env or self.env, cwd=cwd)

    def apply(self, *args, env=None):
        return self.run_cmd(self.python, APPLY, *args, env=env)

    def test_install_activates_every_process_and_remove_restores_site_packages(self):
        before = snapshot(self.site)
        out = self.apply()
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn(f"installed {self.pth}", out.stdout)
        self.assertIn("activation hook: installed", out.stdout)
        names = torch_overlay.load_overlays()
        probe = self.run_cmd(self.python, "-c", PROBE)
        self.assertIn("enabled=" + ",".join(names), probe.stdout, probe.stderr)
        # the kill switch wins over the hook
        killed = self.run_cmd(self.python, "-c", PROBE,
                              env=dict(self.env, TORCH_OVERLAY_DISABLE="1"))
        self.assertIn("enabled=\n", killed.stdout, killed.stderr)
        # this environment's processes never see it: stock Inductor has no such flags
        stock = self.run_cmd(sys.executable, "-c", STOCK)
        self.assertEqual(stock.returncode, 0, stock.stderr[-3000:])
        self.assertIn("AttributeError: torch._inductor.config.tensorcore_mm_autocast does not "
                      "exist", stock.stdout)
        self.assertIn("declared: False", stock.stdout)
        out = self.apply("remove")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(snapshot(self.site), before)
        stock = self.run_cmd(self.python, "-c", STOCK)
        self.assertIn("declared: False", stock.stdout, stock.stderr[-3000:])
        # the older spelling of remove
        self.pth.write_text(cli.PTH_LINE)
        printed = io.StringIO()
        with mock.patch.object(cli, "site_packages", return_value=self.site), \
                contextlib.redirect_stdout(printed):
            self.assertEqual(cli.main(["--remove"]), 0)
        self.assertIn(f"removed {self.pth}", printed.getvalue())
        self.assertEqual(snapshot(self.site), before)

    def with_hook(self, env=None):
        """``env`` with the activation hook at interpreter start (as ``apply.py run``)."""
        folder = tempfile.mkdtemp(prefix="torch_overlay_hook_")
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        return prepend_pythonpath(dict(env or self.env), write_sitecustomize(folder))

    def test_flags_can_be_set_and_patched_before_the_first_compile(self):
        flags = [o.flag for o in torch_overlay.OVERLAYS]
        out = self.run_cmd(sys.executable, "-c", EARLY, *flags, env=self.with_hook())
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        got = json.loads(out.stdout.strip().splitlines()[-1])
        # the hook imports no torch at start, and declares the flags on with the config
        self.assertFalse(got["torch_at_start"])
        self.assertEqual(got["declared"], dict.fromkeys(flags, True))
        # enabling the overlays at the first compile keeps the value the user set, and only
        # that; a flag patched off is off inside the patch and back on after it
        self.assertFalse(got["inside"])
        self.assertEqual(got["after"], dict(dict.fromkeys(flags, True), tensorcore_mm_autocast=False))
        self.assertEqual(got["enabled"], torch_overlay.load_overlays())
        self.assertTrue(got["digest"])

    def test_log_artifacts_and_status_before_the_first_compile(self):
        # torch reads $TORCH_LOGS while it is imported: the hook names the artifacts first.
        # Then status, nothing compiled yet: planning the edits imports what the first
        # compile does, and the states are read after it.
        probe = ("import json, torch\nfrom torch._logging._internal import log_state\n"
                 "print('enabled', log_state.is_artifact_enabled('tensorcore_mm'))\n")
        status = ("s = torch_overlay.status()\n"
                  "print(json.dumps([sorted({o.state for o in s.overlays}), len(s.replaced), "
                  "len({f for o in s.overlays for f in o.functions})]))")
        env = dict(self.with_hook(), TORCH_LOGS="tensorcore_mm")
        out = self.run_cmd(sys.executable, "-c", probe + "import torch_overlay\n" + status,
                           env=env)
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        self.assertIn("enabled True", out.stdout)
        states, replaced, edited = json.loads(out.stdout.strip().splitlines()[-1])
        self.assertEqual(states, ["active"])
        self.assertEqual(replaced, edited)
        self.assertGreater(edited, 0)
        env = dict(self.env, TORCH_LOGS="tensorcore_mm")
        stock = self.run_cmd(sys.executable, "-c", probe, env=env)
        self.assertNotEqual(stock.returncode, 0)  # unknown to a stock torch
        # without the hook, importing torch_overlay first names them
        out = self.run_cmd(sys.executable, "-c", "import torch_overlay\n" + probe, env=env)
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        self.assertIn("enabled True", out.stdout)

    def forget_the_hook(self):
        """After a test that ran the hook's steps in this process: the flags as an
        in-process enable leaves them."""
        from torch._inductor import config

        # run last to first
        self.addCleanup(torch_overlay.enable)
        self.addCleanup(lambda: self.assertFalse(
            any(o.flag in config._config for o in torch_overlay.OVERLAYS)))
        self.addCleanup(torch_overlay.disable)
        self.addCleanup(REGISTRY._early_off.clear)
        self.addCleanup(REGISTRY._kept.clear)

    def test_flags_declared_early_follow_the_selection_and_the_kill_switch(self):
        # in this process: the overlays off, then what the hook does at the config's import
        from torch._inductor import config

        if torch_overlay.killed():
            self.skipTest("TORCH_OVERLAY_DISABLE is set")
        flags = {o.name: o.flag for o in torch_overlay.OVERLAYS}
        torch_overlay.disable()
        self.assertFalse(any(f in config._config for f in flags.values()))
        self.forget_the_hook()
        with mock.patch.dict(os.environ):
            os.environ.pop("TORCH_OVERLAY", None)  # a caller's selection
            with mock.patch.dict(os.environ, {"TORCH_OVERLAY_DISABLE": "1"}):
                declare_flags()
            # every flag declared, off: the user's settings code runs
            self.assertEqual({f: getattr(config, f) for f in flags.values()},
                             dict.fromkeys(flags.values(), False))
            torch_overlay.disable()
            with mock.patch.dict(os.environ, {"TORCH_OVERLAY": "tensorcore_mm"}):
                declare_flags()  # on with what it requires, the others off
            self.assertEqual([n for n, f in flags.items() if getattr(config, f)],
                             ["prologue_downcast", "downcast_mm", "matmul_meta", "tensorcore_mm"])
            config.tensorcore_mm_autocast = False
            torch_overlay.enable()
            # adopted as the user left it; a flag declared off is turned on
            self.assertFalse(config.tensorcore_mm_autocast)
            self.assertTrue(config.autocast_matmul_meta and config.gelu_add_fusion)
            self.assertTrue(config.prologue_fusion_downcast)
            torch_overlay.disable()  # the hook's flags stay declared, off
            self.assertEqual({f: getattr(config, f) for f in flags.values()},
                             dict.fromkeys(flags.values(), False))
            torch_overlay.enable(["gelu_add"])
            self.assertEqual([n for n, f in flags.items() if getattr(config, f)], ["gelu_add"])

    def test_the_hook_turns_off_the_flags_of_overlays_it_could_not_enable(self):
        from torch._inductor import config

        from torch_overlay._autoload import activate

        torch_overlay.disable()
        self.forget_the_hook()
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
        self.assertEqual({o.flag: getattr(config, o.flag) for o in torch_overlay.OVERLAYS},
                         {o.flag: False for o in torch_overlay.OVERLAYS})
        self.assertEqual(REGISTRY.enabled(), [])

    def test_flags_exist_under_the_kill_switch_and_a_selection(self):
        # the user's settings code runs whatever the hook enables: every flag declared, on
        # for the overlays it enables (and what they require) only
        flags = [o.flag for o in torch_overlay.OVERLAYS]
        for extra, enabled in (({"TORCH_OVERLAY_DISABLE": "1"}, []),
                               ({"TORCH_OVERLAY": "gelu_add"}, ["gelu_add"]),
                               ({"TORCH_OVERLAY": "bogus"}, [])):
            out = self.run_cmd(sys.executable, "-W", "ignore", "-c", EARLY, *flags,
                               env=dict(self.with_hook(), **extra))
            self.assertEqual(out.returncode, 0, out.stderr[-3000:])
            got = json.loads(out.stdout.strip().splitlines()[-1])
            on = {o.flag: o.name in enabled for o in torch_overlay.OVERLAYS}
            self.assertEqual(got["declared"], on, extra)
            self.assertFalse(got["inside"], extra)
            self.assertEqual(got["after"], dict(on, tensorcore_mm_autocast=False), extra)
            self.assertEqual(got["enabled"], enabled, extra)

    def test_status(self):
        env = dict(self.env, TORCH_LOGS="tensorcore_mm")
        out = self.apply("status", env=env)
        self.assertEqual(out.returncode, 0, out.stderr)
        import torch
        import triton

        self.assertIn(f"torch {torch.__version__}, triton {triton.__version__}", out.stdout)
        for name in torch_overlay.load_overlays():
            self.assertRegex(out.stdout, rf"(?m)^{name}: ")
        self.assertIn("activation hook: not installed", out.stdout)
        # and what a process needs for the log artifacts
        self.assertIn("TORCH_LOGS names tensorcore_mm: a process without the activation hook "
                      "must import torch_overlay before torch", out.stdout)

    def test_status_reports_an_unknown_overlay_in_the_environment(self):
        out = self.apply("status", env=dict(self.env, TORCH_OVERLAY="bogus"))
        self.assertEqual(out.returncode, 2, out.stdout)
        self.assertIn("TORCH_OVERLAY names unknown overlay(s) bogus", out.stdout)
        self.assertIn("torch-overlay: TORCH_OVERLAY names unknown overlay(s) bogus", out.stderr)
        self.assertIn("inactive (not selected: TORCH_OVERLAY=bogus)", out.stdout)
        # the same under the hook (as apply writes it), where the first compile warned once
        self.pth.write_text(cli.PTH_LINE)
        out = self.apply("status", env=dict(self.env, TORCH_OVERLAY="bogus"))
        self.assertEqual(out.returncode, 2, out.stdout)
        self.assertIn("unknown overlay(s) bogus", out.stdout)

    def test_run_activates_one_command_only(self):
        first = torch_overlay.load_overlays()[0]
        out = self.apply("--overlays", first, "run", "--", sys.executable, "-c",
                         PROBE + "; raise SystemExit(3)")
        self.assertIn(f"enabled={first}\n", out.stdout, out.stderr)
        # Python 3.11's site reports a sitecustomize that leaves sys.modules without it
        self.assertNotIn("Error in sitecustomize", out.stderr)
        # the command's exit status is run's
        self.assertEqual(out.returncode, 3)
        self.assertFalse(self.pth.exists())

    def test_unknown_overlay_is_one_line_and_installs_nothing(self):
        before = snapshot(self.site)
        printed = io.StringIO()
        with mock.patch.object(cli, "site_packages", return_value=self.site), \
                contextlib.redirect_stderr(printed):
            self.assertEqual(cli.main(["--overlays", "nope"]), 2)
        self.assertEqual(printed.getvalue().strip().count("\n"), 0, printed.getvalue())
        self.assertIn("unknown overlay(s) nope", printed.getvalue())
        self.assertEqual(snapshot(self.site), before)

    def test_unsupported_torch_and_missing_triton_are_refused(self):
        with mock.patch("torch.__version__", "2.9.1"):
            with self.assertRaisesRegex(cli.UsageError, "torch 2.9.1 is not supported"):
                cli.check_stack(None, force=False)
        with mock.patch.dict(sys.modules, {"triton": None}):
            with self.assertRaisesRegex(cli.UsageError, "triton is missing"):
                cli.check_stack(None, force=False)

    def test_demo(self):
        out = self.apply("demo")
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        self.assertIn("MLP block", out.stdout)
        self.assertIn("overlays: " + ", ".join(torch_overlay.load_overlays()), out.stdout)
        # a summary: the kernels of both, each overlay's counters; the diff behind --diff
        self.assertRegex(out.stdout, r"kernels, stock inductor: \d+ Triton, 2 extern\n"
                                     r"(  triton_\w+\n)+  extern_kernels.addmm x2\n")
        self.assertRegex(out.stdout, r"kernels, torch_overlay: \d+ Triton, 0 extern\n"
                                     r"(  triton_\w+\n)*  triton_tem_")
        self.assertIn("  tensorcore_mm: tensorcore_mm_template=2\n", out.stdout)
        self.assertIn("  matmul_meta: matmul_meta_lowered=2\n", out.stdout)
        self.assertRegex(out.stdout, r"generated code: \d+ lines of unified diff \(--diff")
        self.assertNotIn("--- stock inductor", out.stdout)
        self.assertLess(out.stdout.count("\n"), 40)

    def test_demo_diff(self):
        from torch_overlay import demo

        stock = "triton_a = async_compile.triton('triton_a', '')\nextern_kernels.mm(x)\n"
        overlay = "triton_b = async_compile.triton('triton_b', '')\n"
        printed = io.StringIO()
        with mock.patch.object(demo, "compiled_code", return_value=(stock, overlay, {})), \
                mock.patch.object(demo, "has_real_gpu", return_value=False), \
                mock.patch("torch.cuda.is_available", return_value=False), \
                mock.patch.object(cli, "check_stack"), \
                contextlib.redirect_stdout(printed):
            self.assertEqual(cli.main(["demo", "--diff"]), 0)
        out = printed.getvalue()
        # the diff is of generated Triton code: stock on the left, overlays on the right
        self.assertIn("--- stock inductor\n+++ torch_overlay\n", out)
        self.assertIn("-extern_kernels.mm(x)\n", out)
        self.assertIn("kernels, stock inductor: 1 Triton, 1 extern\n  triton_a\n", out)
        self.assertIn("  gelu_add: nothing in this block\n", out)

    def test_installed_outside_the_checkout(self):
        # a non-editable install: the console script and python -m, from another folder
        target, src = self.tmp / "target", self.tmp / "src"
        # a copy: the build leaves build/ in the tree it builds
        src.mkdir()
        for name in ("setup.cfg", "pyproject.toml", "README.md"):
            shutil.copy(REPO / name, src / name)
        shutil.copytree(REPO / "torch_overlay", src / "torch_overlay",
                        ignore=shutil.ignore_patterns("__pycache__"))
        out = self.run_cmd(sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                           "--no-compile", "--target", target, src)
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        env = dict(self.env, PYTHONPATH=os.pathsep.join(filter(None, [
            str(target), self.env.get("PYTHONPATH")])))
        where = self.run_cmd(sys.executable, "-c",
                             "import torch_overlay; print(torch_overlay.__file__)",
                             env=env, cwd=self.tmp)
        self.assertTrue(where.stdout.startswith(str(target)), where.stdout + where.stderr)
        # status through the console script; python -m is the same main
        out = self.run_cmd(target / "bin" / "torch-overlay", "status", env=env, cwd=self.tmp)
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        for name in torch_overlay.load_overlays():
            self.assertRegex(out.stdout, rf"(?m)^{name}: inactive")
        self.assertRegex(out.stdout, r"functions the series edits: [1-9]")
        out = self.run_cmd(sys.executable, "-m", "torch_overlay", "--help", env=env, cwd=self.tmp)
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        for action in cli.ACTIONS:
            self.assertIn(action, out.stdout)

if __name__ == "__main__":
    run_tests()
