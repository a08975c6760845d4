"""tools/bench.py models and the freezing modes, without a GPU.

    pytest test/test_bench_models.py

The models' definitions (the KV cache against the causal forward, in fp64), their
accounting, the measuring loop (on the CPU, with the compile and the timer injected),
the report and the refusal without a GPU.
"""
from __future__ import annotations

import contextlib
import io
import pathlib
import sys
import tempfile
from unittest import mock

import torch
from torch._inductor.test_case import TestCase, run_tests

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))

import bench  # noqa: E402
import bench_models as bm  # noqa: E402
import bench_report as report  # noqa: E402
from bench_workloads import MODES, all_cases  # noqa: E402

TINY, TINY_SIZES = bm.MODEL_SETS["tiny"]
CEILINGS = {"copy_GBps": 4000.0, "bf16_mm_TFLOPs": 500.0, "mm_shape": "8192x8192x8192"}


def run_main(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = bench.main(argv)
    return rc, out.getvalue(), err.getvalue()


class TestModels(TestCase):
    def test_kv_cache_decode_matches_the_causal_forward(self):
        """Prefill then one decode step give the causal forward's last two logits (fp64)."""
        for cfg in TINY:
            with self.subTest(model=cfg.name), torch.no_grad():
                model = bm.build(cfg, "cpu").double()
                T = 9
                tokens = torch.randint(0, cfg.vocab, (3, T))
                full = model(tokens)
                prefill = model(tokens[:, :-1], torch.arange(T - 1))
                decode = model(tokens[:, -1:], torch.tensor([T - 1]))
                torch.testing.assert_close(prefill[:, 0], full[:, -2])
                torch.testing.assert_close(decode[:, 0], full[:, -1])

    def test_parameter_accounting(self):
        for cfg in TINY + bm.MODEL_SETS["full"][0][1:]:
            if cfg in TINY:
                model = bm.build(cfg, "cpu")
            else:  # gpt2-large-4L: shapes only, no memory
                with torch.device("meta"):
                    model = bm.ARCHS[cfg.arch](cfg)
            self.assertEqual(bm.param_bytes(model), 4 * bm.count_params(cfg))
            lookup = cfg.max_seq if cfg.arch == "gpt2" else cfg.vocab  # wte is the lm_head
            self.assertEqual(bm.decode_weight_bytes(model),
                             4 * (bm.count_params(cfg) - lookup * cfg.hidden))
        llama = bm.MODEL_SETS["full"][0][0]
        self.assertEqual((llama.hidden, llama.intermediate, llama.heads, llama.kv_heads,
                          llama.vocab), (4096, 14336, 32, 8, 128256))  # Llama-3-8B
        self.assertEqual(bm.count_params(llama), 1_486_901_248)

    def test_random_weights_and_caches(self):
        model = bm.build(TINY[0], "cpu")
        for name, p in model.named_parameters():
            self.assertGreater(p.std().item(), 0.01, name)  # nothing left at zeros or ones
        for buf in bm.caches(model):
            self.assertGreater(buf.float().std().item(), 0.5)
        again = bm.build(TINY[0], "cpu")
        torch.testing.assert_close(again.lm_head.weight, model.lm_head.weight)  # seeded


class TestMeasureModel(TestCase):
    def measure(self, compile_fn, timer=lambda call: (call(), 1.0)[1]):
        return bench.measure_model(TINY[1], TINY_SIZES, overlays=[], force=False,
                                   ceilings=CEILINGS, timer=timer, device="cpu",
                                   compile=compile_fn)

    def test_every_row_and_side(self):
        """The loop's bookkeeping, with eager standing in for the compile."""
        record = self.measure(lambda f, **kw: f)
        rows = record["rows"]
        self.assertEqual(list(rows), ["decode B=1", "decode B=16", "prefill 16", "train 2x16"])
        for name in ("decode B=1", "decode B=16", "prefill 16"):
            self.assertEqual(set(rows[name]["modes"]), {"eager", "stock", "overlay",
                                                        "stock_freezing", "overlay_freezing"})
        self.assertEqual(set(rows["train 2x16"]["modes"]), {"stock", "overlay"})
        for name, r in rows.items():
            for mode_name, res in r["modes"].items():
                self.assertEqual(res["status"], "ok", (name, mode_name, res))
                self.assertLessEqual(res["error"], r["tolerance"])
        overlay = rows["decode B=16"]["modes"]["overlay"]
        self.assertEqual(overlay["maxabs_eager"], 0.0)  # eager twice: the same logits
        self.assertGreater(rows["decode B=1"]["floor_ms"], 0)
        self.assertNotIn("floor_ms", rows["prefill 16"])
        # the random weights and caches give a real error against fp64, never zero
        self.assertGreater(rows["decode B=1"]["eager_error"], 1e-4)

    def test_wrong_side_is_flagged_and_not_timed(self):
        """An overlay side whose logits are 10% off is WRONG; stock is timed as usual."""
        state = {"overlay": False}
        real_enable, real_disable = bench.torch_overlay.enable, bench.torch_overlay.disable

        def enable(*a, **kw):
            state["overlay"] = True
            return real_enable(*a, **kw)

        def disable(*a, **kw):
            state["overlay"] = False
            return real_disable(*a, **kw)

        def compile_fn(f, **kw):
            if state["overlay"] and isinstance(f, torch.nn.Module):
                return lambda *a: f(*a) * 1.1
            return f
        with mock.patch.object(bench.torch_overlay, "enable", enable), \
                mock.patch.object(bench.torch_overlay, "disable", disable):
            record = self.measure(compile_fn)
        decode = record["rows"]["decode B=1"]["modes"]
        self.assertEqual(decode["overlay"]["status"], "WRONG")
        self.assertNotIn("ms", decode["overlay"])
        self.assertEqual(decode["stock"]["status"], "ok")
        doc = report.new_document({"gpu": "NVIDIA H200", "date": "2026-11-23T08:00:00+00:00",
                                   "torch": "2.11.0", "triton": "3.6.0"}, CEILINGS, {})
        doc["models"] = [record]
        line = next(x for x in report.render_run(doc).splitlines() if "| decode B=1 |" in x)
        self.assertIn("| 1000.0 | 1000.0 | **WRONG** | 1000.0 | **WRONG** | - | - | 1.00x |", line)

    def test_budget_skips_the_rest(self):
        record = bench.measure_model(TINY[1], TINY_SIZES, overlays=[], force=False,
                                     ceilings=CEILINGS, timer=lambda call: 1.0, device="cpu",
                                     compile=lambda f, **kw: f, deadline=0)
        statuses = {res["status"] for r in record["rows"].values()
                    for m, res in r["modes"].items() if m != "eager"}
        self.assertEqual(statuses, {"skipped"})


class TestFreezingModes(TestCase):
    def test_modes_and_where_they_apply(self):
        self.assertTrue(MODES["stock_freezing"].freezing)
        self.assertTrue(MODES["overlay_freezing"].overlays)
        cases = {c.id: c for c in all_cases()}
        applies = bench.applies
        self.assertTrue(applies(MODES["stock_freezing"], cases["linear/16x4096x4096"]))
        self.assertTrue(applies(MODES["overlay_freezing"],
                                cases["gelu_linear/autocast tanh 8192x4096x1024"]))
        self.assertTrue(applies(MODES["stock_freezing"], cases["mlp/fwd 8192x1024x4096"]))
        self.assertFalse(applies(MODES["stock_freezing"], cases["mlp/fwd+bwd 8192x1024x4096"]))
        self.assertFalse(applies(MODES["stock_freezing"], cases["pointwise/float32 tanh 1M"]))

    def test_weights_become_parameters(self):
        case = next(c for c in all_cases(["mlp"]) if not c.train)
        inputs = case.make_inputs(lambda shape, dtype, scale=1.0: torch.randn(shape, dtype=dtype))
        module = bench.Weights(case.fn, case.weight_args, inputs)
        self.assertEqual(len(list(module.parameters())), 4)
        self.assertEqual(module.weights[0].data_ptr(), inputs[1].data_ptr())  # no copy
        rest = [x for i, x in enumerate(inputs) if i not in case.weight_args]
        torch.testing.assert_close(module(*rest), case.fn(*inputs))

    def test_frozen_call_compiles_once_with_the_first_weights(self):
        case = next(c for c in all_cases(["linear"]))
        compiled = []
        with mock.patch.object(torch, "compile",
                               lambda m, **kw: compiled.append(m) or m):
            call = bench.frozen_call(case)
            x, w = torch.randn(2, 8), torch.randn(4, 8)
            (out,) = call(x, w)
            call(x, torch.randn(4, 8))  # a later weight is not read: it is frozen
        self.assertEqual(len(compiled), 1)
        torch.testing.assert_close(out, case.fn(x, w))
        torch.testing.assert_close(compiled[0].weights[0], w)


class TestModelsCommand(TestCase):
    def test_no_gpu_refuses_in_one_line(self):
        with tempfile.TemporaryDirectory() as tmp, \
                mock.patch.object(bench, "gpu_available", return_value=False):
            rc, out, err = run_main(["models", "--out", tmp])
            self.assertEqual(list(pathlib.Path(tmp).iterdir()), [])
        self.assertEqual(rc, 1)
        self.assertEqual(len(err.strip().splitlines()), 1)
        self.assertIn("no CUDA GPU", err)

    def test_list(self):
        rc, out, _ = run_main(["models", "--list"])
        self.assertEqual(rc, 0)
        self.assertIn("llama3-8b-2L: meta-llama/Meta-Llama-3-8B", out)
        self.assertIn("gpt2-large-4L", out)

    def test_report_renders_the_models(self):
        record = bench.measure_model(TINY[0], TINY_SIZES, overlays=[], force=False,
                                     ceilings=CEILINGS, timer=lambda call: 2.0, device="cpu",
                                     compile=lambda f, **kw: f)
        doc = report.new_document({"gpu": "NVIDIA H200", "date": "2026-11-23T08:00:00+00:00",
                                   "torch": "2.11.0", "triton": "3.6.0",
                                   "command": "python tools/bench.py models"}, CEILINGS, {})
        doc["models"] = [record]
        text = report.render_run(doc)
        self.assertIn("### H200, torch 2.11.0, triton 3.6.0; measured 2026-11-23", text)
        self.assertIn("| llama-tiny | decode B=16 | 2000.0 | 2000.0 | 2000.0 | 2000.0 | 2000.0 "
                      "| 1.00x | 1.00x | 1.00x | 2026-11-23, do_bench |", text)
        # the ratios say how many times faster the overlay side is
        modes = record["rows"]["decode B=1"]["modes"]
        modes["overlay"]["ms"], modes["stock_freezing"]["ms"] = 1.0, 4.0
        self.assertIn("| llama-tiny | decode B=1 | 2000.0 | 2000.0 | 1000.0 | 4000.0 | 2000.0 "
                      "| 2.00x | 2.00x | 0.50x |", report.render_run(doc))
        with tempfile.TemporaryDirectory() as tmp:
            models_json = pathlib.Path(tmp) / "models.json"
            report.write_json(doc, models_json)
            rc, out, _ = run_main(["report", str(models_json)])
        self.assertEqual(rc, 0)
        self.assertIn("| llama-tiny | prefill 16 |", out)


if __name__ == "__main__":
    run_tests()
