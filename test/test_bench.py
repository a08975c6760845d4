"""tools/bench.py's own logic, without a GPU: cases, ratios, flagging, output.

    pytest test/test_bench.py        or        python test/test_bench.py
"""
from __future__ import annotations

import contextlib
import functools
import io
import json
import math
import pathlib
import sys
import tempfile
import unittest
import warnings
from unittest import mock

import torch
from torch._inductor.test_case import TestCase, run_tests

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))

import bench  # noqa: E402
import bench_report as report  # noqa: E402
from bench_workloads import all_cases  # noqa: E402

def meta_rand(shape, dtype, scale=1.0):
    """Shape-only inputs: no memory, no data."""
    return torch.empty(shape, dtype=dtype, device="meta")


def case_by_id(case_id):
    return next(c for c in all_cases() if c.id == case_id)


def mode(status="ok", ms=None, **extra):
    return {"status": status, "ms": ms, **extra}


def linear_record(M, modes, N=4096, K=4096):
    record = {"id": f"linear/{M}x{N}x{K}", "workload": "linear", "label": f"{M}x{N}x{K}",
              "params": {"M": M, "N": N, "K": K}, "dtype": "torch.bfloat16",
              "eager_error": 2.9e-3, "tolerance": 1.2e-2, "modes": modes}
    return record


def sample_document():
    doc = report.new_document({"gpu": "NVIDIA H200", "date": "2026-11-21T00:00:00+00:00",
                               "torch": "2.11.0+cu130", "triton": "3.6.0", "overlays": ["x"],
                               "command": "python tools/bench.py --out bench_out"}, {})
    report.upsert(doc, linear_record(16, {
        "eager": mode(ms=0.05, error=3e-3),
        "stock": mode(ms=0.04, compile_s=0.3, error=3e-3),
        "overlay": mode("WRONG", compile_s=0.4, error=0.5),
    }))
    report.upsert(doc, linear_record(1024, {
        "stock": mode(ms=0.10, compile_s=0.3, error=3e-3),
        "overlay": mode(ms=0.05, compile_s=0.4, error=2e-3),
    }))
    return doc


