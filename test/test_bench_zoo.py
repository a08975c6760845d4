"""tools/bench.py zoo (tools/bench_zoo.py) without a GPU.

    pytest test/test_bench_zoo.py

Tiny transformers configs of a decoder (Llama), an encoder (BERT), a vision transformer
(ViT) and an encoder-decoder (T5) compiled for the H200 through the GPU-free harness with
the overlays on; the measuring loop on the CPU (Dynamo's eager backend, a stand-in timer);
the table; the refusal without a GPU. Skipped where transformers is not installed.
"""
from __future__ import annotations

import contextlib
import io
import pathlib
import re
import sys
import tempfile
import unittest
from unittest import mock

import torch
from torch._inductor.test_case import TestCase, run_tests

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))

import bench  # noqa: E402
import bench_zoo as zoo  # noqa: E402
from bench_report import newest, render_run  # noqa: E402

try:
    import transformers  # noqa: F401
    HAS_TRANSFORMERS = True
except ImportError:
    HAS_TRANSFORMERS = False
needs_transformers = unittest.skipUnless(HAS_TRANSFORMERS, "transformers is not installed")


def run_main(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = bench.main(argv)
    return rc, out.getvalue(), err.getvalue()


class TestZooCommand(TestCase):
    def test_no_gpu_refuses_in_one_line(self):
        with tempfile.TemporaryDirectory() as tmp, \
                mock.patch.object(zoo, "gpu_available", return_value=False):
            rc, out, err = run_main(["zoo", "--out", tmp, "--models", "bert-large"])
            self.assertEqual(list(pathlib.Path(tmp).iterdir()), [])
        if not HAS_TRANSFORMERS:
            self.assertEqual((rc, err.count("\n")), (2, 1))
            return
        self.assertEqual(rc, 1)  # as models
        self.assertEqual(len(err.strip().splitlines()), 1)
        self.assertIn("no CUDA GPU", err)

    def test_list_and_unknown_names(self):
        rc, out, _ = run_main(["zoo", "--list"])
        self.assertEqual(rc, 0)
        self.assertIn("llama3-8b: meta-llama/Meta-Llama-3-8B (GQA 32:8); hidden 4096; rows "
                      "decode1, decode_dyn, batch8", out)
        self.assertIn("vit-large: google/vit-large-patch16-224", out)
        self.assertEqual(run_main(["zoo", "--models", "llama7"])[0], 2)
        # a bound below a batch decode_dyn times would recompile there
        rc, _, err = run_main(["zoo", "--dyn-max", "8"])
        self.assertEqual(rc, 2)
        self.assertIn("--dyn-max 8 is below a batch decode_dyn times (16)", err)
        # under CUDA graphs only the decode rows are timed
        rc, _, err = run_main(["zoo", "--mode", "reduce-overhead", "--rows", "batch8"])
        self.assertEqual(rc, 2)
        self.assertIn("rows in mode reduce-overhead: decode1, decode_dyn", err)
        self.assertEqual(run_main(["zoo", "--mode", "max-autotune", "--list"])[0], 0)
        # frozen weights: the inference rows
        rc, _, err = run_main(["zoo", "--mode", "freezing", "--rows", "train"])
        self.assertEqual(rc, 2)
        self.assertIn("rows in mode freezing: decode1, decode_dyn, batch8", err)
        # every model's rows are in the run order
        planned = {(m, r) for m, r in zoo.ORDER}
        self.assertEqual(planned, {(s.name, r) for s in zoo.SPECS.values() for r in s.rows()})
        self.assertEqual(len(zoo.ORDER), len(planned))


@needs_transformers
class TestZooModels(TestCase):
    def test_compile_only_tiny_configs(self):
        """Each family compiles for the H200 with the overlays on, fullgraph; the decode
        step's M=1 projections take tensorcore_mm's one-row path."""
        rows = (zoo.compile_only(["llama3-8b", "t5-large"], ("decode1",))
                + zoo.compile_only(["bert-large", "vit-large"], ("batch8",)))
        self.assertEqual([(r["model"], r["row"]) for r in rows],
                         [("llama3-8b", "decode1"), ("t5-large", "decode1"),
                          ("bert-large", "batch8"), ("vit-large", "batch8")])
        for r in rows:
            with self.subTest(model=r["model"], row=r["row"]):
                self.assertEqual(r["status"], "ok", r.get("message"))
                self.assertGreater(r["code_chars"], 0)
                # the overlay's lowering saw every autocast matmul of fp32 weights
                self.assertTrue(any(k.startswith("tensorcore_mm") for k in r["counters"]),
                                r["counters"])
        llama = rows[0]["counters"]
        # q, k, v, o, gate, up, down, lm_head: every projection of the step is one row
        self.assertEqual(llama.get("tensorcore_mm_gemv"), 8, llama)
        self.assertGreater(rows[1]["counters"].get("tensorcore_mm_gemv", 0), 0)

    def test_t5_step_reads_cross_attention_from_the_cache(self):
        """T5's decode inputs carry each decoder layer's cross-attention K/V; its step, fp32
        and compiled with a dynamic batch, gives the logits of the step that projects the
        encoder states, and never runs those projections."""
        spec = zoo.SPECS["t5-large"]
        model = zoo.build(spec, "cpu", tiny=True)
        ids, enc, *kv = zoo.make_inputs(spec, model, "decode_dyn", 4, "cpu")
        ids16, enc16, *kv16 = zoo.make_inputs(spec, model, "decode_dyn", 16, "cpu")
        layers = len(model.decoder.block)
        self.assertEqual(len(kv), 2 * layers)
        self.assertEqual(kv[0].shape, (4, 4, zoo.ENC_SEQ, 16))  # (B, heads, S, d_kv)
        with torch.no_grad():
            ref = model(encoder_outputs=(enc,), decoder_input_ids=ids, use_cache=False).logits
        projected = []
        hooks = [getattr(b.layer[1].EncDecAttention, w).register_forward_hook(
                 lambda *a: projected.append(1)) for b in model.decoder.block for w in "kv"]
        try:
            step = torch.compile(lambda *t: zoo.forward(spec, model, t, amp=False),
                                 backend="eager", fullgraph=True)
            for t in (ids, enc, *kv):
                torch._dynamo.mark_dynamic(t, 0)
            with torch.no_grad():
                self.assertEqual(step(ids, enc, *kv), ref)
                self.assertEqual(step(ids16, enc16, *kv16).shape, (16, 1, 256))
        finally:
            for h in hooks:
                h.remove()
        self.assertEqual(projected, [])

    def test_train_errors_cover_the_gradients(self):
        """A backward that scales every gradient by 1.01 and leaves the loss: the train
        row's errors see it (1e-2), where the loss's would say 0."""
        class ScaleGrad(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.clone()

            @staticmethod
            def backward(ctx, g):
                return g * 1.01

        def compile(f, **kw):
            eager = torch.compile(f, backend="eager", **kw)
            return lambda *t: ScaleGrad.apply(eager(*t))
        spec = zoo.SPECS["bert-large"]
        model = zoo.build(spec, "cpu", tiny=True)
        with mock.patch.object(zoo, "BATCH", 2), mock.patch.object(zoo, "SEQ", 8):
            (e,) = zoo.measure_row(spec, model, "train", device="cpu",
                                   timer=lambda call: (call(), 1.0)[1], compile=compile)
        for side in ("stock", "overlay"):
            for key in ("err", "rms_err"):
                self.assertAlmostEqual(e["sides"][side][key], 0.01, delta=1e-6)
        self.assertEqual(e["eager_rms_err"], 0.0)  # CUDA autocast leaves CPU tensors fp32

    def test_random_weights(self):
        model = zoo.build(zoo.SPECS["gpt2-large"], "cpu", tiny=True)
        for name, p in model.named_parameters():
            self.assertGreater(p.std().item(), 0.01, name)  # no zeros or ones left
        self.assertIs(model.lm_head.weight, model.transformer.wte.weight)  # still tied
        again = zoo.build(zoo.SPECS["gpt2-large"], "cpu", tiny=True)
        self.assertEqual(again.lm_head.weight, model.lm_head.weight, atol=0, rtol=0)

    def test_errors_one_element_against_all(self):
        """One element off by 1 in 100: the maximum says 1, the rms error 1/10."""
        ref = torch.ones(10, 10)
        out = ref.clone()
        out[3, 7] += 1
        self.assertEqual(zoo.max_rel_err(out, ref), 1.0)
        self.assertAlmostEqual(zoo.relative_error((out,), (ref,)), 0.1, places=12)

    def test_phase_seconds_of_a_cold_compile(self):
        """An Inductor compile spends time in each phase; a cached one lowers nothing."""
        from torch._inductor.utils import fresh_cache

        fn = lambda x: x.sin() + 1  # noqa: E731
        with fresh_cache():
            torch._dynamo.reset()  # clears Dynamo's timers too: before the first reading
            before = zoo.phase_seconds()
            torch.compile(fn)(torch.randn(8))
            spent = {k: v - before[k] for k, v in zoo.phase_seconds().items()}
            self.assertEqual(set(spent), set(zoo.COMPILE_PHASES))
            for phase, seconds in spent.items():
                self.assertGreater(seconds, 0.0, phase)
            torch._dynamo.reset()
            before = zoo.phase_seconds()
            torch.compile(fn)(torch.randn(8))  # the FX graph cache's entry
            self.assertEqual(zoo.phase_seconds()["lowering"], before["lowering"])

    def test_measure_row_bookkeeping_and_table(self):
        """The loop on the CPU: Dynamo's eager backend for the compile, a counter for the
        timer. decode_dyn compiles at batch 4, reuses the graph at 16, recompiles at 1."""
        ticks = iter(range(100, 1000))
        entries = zoo.measure_row(
            zoo.SPECS["gpt2-large"], zoo.build(zoo.SPECS["gpt2-large"], "cpu", tiny=True),
            "decode_dyn", device="cpu", timer=lambda call: (call(), float(next(ticks)))[1],
            compile=lambda f, **kw: torch.compile(f, backend="eager", **kw))
        self.assertEqual([e["batch"] for e in entries], [1, 4, 16])
        b1, b4, b16 = entries
        for side in ("stock", "overlay"):
            self.assertIn("compile_s", b4["sides"][side])
            self.assertIn("recompile_s", b1["sides"][side])
            self.assertEqual(set(b16["sides"][side]) & {"compile_s", "recompile_s"}, set())
            self.assertEqual(len(b4["sides"][side]["us"]), 2)  # two passes
            # an error for every input set, averaged (0 here: CPU tensors under CUDA
            # autocast compute in fp32 like the reference)
            errs = b1["sides"][side]["errs"]
            self.assertEqual(len(errs), zoo.ERR_INPUTS)
            self.assertEqual(b1["sides"][side]["err"], sum(errs) / len(errs))
            self.assertEqual(len(b1["sides"][side]["rms_errs"]), zoo.ERR_INPUTS)
        spec, model = zoo.SPECS["gpt2-large"], zoo.build(zoo.SPECS["gpt2-large"], "cpu", tiny=True)
        ids = [zoo.make_inputs(spec, model, "decode1", 16, "cpu", seed)[0]
               for seed in range(zoo.ERR_INPUTS)]
        self.assertEqual(len({tuple(t.flatten().tolist()) for t in ids}), zoo.ERR_INPUTS)
        # pass 1 times stock then overlay, pass 2 overlay then stock: batches 4, 16, 1 each
        self.assertEqual(b4["sides"]["stock"]["us"], [100.0, 109.0])
        self.assertEqual(b4["sides"]["overlay"]["us"], [103.0, 106.0])
        self.assertEqual(b4["ratio"], 1.0)
        self.assertNotIn("peak_mib", b4["sides"]["stock"])  # measured on a GPU only
        self.assertIsNone(b4["same_code"])  # the eager backend generates no code
        b16["same_code"] = True
        b16["sides"]["stock"]["peak_mib"], b16["sides"]["overlay"]["peak_mib"] = 512.4, 256.0
        doc = {"env": {"gpu": "NVIDIA H200", "torch": "2.11.0", "triton": "3.6.0",
                       "transformers": "5.17.0", "date": "2026-11-24",
                       "command": "python tools/bench.py zoo"},
               "settings": {"timer": zoo.PROFILER_TIMER},
               "rows": entries + [{"model": "t5-large", "hidden": 1024, "row": "train",
                                   "status": "skipped", "message": "time budget spent"}]}
        text = render_run(doc)
        self.assertIn("### H200, torch 2.11.0, triton 3.6.0; measured 2026-11-24", text)
        # the compile time: the B = 4 row's, where the step was compiled
        self.assertRegex(text, re.escape(
            "| gpt2-large | 106.5 / 106.5 (1.00x) | 104.5 / 104.5 (1.00x) | "
            "105.5 / 105.5 (1.00x) | ") + r"\d+\.\d / \d+\.\d \| 2026-11-24, profiler \|")
        self.assertIn("| compile s stock / overlay | measured |", text)
        self.assertNotIn("t5-large", text)  # a skipped row has nothing to show
        # the same rows, both sides frozen: the freezing family, one line a model
        frozen = render_run({**doc, "settings": {**doc["settings"], "mode": "freezing"}})
        self.assertIn("## Freezing", frozen)
        self.assertIn("| model | decode_dyn B = 1: stock / overlay us | decode_dyn B = 4: stock / "
                      "overlay us | decode_dyn B = 16: stock / overlay us | measured |", frozen)
        self.assertNotIn("## Dynamic batch", frozen)
        # a run with the batch bounded (--dyn-max 16): a line of its own after the model's
        bounded = {**doc, "settings": {**doc["settings"], "dyn_max": 16}}
        self.assertIn("| gpt2-large, B up to 16 | 106.5 / 106.5 (1.00x) |", render_run(bounded))
        both = newest([doc, bounded])["dynamic batch"]
        self.assertEqual(sorted({key[0] for key in both}),
                         ["gpt2-large", "gpt2-large, B up to 16"])

    def test_dyn_max_bounds_the_marked_batch(self):
        spec = zoo.SPECS["gpt2-large"]
        with mock.patch.object(torch._dynamo, "mark_dynamic",
                               wraps=torch._dynamo.mark_dynamic) as mark:
            zoo.measure_row(spec, zoo.build(spec, "cpu", tiny=True), "decode_dyn",
                            device="cpu", timer=lambda call: (call(), 1.0)[1],
                            compile=lambda f, **kw: torch.compile(f, backend="eager", **kw),
                            dyn_max=16)
        self.assertTrue(mark.call_args_list)
        for call in mark.call_args_list:
            self.assertEqual(call.kwargs, {"min": 2, "max": 16})

    def test_same_code_but_comments(self):
        stock = ["# AOT ID: ['0_inference']\nbuf0 = mm(x, w)\n    # Topologically sorted\n"]
        overlay = ["# AOT ID: ['1_inference']\nbuf0 = mm(x, w)\n    # matmul_meta: mm\n"]
        self.assertTrue(zoo.same_code(stock, overlay))
        self.assertFalse(zoo.same_code(stock, ["buf0 = tensorcore_mm(x, w)\n"]))
        self.assertFalse(zoo.same_code(stock, overlay * 2))  # a recompile on one side only
        self.assertIsNone(zoo.same_code([], overlay))
        codes = []
        with zoo.output_code(codes):
            torch.compile(lambda x: x.sin() + 1)(torch.randn(8))
        self.assertEqual(len(codes), 1)
        self.assertIn("def call(", codes[0])

    def test_measure_row_keeps_each_sides_fastest_compile(self):
        """compiles=2: each side compiles twice; times fall with every call here, so each
        side's second compile is its faster one, in both passes."""
        ticks = iter(range(1000, 0, -1))
        b1, b4, _ = zoo.measure_row(
            zoo.SPECS["gpt2-large"], zoo.build(zoo.SPECS["gpt2-large"], "cpu", tiny=True),
            "decode_dyn", device="cpu", timer=lambda call: (call(), float(next(ticks)))[1],
            compile=lambda f, **kw: torch.compile(f, backend="eager", **kw), compiles=2)
        # pass 1: stock's compiles 0 and 1 (batches 4, 16, 1 each), then overlay's; pass 2
        # overlay's, then stock's
        stock, overlay = b4["sides"]["stock"], b4["sides"]["overlay"]
        self.assertEqual(stock["us"], [997.0, 979.0])
        self.assertEqual(stock["compiles_mean_us"], [991.0, 988.0])
        self.assertEqual(overlay["us"], [991.0, 985.0])
        self.assertEqual(overlay["compiles_mean_us"], [991.0, 988.0])
        self.assertEqual(b4["ratio"], 1.0)
        for side in ("stock", "overlay"):  # each compile's seconds, the fastest kept
            for kind, e in (("compile_s", b4), ("recompile_s", b1)):
                res = e["sides"][side]
                self.assertEqual(len(res[kind + "_all"]), 2)
                self.assertEqual(res[kind], min(res[kind + "_all"]))
                # the fastest compile's phases; none is Inductor's under the eager backend
                self.assertEqual(len(res[kind + "_phases_all"]), 2)
                fastest = res[kind + "_all"].index(res[kind])
                self.assertEqual(res[kind + "_phases"], res[kind + "_phases_all"][fastest])
                self.assertEqual(res[kind + "_phases"],
                                 dict.fromkeys(zoo.COMPILE_PHASES, 0.0))


if __name__ == "__main__":
    run_tests()