class TestCases(TestCase):
    def test_every_case_runs_eagerly(self):
        """Every case's eager step on shape-only tensors: its inputs fit its function."""
        from torch_overlay.testing import cuda_mode

        with cuda_mode("h200", force_fake=True) as to_cuda:
            for case in all_cases():
                if case.train:
                    continue  # the faked GPU refuses autograd; checked below on meta
                with self.subTest(case=case.id):
                    inputs = tuple(to_cuda(t) for t in case.make_inputs(meta_rand))
                    self.assertEqual(len(case.step(case.fn)(*inputs)), 1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # autocast on meta: off, dtypes are fp32 anyway
            for case in (c for c in all_cases(["mlp"]) if c.train):
                inputs = case.make_inputs(meta_rand)
                # the output and a gradient per input but grad_out
                self.assertEqual(len(case.step(case.fn)(*inputs)), len(inputs))

    def test_reference_is_fp64_under_autocast(self):
        from torch_overlay.testing import cuda_mode

        case = case_by_id("linear/16x4096x4096")
        with cuda_mode("h200", force_fake=True) as to_cuda:
            inputs = tuple(to_cuda(t) for t in case.make_inputs(meta_rand))
            self.assertEqual(case.step(case.fn)(*inputs)[0].dtype, torch.bfloat16)
            self.assertEqual(bench.reference_outputs(case, inputs)[0].dtype, torch.float64)

    def test_input_rotation(self):
        l2 = 60 << 20
        self.assertEqual(bench.n_input_sets(8 << 20, l2), 23)  # 3x L2 over 8 MB sets
        self.assertEqual(bench.n_input_sets(1 << 10, l2), bench.MAX_INPUT_SETS)
        self.assertEqual(bench.n_input_sets(3 * l2, l2), 1)
        seen = []
        call = bench.rotating(seen.append, [(0,), (1,), (2,)])
        for _ in range(6):
            call()
        self.assertEqual(sorted(seen), [0, 0, 1, 1, 2, 2])


class TestDerived(TestCase):
    def test_speedup(self):
        self.assertEqual(report.speedup(mode(ms=2.0), mode(ms=0.5)), 4.0)
        self.assertIsNone(report.speedup(mode(ms=2.0), mode("WRONG", error=1.0)))
        self.assertIsNone(report.speedup(mode("failed"), mode(ms=0.5)))
        self.assertIsNone(report.speedup(None, mode(ms=0.5)))

    def test_tolerance_and_flagging(self):
        self.assertAlmostEqual(report.tolerance(2.9e-3, "torch.bfloat16"), 4 * 2.9e-3)
        self.assertAlmostEqual(report.tolerance(1e-8, "torch.float32"), 4e-5)  # the floor
        self.assertAlmostEqual(report.tolerance(math.nan, "torch.float32"), 4e-5)
        self.assertTrue(report.is_wrong(0.02, 0.01))
        self.assertTrue(report.is_wrong(math.nan, 0.01))
        self.assertFalse(report.is_wrong(0.005, 0.01))

    def test_relative_error(self):
        ref = (torch.tensor([3.0, 4.0]), torch.ones(2))
        self.assertEqual(bench.relative_error(ref, ref), 0.0)
        off = (torch.tensor([3.0, 4.5]), torch.ones(2))
        self.assertAlmostEqual(bench.relative_error(off, ref), 0.5 / 5.0)
        nan = (torch.tensor([3.0, math.nan]), torch.ones(2))
        self.assertEqual(bench.relative_error(nan, ref), math.inf)

    def test_plan_puts_max_autotune_last_on_required_shapes(self):
        cases = all_cases(["linear"])
        modes = ["eager", "stock-max-autotune", "stock"]
        plan = bench.make_plan(cases, modes, "required")
        self.assertEqual([m for _, m in plan[:len(cases)]], [["eager", "stock"]] * len(cases))
        tail = plan[len(cases):]
        self.assertEqual({m for _, ms in tail for m in ms}, {"stock-max-autotune"})
        self.assertEqual([c.id for c, _ in tail], [c.id for c in cases if c.required_max_autotune])
        self.assertLess(len(tail), len(cases))
        self.assertEqual(len(bench.make_plan(cases, modes, "all")), 2 * len(cases))


class TestMeasureCase(TestCase):
    """The measuring loop on the CPU, with an injected timer and one broken mode."""

    def test_wrong_result_is_flagged_and_never_timed(self):
        case = case_by_id("pointwise/float32 tanh 1M")
        timings = [3.0, 2.0]  # eager, stock; the overlay must not take one
        timed = []

        def timer(call):
            call()
            timed.append(call)
            return timings.pop(0)

        def build(m, c):
            wrong = lambda x, r: c.fn(x, r) * 1.01  # noqa: E731
            return c.step(wrong if m.name == "overlay" else c.fn)

        record = bench.measure_case(case, ["eager", "stock", "overlay", "stock_freezing"],
                                    device="cpu", timer=timer, build=build, overlays=[],
                                    l2_bytes=1 << 20)
        self.assertEqual(len(timed), 2)
        modes = record["modes"]
        self.assertEqual(modes["overlay"]["status"], "WRONG")
        self.assertGreater(modes["overlay"]["error"], record["tolerance"])
        self.assertNotIn("ms", modes["overlay"])
        self.assertEqual(modes["stock_freezing"]["status"], "n/a")  # no weights to fold
        self.assertLess(modes["stock"]["error"], record["tolerance"])
        self.assertIsNotNone(modes["stock"]["compile_s"])
        self.assertIsNone(modes["eager"]["compile_s"])
        self.assertAlmostEqual(report.speedup(modes["eager"], modes["stock"]), 3.0 / 2.0)
        self.assertIsNone(report.speedup(modes["stock"], modes["overlay"]))
        doc = sample_document()
        doc["results"] = [record]
        line = next(x for x in report.render_run(doc).splitlines() if case.label in x)
        self.assertIn("| 3000.0 | 2000.0 | **WRONG** | - | - |", line)

    def test_second_pass_in_reverse_order_keeps_the_lower_median(self):
        case = case_by_id("pointwise/float32 tanh 1M")
        order, timings = [], {"eager": [3.0, 2.5], "stock": [2.0, 2.2]}

        def timer(call):
            call()
            name = call.mode_name
            order.append(name)
            return timings[name].pop(0)

        def build(m, c):
            step = c.step(c.fn)
            call = lambda *a: step(*a)  # noqa: E731
            call.mode_name = m.name
            return call

        real_rotating = bench.rotating
        with mock.patch.object(bench, "rotating", lambda call, sets: functools.update_wrapper(
                real_rotating(call, sets), call, assigned=(), updated=("__dict__",))):
            record = bench.measure_case(case, ["eager", "stock"], device="cpu", timer=timer,
                                        build=build, overlays=[], l2_bytes=1 << 20, passes=2)
        self.assertEqual(order, ["eager", "stock", "stock", "eager"])
        self.assertEqual(record["modes"]["eager"]["ms"], 2.5)
        self.assertEqual(record["modes"]["eager"]["ms_passes"], [3.0, 2.5])
        self.assertEqual(record["modes"]["stock"]["ms"], 2.0)

    def test_a_failing_mode_does_not_end_the_case(self):
        case = case_by_id("pointwise/float32 tanh 1M")

        def build(m, c):
            if m.name == "stock":
                raise RuntimeError("no compiler\nsecond line")
            return c.step(c.fn)

        record = bench.measure_case(case, ["stock", "eager"], device="cpu",
                                    timer=lambda call: 1.0, build=build, overlays=[],
                                    l2_bytes=1 << 20)
        self.assertEqual(record["modes"]["stock"],
                         {"status": "failed", "message": "RuntimeError: no compiler"})
        self.assertEqual(record["modes"]["eager"]["status"], "ok")

    def test_graph_timer_calls_every_input_set_once_a_replay(self):
        case = case_by_id("pointwise/float32 tanh 1M")
        called, seen = [], []

        def graph_timer(fn):
            start = len(called)
            fn()
            seen.extend(called[start:])
            return 8.0

        def build(m, c):
            step = c.step(c.fn)
            return lambda *inputs: called.append(id(inputs[0])) or step(*inputs)

        with mock.patch.object(bench, "graph_ms", graph_timer):
            record = bench.measure_case(case, ["eager"], device="cpu", timer=graph_timer,
                                        build=build, overlays=[], l2_bytes=64 << 20)
        sets = len(seen)
        self.assertGreater(sets, 1)  # 1M-element sets rotated through a 64 MB L2
        self.assertEqual(len(set(seen)), sets)  # each set once, not one set again
        self.assertEqual(record["modes"]["eager"]["ms"], 8.0 / sets)


class TestModes(TestCase):
    def test_mode_context_sets_freezing(self):
        import torch._inductor.config as inductor_config

        from bench_workloads import MODES

        with bench.mode_context(MODES["stock_freezing"], []):
            self.assertTrue(inductor_config.freezing)
        with bench.mode_context(MODES["stock"], []):
            self.assertFalse(inductor_config.freezing)
        self.assertFalse(inductor_config.freezing)

    def test_prologue_mode_enables_prologue_downcast_alone(self):
        from bench_workloads import MODES

        with mock.patch.object(bench.torch_overlay, "enable") as enable:
            for name in ("prologue-max-autotune", "overlay"):
                with bench.mode_context(MODES[name], overlays=["gelu_add"]):
                    pass
        self.assertEqual([c.args[0] for c in enable.call_args_list],
                         [["prologue_downcast"], ["gelu_add"]])

    def test_prologue_mode_runs_only_when_named(self):
        plans = []
        with mock.patch.object(bench, "gpu_available", return_value=True), \
                mock.patch.object(bench, "make_plan", side_effect=lambda c, m, a: plans.append(m)
                                  or []), \
                mock.patch.object(bench, "warm_up_compiler"), \
                mock.patch.object(bench, "finish"), \
                mock.patch.object(torch.cuda, "get_device_name", return_value="GPU"), \
                tempfile.TemporaryDirectory() as tmp:
            bench.main(["--workloads", "linear", "--out", tmp])
            bench.main(["--mnk", "16x1280x5120", "--modes", "stock,prologue-max-autotune",
                        "--out", tmp])
        self.assertIn("overlay", plans[0])
        self.assertNotIn("prologue-max-autotune", plans[0])
        self.assertEqual(plans[1], ["stock", "prologue-max-autotune"])

    def test_mnk_gives_cases_of_those_shapes(self):
        cases = all_cases(["linear", "gelu_linear", "mlp"], [(16, 1280, 5120)])
        self.assertEqual({c.workload for c in cases}, {"linear", "gelu_linear"})
        self.assertTrue(all((c.params["M"], c.params["N"], c.params["K"]) == (16, 1280, 5120)
                            for c in cases))
        self.assertEqual(len(all_cases(None, [(4, 1024, 4096)])), 1)


class TestOutput(TestCase):
    def test_json_round_trip_and_upsert(self):
        doc = sample_document()
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "bench.json"
            report.write_json(doc, path)
            self.assertEqual(report.read_json(path), json.loads(json.dumps(doc)))
        # a later phase adds a mode to the same case
        report.upsert(doc, linear_record(1024, {"stock-max-autotune": mode(ms=0.2)}))
        self.assertEqual(len(doc["results"]), 2)
        merged = doc["results"][1]["modes"]
        self.assertEqual(set(merged), {"stock", "overlay", "stock-max-autotune"})

    def test_markdown_report(self):
        """A run's tables: each row dated, with its GPU and releases above it; a WRONG
        result shows its status, never a time."""
        text = report.render_run(sample_document())
        self.assertIn("### H200, torch 2.11.0+cu130, triton 3.6.0; measured 2026-11-21", text)
        self.assertIn("| case | eager us | stock us | overlay us | overlay / stock "
                      "| overlay / eager | measured |", text)
        self.assertIn("| linear 16x4096x4096 | 50.0 | 40.0 | **WRONG** | - | - "
                      "| 2026-11-21, do_bench |", text)
        self.assertIn("| linear 1024x4096x4096 | - | 100.0 | 50.0 | 2.00x | - "
                      "| 2026-11-21, do_bench |", text)
        self.assertNotIn("## Decode\n\nOne token at batch 1, a decoder step without KV cache "
                         "(T5-large attends to 128 cached encoder states). `bench.py zoo "
                         "--rows decode1`.\n\n###", text)  # no zoo run: no table

    def test_newest_measurement_wins(self):
        older, newer = sample_document(), sample_document()
        newer["env"] = dict(newer["env"], date="2026-11-22T00:00:00+00:00")
        newer["results"][1]["modes"]["overlay"]["ms"] = 0.04
        found = report.newest([newer, older])["operators"]
        self.assertIs(found["linear/1024x4096x4096"][0], newer)
        self.assertIn("| linear 1024x4096x4096 | - | 100.0 | 40.0 | 2.50x | - "
                      "| 2026-11-22, do_bench |",
                      report.render_benchmarks([("h200", [older, newer])]))

    def test_report_command(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "bench.json"
            report.write_json(sample_document(), path)
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                self.assertEqual(bench.main(["report", str(path)]), 0)
        self.assertTrue(out.getvalue().startswith("# Benchmarks"))
        self.assertIn("WRONG", out.getvalue())


class TestToolsLayout(TestCase):
    def test_imports_run_one_way(self):
        """bench.py is the entry point: no tool imports it, and the tools' imports of each
        other form no circle."""
        import ast

        tools = {p.stem: p for p in (REPO / "tools").glob("*.py")}
        graph = {}
        for name, path in tools.items():
            tree = ast.parse(path.read_text())
            found = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                     for a in n.names}
            found |= {(n.module or "").split(".")[0] for n in ast.walk(tree)
                      if isinstance(n, ast.ImportFrom)}
            graph[name] = found & set(tools)
        self.assertIn("bench_zoo", graph["bench"])
        self.assertEqual([n for n, deps in graph.items() if "bench" in deps], [])

        def reaches(start, goal, seen=()):
            return any(d == goal or (d not in seen and reaches(d, goal, (*seen, d)))
                       for d in graph[start])
        self.assertEqual([n for n in graph if reaches(n, n)], [])

    def test_functions_stay_short(self):
        """Upstream's style, as in the package: a longer function is split into helpers."""
        import ast

        long = [f"{path.name}:{n.name} ({n.end_lineno - n.lineno + 1} lines)"
                for path in sorted((REPO / "tools").glob("*.py"))
                for n in ast.walk(ast.parse(path.read_text()))
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                and n.end_lineno - n.lineno + 1 > 80]
        self.assertEqual(long, [])


class TestPublished(TestCase):
    """BENCHMARKS.md is `python tools/bench.py report` of tools/bench_results/*.json."""

    def test_benchmarks_md_is_current(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(bench.main(["report"]), 0)
        published = (REPO / "BENCHMARKS.md").read_text()
        self.assertEqual(out.getvalue(), published,
                         "BENCHMARKS.md is stale: python tools/bench.py report > BENCHMARKS.md")
        self.assertLess(len(published.splitlines()), 420)  # a few hundred lines

    def test_every_table_names_gpu_and_releases_and_every_row_a_date(self):
        text = (REPO / "BENCHMARKS.md").read_text()
        tables = 0
        for block in text.split("\n### ")[1:]:
            head, *lines = block.splitlines()
            self.assertRegex(head, r"^(H100|H200)\S*( \S+)*, torch 2\.\d+\.\d+\S*, triton "
                                   r"\d+\.\d+\.\d+; measured 20\d\d-\d\d-\d\d")
            rows = [x for x in lines if x.startswith("| ") and not x.startswith("| ---")]
            data = [x for x in rows if not x.startswith(("| case ", "| model "))]
            self.assertTrue(data, head)
            for row in data:
                self.assertRegex(row, r"\| 20\d\d-\d\d-\d\d, (profiler|wall|graph|do_bench)")
            tables += 1
        self.assertGreaterEqual(tables, 20)

    def test_results_files_hold_runs_of_one_gpu_and_release(self):
        for stem, runs in report.result_docs():
            gpu, release = stem.split("_torch")
            self.assertTrue(runs, stem)
            for doc in runs:
                self.assertIn(gpu.upper(), doc["env"]["gpu"])
                self.assertTrue(doc["env"]["torch"].startswith(release), stem)


class TestCommandLine(TestCase):
    def run_main(self, argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = bench.main(argv)
        return rc, out.getvalue(), err.getvalue()

    def test_no_gpu_says_so_in_one_line(self):
        with tempfile.TemporaryDirectory() as tmp, \
                mock.patch.object(bench, "gpu_available", return_value=False):
            rc, out, err = self.run_main(["--quick", "--out", tmp])
            self.assertEqual(list(pathlib.Path(tmp).iterdir()), [])
        self.assertNotEqual(rc, 0)
        self.assertEqual(len(err.strip().splitlines()), 1)
        self.assertIn("no CUDA GPU", err)

    def test_selection(self):
        rc, out, _ = self.run_main(["--list", "--workloads", "gelu_linear",
                                    "--shapes", "^bf16 tanh"])
        self.assertEqual(rc, 0)
        self.assertEqual(len(out.strip().splitlines()), 3)
        rc, _, err = self.run_main(["--quick", "--shapes", "no such shape"])
        self.assertEqual(rc, 2)

    def test_unknown_overlay_is_refused(self):
        rc, _, err = self.run_main(["--quick", "--overlays", "no_such_overlay"])
        self.assertEqual(rc, 2)
        self.assertIn("unknown overlay no_such_overlay", err)

    @unittest.skipUnless(bench.gpu_available(), "needs a real GPU")
    def test_quick_run_on_gpu(self):
        with tempfile.TemporaryDirectory() as tmp:
            rc, out, _ = self.run_main(["--quick", "--workloads", "pointwise", "--out", tmp])
            doc = report.read_json(pathlib.Path(tmp) / "bench.json")
        self.assertEqual(rc, 0)
        (case,) = doc["results"]
        self.assertEqual({r["status"] for r in case["modes"].values()}, {"ok"}, out)


if __name__ == "__main__":
    run_tests()
