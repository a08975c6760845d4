# Owner(s): ["module: inductor"]
"""The tensorcore_mm overlay: autocast matmuls of fp32 tensors cast in registers.

Runs here without a GPU: the cost model and configs as plain Python, the generated
CUDA code through the GPU-free harness (``get_code(..., gpu="h200")``: goldens and
structure), the template's shared memory and registers by compiling it for sm_90
with Triton (no device needed), and its values by running the generated kernel in
Triton's interpreter on the CPU. The CUDA tests run on a GPU machine:
``pytest test/test_tensorcore_mm.py -k GPU``; tools/check_tensorcore_mm.py measures.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import torch
import torch._functorch.config as functorch_config
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.test_case import TestCase, run_tests
from torch._inductor.utils import run_and_get_code
from torch.testing import FileCheck
from torch.testing._internal.common_utils import instantiate_parametrized_tests, parametrize
from torch.testing._internal.inductor_utils import GPU_TYPE, HAS_GPU

from torch._inductor.kernel import mm_tensorcore
from torch._inductor.template_heuristics import tensorcore_mm as heuristics
from torch_overlay.testing import get_code, numerics
from torch_overlay.testing.golden import GoldenMixin
from torch_overlay.testing.gpu_profiles import get_profile

HAS_CUDA_GPU = HAS_GPU and GPU_TYPE == "cuda"
requires_cuda_gpu = unittest.skipUnless(HAS_CUDA_GPU, "needs a CUDA GPU")

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
H200 = heuristics.device_model(get_profile("h200"))


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def linear(dtype=BF16):
    """F.linear under autocast: aten.addmm(bias, x, permute(w)) with a bias, else mm."""

    def fn(x, w, b=None):
        with torch.autocast("cuda", dtype=dtype):
            return F.linear(x, w, b)

    return fn


def matmul_op(op, dtype=BF16):
    """One aten matmul under autocast, its weight (mat2) given as [N, K] and transposed."""

    def fn(*args):
        with torch.autocast("cuda", dtype=dtype):
            if op == "mm":
                x, w = args
                return x @ w.t()
            if op == "addmm":
                b, x, w = args
                return torch.addmm(b, x, w.t(), beta=0.5, alpha=2.0)
            if op == "bmm":
                x, w = args
                return torch.bmm(x, w.transpose(1, 2))
            c, x, w = args
            return torch.baddbmm(c, x, w.transpose(1, 2), beta=0.5, alpha=2.0)

    return fn


def matmul_inputs(op, m, n, k, batch=3, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    lead = (batch,) if op in ("bmm", "baddbmm") else ()
    x = torch.randn(*lead, m, k, generator=g)
    w = torch.randn(*lead, n, k, generator=g) / k**0.5
    if op in ("addmm", "baddbmm"):
        bias = torch.randn(*lead, m, n, generator=g) if op == "baddbmm" else torch.randn(n, generator=g)
        return [t.to(device) for t in (bias, x, w)]
    return [t.to(device) for t in (x, w)]


def template_kernels(code: list[str]) -> list[str]:
    return re.findall(r"(triton_tem_fused_\w+?_\d+)\.run\(", "\n".join(code))


def cast_kernels(code: list[str]) -> list[str]:
    return re.findall(r"(triton_poi_fused__to_copy_\d+)\.run\(", "\n".join(code))


def kernel_source(code: list[str], name: str) -> str:
    m = re.search(rf"async_compile\.triton\('{name}', '''(.*?)''', device_str='cuda'\)",
                  "\n".join(code), re.S)
    assert m is not None, name
    return m.group(1)


def comparable(code: list[str]) -> str:
    """Code without what differs between two compiles of the same thing (and without
    matmul_meta's comment lines, there only when the overlays are on)."""
    from torch_overlay.testing.golden import normalize

    text = re.sub(r"# AOT ID: \['\d+_", "# AOT ID: ['", normalize(code))
    return re.sub(r"\n *# matmul_meta: [^\n]*", "", text)


@contextlib.contextmanager
def tolerate_dynamic_outputs():
    # get_code's stand-in module returns None; AOTAutograd then marks dynamic dims on it
    from torch._functorch._aot_autograd import runtime_wrappers

    original = runtime_wrappers.maybe_mark_dynamic_helper
    with mock.patch.object(runtime_wrappers, "maybe_mark_dynamic_helper",
                           lambda t, dims: None if t is None else original(t, dims)):
        yield


def tensorcore(on: bool) -> None:
    """The feature, and the matmul metadata it decides by, on or off (a test's
    ``config.patch`` puts the values back)."""
    inductor_config.autocast_matmul_meta = on
    inductor_config.tensorcore_mm_autocast = on


class TensorCoreMMTestCase(GoldenMixin, TestCase):
    def setUp(self):
        super().setUp()
        counters.clear()
        self._config = inductor_config.patch(
            autocast_matmul_meta=False,
            tensorcore_mm_autocast=False,
            # the GPU-free harness cannot benchmark pad_mm's padding; real GPUs pad
            # only compute-bound shapes, which the cost model leaves to the stock path
            shape_padding=False,
            benchmark_epilogue_fusion=False,
        )
        self._config.__enter__()
        os.environ["TORCHINDUCTOR_STRICT_FALLBACKS"] = "1"

    def tearDown(self):
        os.environ.pop("TORCHINDUCTOR_STRICT_FALLBACKS", None)
        self._config.__exit__(None, None, None)
        super().tearDown()

    @property
    def counts(self):
        return counters["inductor"]

    def cuda_code(self, fn, *inputs, overlay=True, dynamic=None, strict=True):
        """Generated CUDA code for the H200 (GPU-free here), overlay on or off."""
        torch._dynamo.reset()
        counters.clear()
        if overlay:
            tensorcore(True)
        if not strict:
            os.environ.pop("TORCHINDUCTOR_STRICT_FALLBACKS", None)
        try:
            with tolerate_dynamic_outputs():
                return get_code(torch.compile(fn, dynamic=dynamic), *inputs, gpu="h200")
        finally:
            tensorcore(False)

    def assertTemplate(self, code, kernels=1, casts=0):
        self.assertEqual(len(template_kernels(code)), kernels, "\n".join(code))
        self.assertEqual(len(cast_kernels(code)), casts, "cast kernels")
        self.assertEqual(self.counts["tensorcore_mm_template"], kernels)

    def assertStock(self, code, reason):
        self.assertEqual(template_kernels(code), [])
        self.assertEqual(self.counts["tensorcore_mm_template"], 0)
        self.assertGreaterEqual(self.counts[reason], 1, dict(self.counts))


class TestCostModel(TestCase):
    """The plan and configs, from shapes alone: no compile."""

    @staticmethod
    def linear_problem(m, n, k, x_castable=True, w_castable=True):
        op = heuristics.Operand
        return heuristics.Problem("addmm", 1, m, n, k, op(m * k, True, not x_castable),
                                  op(k * n, True, not w_castable), op(n, True))

    @parametrize("mnk", [(16, 4096, 4096), (128, 4096, 4096), (16, 11008, 4096), (2, 4096, 4096)],
                 name_fn=lambda mnk: "x".join(map(str, mnk)))
    def test_decode_and_prefill_take_the_template(self, mnk):
        plan = heuristics.plan(self.linear_problem(*mnk), H200)
        self.assertEqual(plan.path, "template", plan.describe())
        self.assertTrue(plan.fused_b, "the fp32 weight is what the template saves a cast of")
        self.assertTrue(plan.fused_bias)

    @parametrize("mnk", [(2048, 4096, 4096), (4096, 4096, 4096),
                         (2048, 11008, 4096), (8192, 8192, 8192)],
                 name_fn=lambda mnk: "x".join(map(str, mnk)))
    def test_compute_bound_shapes_keep_stock(self, mnk):
        plan = heuristics.plan(self.linear_problem(*mnk), H200)
        self.assertEqual(plan.path, "stock", plan.describe())

    @parametrize("mnk", [(1, 4096, 4096), (1, 11008, 4096), (1, 4096, 11008)],
                 name_fn=lambda mnk: "x".join(map(str, mnk)))
    def test_one_row_takes_gemv(self, mnk):
        # H200, 1x4096x4096: the reduction took 22.0 us, the template 29.5, stock 47.3
        plan = heuristics.plan(self.linear_problem(*mnk), H200)
        self.assertEqual(plan.path, "gemv", plan.describe())
        preds = {q.label: q.seconds for q in plan.predictions}
        self.assertLess(preds["gemv"], min(v for k, v in preds.items() if k != "gemv"))
        batched = dataclasses.replace(self.linear_problem(*mnk), op="bmm", batch=2)
        self.assertEqual(heuristics.plan(batched, H200).path, "template")
        # a symbolic M whose hint is 1 must serve larger M too: never the reduction
        dynamic = heuristics.plan_dynamic_m(self.linear_problem(*mnk), H200, 64)
        self.assertEqual(dynamic.path, "template", dynamic.describe())

    def test_plan_per_shape(self):
        # H200: at 1024x4096x4096 the weight cast in the kernel, 256x128x64 s3 swap, took
        # 70.1 us against stock's 88.0; at 2048 134.9 against 138.2 (no clear win: stock)
        T = heuristics.TileConfig
        decode = T(16, 32, 128, 8, 4, 6)
        expected = {
            (1, 4096, 4096): ("gemv", False, False, None),
            (16, 4096, 4096): ("template", True, True, decode),
            # one 128-row tile streams the fp32 weight once (H200: 34.7 us, 64x64x64 s6 36.3)
            (128, 4096, 4096): ("template", False, True, T(128, 32, 128, 8, 4, 4)),
            # several thin tiles an SM: a shallower pipeline (16x4096: one tile an SM)
            (16, 11008, 4096): ("template", True, True, dataclasses.replace(decode, num_stages=3)),
            (16, 4096, 11008): ("template", True, True, decode),
            (1024, 4096, 4096): ("template", False, True, T(256, 128, 64, 8, 8, 3, SWAP_AB=True)),
            (2048, 4096, 4096): ("stock", False, False, None),
            (4096, 4096, 4096): ("stock", False, False, None),
            (2048, 11008, 4096): ("stock", False, False, None),
            (8192, 8192, 8192): ("stock", False, False, None),
        }
        for mnk, want in expected.items():
            plan = heuristics.plan(self.linear_problem(*mnk), H200)
            self.assertEqual((plan.path, plan.fused_a, plan.fused_b, plan.config), want,
                             (mnk, plan.describe()))

    def test_decode_grid_fills_the_sms(self):
        plan = heuristics.plan(self.linear_problem(16, 4096, 4096), H200)
        cfg = plan.config
        self.assertEqual((cfg.BLOCK_M, cfg.BLOCK_N), (16, 32))
        tiles = -(-16 // cfg.BLOCK_M) * -(-4096 // cfg.BLOCK_N)
        self.assertGreaterEqual(tiles, 0.9 * H200.sm_count)

    def test_a_shared_cast_is_not_fused(self):
        # the bf16 weight is needed elsewhere (e.g. saved for backward): it is read, not re-cast
        plan = heuristics.plan(self.linear_problem(16, 4096, 4096, w_castable=False), H200)
        self.assertFalse(plan.fused_b)
        self.assertNotIn("template[b]", [p.label for p in plan.predictions])
        self.assertNotIn("template[a,b]", [p.label for p in plan.predictions])

    def test_per_operand_choice_at_prefill(self):
        # M=128: the weight cast is fused whatever is done with x
        plan = heuristics.plan(self.linear_problem(128, 4096, 4096), H200)
        self.assertTrue(plan.fused_b)
        preds = {p.label: p.seconds for p in plan.predictions}
        self.assertLess(preds["template[b]"], preds["template[a]"])

    def test_dynamic_m_plan_holds_over_the_range(self):
        p = self.linear_problem(16, 4096, 4096)
        bounded = heuristics.plan_dynamic_m(p, H200, 64)
        self.assertEqual(bounded.path, "template", bounded.describe())
        hinted = heuristics.plan(p, H200)
        self.assertGreater(bounded.config.BLOCK_M, hinted.config.BLOCK_M)  # not M=16's tile
        unbounded = heuristics.plan_dynamic_m(p, H200, 8192)
        self.assertEqual(unbounded.path, "stock", unbounded.describe())

    @parametrize("gpu", ["h200", "h100", "a100"])
    def test_every_config_fits_shared_memory(self, gpu):
        dev = heuristics.device_model(get_profile(gpu))
        for m in (1, 16, 37, 128, 200, 1024, 4096):
            for fused in ((True, True), (False, True), (True, False)):
                p = self.linear_problem(m, 4096, 4096)
                configs = heuristics.select_configs(p, dev, *fused, exhaustive=True)
                self.assertTrue(configs, (gpu, m, fused))
                for cfg in configs:
                    size = lambda f: 4 if f else 2  # noqa: E731
                    self.assertLessEqual(cfg.smem_bytes(size(fused[0]), size(fused[1])),
                                         dev.smem_per_block, (gpu, m, fused, cfg))
                    self.assertGreaterEqual(min(cfg.BLOCK_M, cfg.BLOCK_N, cfg.BLOCK_K), 16)

    def test_too_little_shared_memory_keeps_stock(self):
        import dataclasses

        tiny = dataclasses.replace(H200, smem_per_block=16 * 1024)
        plan = heuristics.plan(self.linear_problem(16, 4096, 4096), tiny)
        self.assertEqual(plan.path, "stock")
        self.assertTrue(plan.reason.startswith("smem"), plan.reason)

    def test_pre_ampere_has_no_model(self):
        class T4:
            name, major, minor, multi_processor_count = "Tesla T4", 7, 5, 40
            shared_memory_per_block_optin = 65536

        self.assertIsNone(heuristics.device_model(T4))


class TestTensorCoreMMCodegen(TensorCoreMMTestCase):
    """Generated code, GPU-free, for the H200."""

    def test_golden_decode(self):
        # M=16: one template kernel reads fp32 x, w and bias; no cast kernel
        code = self.cuda_code(linear(), torch.randn(16, 4096), torch.randn(4096, 4096),
                              torch.randn(4096))
        self.assertTemplate(code)
        self.assertExpectedCode(code)

    def test_golden_decode_epilogue(self):
        # gelu(F.linear) + residual fused as the template's epilogue, on the rounded value
        def fn(x, w, b, r):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return F.gelu(F.linear(x, w, b), approximate="tanh") + r

        code = self.cuda_code(fn, torch.randn(16, 4096), torch.randn(4096, 4096),
                              torch.randn(4096), torch.randn(16, 4096))
        self.assertTemplate(code)
        self.assertExpectedCode(code)

    def test_golden_decode_split_k(self):
        # N=1024: 64 tiles for 132 SMs, so K is split in two; the last program of a
        # tile adds the partials in a fixed order and runs the epilogue
        code = self.cuda_code(linear(), torch.randn(16, 4096), torch.randn(1024, 4096),
                              torch.randn(1024))
        self.assertTemplate(code)
        src = kernel_source(code, template_kernels(code)[0])
        self.assertIn("SPLIT_K : tl.constexpr = 2", src)
        self.assertRegex("\n".join(code), r"workspace_\d+\.zero_\(\)")
        self.assertExpectedCode(code)

    def test_golden_gemv(self):
        # M=1: one reduction over K reads the fp32 x, w and bias, rounds them to bf16
        # in registers and sums in fp32; the bias and the rounding follow in the kernel
        code = self.cuda_code(linear(), torch.randn(1, 4096), torch.randn(4096, 4096),
                              torch.randn(4096))
        self.assertEqual(template_kernels(code), [])
        self.assertEqual(cast_kernels(code), [])
        self.assertEqual(self.counts["tensorcore_mm_gemv"], 1)
        (name,) = re.findall(r"(triton_red_fused_\w+?_\d+)\.run\(", "\n".join(code))
        src = kernel_source(code, name)
        self.assertNotRegex("\n".join(code), r"extern_kernels\.\w+\(")
        FileCheck().check("tl.load").check(".to(tl.bfloat16)").check(".to(tl.float32)").check(
            "tl.sum").check(".to(tl.bfloat16)").check("tl.store").run(src)
        self.assertExpectedCode(code)

    @parametrize("op", ["mm", "addmm"])
    @parametrize("dtype", [BF16, FP16], name_fn=dtype_name)
    def test_gemv_ops(self, op, dtype):
        inputs = matmul_inputs(op, 1, 999, 1001)
        code = self.cuda_code(matmul_op(op, dtype), *inputs)
        self.assertEqual(self.counts["tensorcore_mm_gemv"], 1, dict(self.counts))
        self.assertEqual(template_kernels(code) + cast_kernels(code), [])
        self.assertIn(f".to(tl.{dtype_name(dtype)})", "\n".join(code))

    def test_golden_prefill(self):
        # M=128: the weight and bias cast in the template; x by its own kernel, since
        # the 64 column tiles re-read it (cheaper in bf16: H200 36.6 us vs 42.3 us)
        code = self.cuda_code(linear(), torch.randn(128, 4096), torch.randn(4096, 4096),
                              torch.randn(4096))
        self.assertTemplate(code, casts=1)
        self.assertExpectedCode(code)

    def test_golden_prefill_epilogue(self):
        def fn(x, w, b):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return F.relu(F.linear(x, w, b)) * 2.0

        code = self.cuda_code(fn, torch.randn(128, 4096), torch.randn(4096, 4096),
                              torch.randn(4096))
        self.assertTemplate(code, casts=1)
        self.assertExpectedCode(code)

    def test_golden_stock_kept(self):
        # M=4096 is compute-bound: separate casts and cuBLAS, as stock
        code = self.cuda_code(linear(), torch.randn(4096, 4096), torch.randn(4096, 4096))
        self.assertStock(code, "tensorcore_mm_stock:cost_model")
        self.assertEqual(len(cast_kernels(code)), 2)
        self.assertExpectedCode(code)

    def dynamic_m_code(self, m_max):
        def fn(x, w, b):
            if m_max is None:
                torch._dynamo.mark_dynamic(x, 0)
            else:
                torch._dynamo.mark_dynamic(x, 0, min=2, max=m_max)
            return torch.compile(linear())(x, w, b)

        torch._dynamo.reset()
        counters.clear()
        tensorcore(True)
        try:
            with tolerate_dynamic_outputs():
                return get_code(fn, torch.randn(16, 4096), torch.randn(4096, 4096),
                                torch.randn(4096), gpu="h200")
        finally:
            tensorcore(False)

    def test_golden_dynamic_m(self):
        # M symbolic up to 64: one kernel, with a config chosen for the whole range
        code = self.dynamic_m_code(64)
        self.assertTemplate(code)
        src = kernel_source(code, template_kernels(code)[0])
        self.assertRegex(src, r"\n    M = ks0\n")  # M symbolic, N and K static
        self.assertRegex(src, r"\n    N = 4096\n")
        self.assertExpectedCode(code)

    def test_dynamic_m_without_bound_keeps_stock(self):
        # a decode-shaped kernel would also run every prefill: not without a bound on M
        code = self.dynamic_m_code(None)
        self.assertStock(code, "tensorcore_mm_stock:dynamic_m_range")

    def test_epilogue_reads_the_rounded_value(self):
        def fn(x, w, b):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return F.gelu(F.linear(x, w, b))

        code = self.cuda_code(fn, torch.randn(16, 512), torch.randn(256, 512), torch.randn(256))
        self.assertTemplate(code)
        src = kernel_source(code, template_kernels(code)[0])
        m = re.search(r"(tmp\d+) = acc \+ (tmp\d+)\n\s+(tmp\d+) = \1\.to\(tl\.bfloat16\)\n"
                      r"\s+(tmp\d+) = \3\.to\(tl\.float32\)\n", src)
        self.assertIsNotNone(m, src)
        # the bias as autocast casts it: rounded to bf16 first
        self.assertRegex(src, rf"{m.group(2)} = tmp\d+\.to\(tl\.float32\)")
        tail = src[m.end():]
        self.assertNotIn("acc", tail, "an epilogue reads the unrounded accumulator")
        FileCheck().check(f"{m.group(4)}").check("libdevice.erf").check("tl.store").run(tail)

    @parametrize("op", ["mm", "addmm", "bmm", "baddbmm"])
    @parametrize("dtype", [BF16, FP16], name_fn=dtype_name)
    def test_ops(self, op, dtype):
        code = self.cuda_code(matmul_op(op, dtype), *matmul_inputs(op, 16, 64, 96))
        self.assertTemplate(code)
        src = kernel_source(code, template_kernels(code)[0])
        self.assertIn(f"DOT_DTYPE : tl.constexpr = tl.{dtype_name(dtype)}", src)
        self.assertIn(f"BATCHED : tl.constexpr = {op in ('bmm', 'baddbmm')}", src)
        if op in ("addmm", "baddbmm"):  # alpha and beta in the epilogue, before the rounding
            FileCheck().check("tl.full([1], 2.0").check("= acc * ").check(
                "tl.full([1], 0.5").check(f".to(tl.{dtype_name(dtype)})").run(src)

    @parametrize("mnk", [(2, 4096, 4096), (37, 1001, 999), (5, 17, 33), (64, 8, 7)],
                 name_fn=lambda mnk: "x".join(map(str, mnk)))
    def test_odd_shapes(self, mnk):
        m, n, k = mnk
        code = self.cuda_code(linear(), torch.randn(m, k), torch.randn(n, k), torch.randn(n))
        self.assertTemplate(code)
        src = kernel_source(code, template_kernels(code)[0])
        even_k = k % int(re.search(r"BLOCK_K : tl.constexpr = (\d+)", src).group(1)) == 0
        self.assertIn(f"EVEN_K : tl.constexpr = {even_k}", src)
        if not even_k:
            self.assertIn("mask=a_mask", src)

    @parametrize("layout", ["w_kn", "w_nk_t", "x_t", "x_3d"])
    def test_operand_layouts(self, layout):
        # transposed and permuted operands reach the template as strided fp32 views
        def fn(x, w):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                if layout == "w_kn":
                    return x @ w  # w [K, N] row-major: N contiguous
                if layout == "w_nk_t":
                    return x @ w.t()  # F.linear's weight: K contiguous
                if layout == "x_t":
                    return x.t() @ w  # x given [K, M]: M contiguous
                return torch.matmul(x, w.t())  # x [B, S, K] viewed as [B*S, K]

        x = {"x_t": torch.randn(96, 16), "x_3d": torch.randn(2, 8, 96)}.get(layout, torch.randn(16, 96))
        w = torch.randn(96, 64) if layout in ("w_kn", "x_t") else torch.randn(64, 96)
        code = self.cuda_code(fn, x, w)
        self.assertTemplate(code)
        self.assertIn("'arg_A': '*fp32', 'arg_B': '*fp32'", "\n".join(code))

    def test_a_shared_cast_is_read_not_fused(self):
        # x's bf16 cast is also an output: the template reads it and fuses only w's cast
        def fn(x, w):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                xb = x.to(torch.bfloat16)
                return F.linear(xb, w) + xb.sum()

        code = self.cuda_code(fn, torch.randn(16, 4096), torch.randn(4096, 4096))
        self.assertEqual(len(template_kernels(code)), 1)
        self.assertIn("'arg_A': '*bf16', 'arg_B': '*fp32'", "\n".join(code))

    def test_template_compiles_for_sm90(self):
        # shared memory within the estimate (else a launch fails on the GPU), no spills
        cases = [(16, 4096), (128, 4096), (16, 1024), (1024, 4096)]  # (16, 1024) splits K
        for m, n in cases:
            code = self.cuda_code(linear(), torch.randn(m, 4096), torch.randn(n, 4096), torch.randn(n))
            name = template_kernels(code)[0]
            src = kernel_source(code, name)
            report = compile_for_sm90(name, src)
            cfg = config_of(src)
            self.assertEqual(cfg.SPLIT_K > 1, n == 1024, cfg)
            self.assertEqual(cfg.BLOCK_M == 256, m == 1024, cfg)  # 256x128x64 s3 swap
            est = cfg.smem_bytes(2 if m >= 128 else 4, 4)  # x cast in the kernel below M=128
            self.assertLessEqual(report["shared"], est, (m, cfg, report))
            self.assertEqual(report["spill_bytes"], 0, (m, cfg, report))
            self.assertTrue(report["mma"], "no tensor-core instruction in the PTX")

    def test_max_autotune_adds_configs_and_the_stock_path(self):
        from torch._inductor.codegen.subgraph import SubgraphChoiceCaller
        from torch._inductor.select_algorithm import TritonTemplateCaller

        seen = []

        def pick_first(name, choices, *args, **kwargs):
            seen.append(list(choices))
            return choices[0].output_node()

        with (inductor_config.patch(max_autotune=True, max_autotune_gemm_backends="TRITON"),
              mock.patch.object(mm_tensorcore, "autotune_select_algorithm", pick_first)):
            self.cuda_code(linear(), torch.randn(16, 512), torch.randn(256, 512), torch.randn(256))
        (choices,) = seen
        templates = [c for c in choices if isinstance(c, TritonTemplateCaller)]
        self.assertGreater(len(templates), 1)
        self.assertTrue(all(c.name.startswith("triton_tensorcore_mm") for c in templates))
        self.assertEqual(sum(isinstance(c, SubgraphChoiceCaller) for c in choices), 1)


class TestTensorCoreMMFallback(TensorCoreMMTestCase):
    """Everything the template does not take goes to the stock lowering, counted."""

    def test_fp64_under_autocast(self):
        code = self.cuda_code(linear(), torch.randn(16, 64, dtype=torch.float64),
                              torch.randn(32, 64, dtype=torch.float64))
        self.assertStock(code, "tensorcore_mm_fallback:dtype:float64")
        self.assertIn("extern_kernels.mm(", "\n".join(code))

    def test_integers(self):
        def fn(x, w):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return x @ w

        code = self.cuda_code(fn, torch.randint(0, 9, (16, 64)), torch.randint(0, 9, (64, 32)))
        self.assertStock(code, "tensorcore_mm_fallback:dtype:int64")

    def test_fp32_outside_autocast(self):
        # stock path: TF32 exactly as torch.backends.cuda.matmul allows
        code = self.cuda_code(lambda x, w: F.linear(x, w), torch.randn(16, 64), torch.randn(32, 64))
        self.assertStock(code, "tensorcore_mm_fallback:not_autocast")
        stock = self.cuda_code(lambda x, w: F.linear(x, w), torch.randn(16, 64),
                               torch.randn(32, 64), overlay=False)
        self.assertEqual(comparable(code), comparable(stock))

    def test_already_16bit(self):
        # nothing to cast in the kernel (the backward's matmuls look like this)
        code = self.cuda_code(linear(), torch.randn(16, 64, dtype=BF16), torch.randn(32, 64, dtype=BF16))
        self.assertStock(code, "tensorcore_mm_stock:no_fp32_operand")

    def test_zero_alpha_or_beta(self):
        # beta=0 ignores the input, NaNs included; alpha=0 the product: stock does that
        def fn(c, x, w):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return torch.addmm(c, x, w.t(), beta=0.0) + torch.addmm(c, x, w.t(), alpha=0.0)

        code = self.cuda_code(fn, torch.randn(16, 32), torch.randn(16, 64), torch.randn(32, 64))
        self.assertStock(code, "tensorcore_mm_fallback:arguments")

    def test_cpu_autocast_runs_stock(self):
        def fn(x, w):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return F.linear(x, w)

        x, w = torch.randn(8, 32), torch.randn(16, 32)
        torch._dynamo.reset()
        tensorcore(True)
        try:
            with inductor_config.patch(fx_graph_cache=False):
                out = torch.compile(fn)(x, w)
        finally:
            tensorcore(False)
        self.assertEqual(self.counts["tensorcore_mm_template"], 0)
        self.assertGreaterEqual(self.counts["tensorcore_mm_fallback:device:cpu"], 1, dict(self.counts))
        self.assertEqual(out, fn(x, w))

    def test_internal_error(self):
        with mock.patch.object(heuristics, "plan", side_effect=RuntimeError("boom")), \
                self.assertLogs(mm_tensorcore.log, logging.WARNING) as logs:
            code = self.cuda_code(linear(), torch.randn(16, 64), torch.randn(32, 64), strict=False)
        self.assertEqual(len(logs.records), 1)
        self.assertIn("internal error: RuntimeError: boom", logs.output[0])
        self.assertStock(code, "tensorcore_mm_fallback:internal_error")
        stock = self.cuda_code(linear(), torch.randn(16, 64), torch.randn(32, 64), overlay=False)
        self.assertEqual(comparable(code), comparable(stock))

    def test_internal_error_raises_when_strict(self):
        with mock.patch.object(heuristics, "plan", side_effect=RuntimeError("boom")):
            with self.assertRaisesRegex(Exception, "boom"):
                self.cuda_code(linear(), torch.randn(16, 64), torch.randn(32, 64))

    def test_config_exceeding_shared_memory(self):
        import dataclasses

        small = dataclasses.replace(H200, smem_per_block=8 * 1024)
        with mock.patch.object(heuristics, "device_model", return_value=small):
            code = self.cuda_code(linear(), torch.randn(16, 4096), torch.randn(4096, 4096))
        self.assertStock(code, "tensorcore_mm_fallback:smem")
        self.assertEqual(len(cast_kernels(code)), 2)

    def test_reimport_keeps_one_template(self):
        import importlib

        from torch._inductor.select_algorithm import TritonTemplate

        before = TritonTemplate.all_templates["tensorcore_mm"]
        with mock.patch.dict(sys.modules):
            importlib.reload(mm_tensorcore)
        self.assertIs(TritonTemplate.all_templates["tensorcore_mm"], before)


# With a GPU, TestTensorCoreMMGPU checks the same values on the device; and Triton 3.6's
# interpreter fails under numpy 2.5 (the H200 image: "only 0-dimensional arrays can be
# converted to Python scalars"), while constraints.txt pins the numpy it runs with here.
@unittest.skipIf(torch.cuda.is_available(), "the GPU value tests cover this on a GPU")
class TestTensorCoreMMInterpreter(TensorCoreMMTestCase):
    """The generated kernels' values, run by Triton's interpreter on the CPU.

    fp16 autocast: the interpreter rounds fp32 -> fp16 as the GPU does (round to
    nearest even; its bf16 conversion does not), so the kernel must match the
    emulation of eager autocast up to fp32 summation order.
    """

    def test_values(self):
        swap = heuristics.TileConfig(16, 64, 32, 8, 4, 3, SWAP_AB=True)
        cases = [
            ("addmm", (37, 70, 99), None),  # M, N, K off every tile size
            ("mm", (1, 33, 64), None),
            ("bmm", (16, 24, 40), None),
            ("baddbmm", (5, 16, 17), None),
            ("addmm", (37, 70, 99), swap),  # C^T = B^T A^T, stored transposed
            ("baddbmm", (20, 9, 50), swap),
            # K split in 4, the last program of each tile sums the partials
            ("addmm", (5, 40, 300), heuristics.TileConfig(16, 16, 32, 8, 4, 2, SPLIT_K=4)),
            ("mm", (1, 20, 1000), heuristics.TileConfig(16, 16, 64, 8, 4, 3, SPLIT_K=8)),
        ]
        jobs, expected = [], []
        for op, (m, n, k), config in cases:
            inputs = matmul_inputs(op, m, n, k, batch=2)
            fn = matmul_op(op, FP16)

            def scaled(*args, fn=fn):
                return fn(*args) * 3.0  # a fused epilogue after the rounding

            # the template even where M = 1 would take the gemv reduction
            with heuristics.forced("template", config=config):
                code = self.cuda_code(scaled, *inputs)
            if config is not None:
                self.assertIn(f"SWAP_AB : tl.constexpr = {config.SWAP_AB}", "\n".join(code))
                self.assertIn(f"SPLIT_K : tl.constexpr = {config.SPLIT_K}", "\n".join(code))
            self.assertTemplate(code)
            (name,) = template_kernels(code)
            call = re.search(rf"{name}\.run\((.*?), stream=", "\n".join(code)).group(1)
            grid = [int(a) for a in call.split(", ")[-3:]]
            out = torch.empty(emulate(op, inputs).shape, dtype=FP16)
            src = kernel_source(code, name)
            # the kernel's arguments are the fp32 inputs in aten order, the output, and
            # split-K's workspace, zeroed as the wrapper zeroes it
            workspace = re.search(r"workspace_\d+ = empty_strided_cuda\(\((\d+), \)", "\n".join(code))
            extra = [torch.zeros(int(workspace.group(1)), dtype=torch.uint8)] if workspace else []
            self.assertEqual(bool(extra), config is not None and config.SPLIT_K > 1)
            tiles = -(-m // cfg.BLOCK_M) * -(-n // cfg.BLOCK_N) if (cfg := config) else 0
            jobs.append(dict(name=name, source=src[src.index("@triton.jit"):], grid=grid,
                             args=[*inputs, out, *extra], out=len(inputs), semaphores=4 * tiles))
            expected.append((emulate(op, inputs).float() * 3.0).to(FP16))
        outputs = run_in_interpreter(jobs)
        for (op, shape, _), out, ref in zip(cases, outputs, expected):
            if isinstance(out, tuple):
                out, semaphores_zeroed = out
                self.assertTrue(semaphores_zeroed, "split-K left a semaphore raised")
            diff = (out.float() - ref.float()).abs()
            ulp = ref.float().abs().clamp_min(2**-14) * 2.0**-10
            self.assertTrue(bool((diff <= ulp).all()), (op, shape, diff.max()))
            self.assertLessEqual((diff > 0).float().mean().item(), 0.02, (op, shape))


def emulate(op, inputs, dtype=FP16, rounded=True, matmul=None):
    """Eager autocast on the CPU: 16-bit-rounded operands, fp32 sums, one rounding.
    ``rounded`` False skips the operands' rounding; ``matmul`` replaces the fp32 one."""
    r = (lambda t: t.to(dtype).float()) if rounded else (lambda t: t.float())  # noqa: E731
    mm = matmul or torch.matmul
    if op == "mm":
        x, w = inputs
        return mm(r(x), r(w).transpose(-1, -2)).to(dtype)
    if op == "bmm":
        x, w = inputs
        return mm(r(x), r(w).transpose(1, 2)).to(dtype)
    if op == "addmm":
        b, x, w = inputs
        return (2.0 * mm(r(x), r(w).t()) + 0.5 * r(b)).to(dtype)
    c, x, w = inputs
    return (2.0 * mm(r(x), r(w).transpose(1, 2)) + 0.5 * r(c)).to(dtype)


def split_k_matmul(parts, partial_dtype=FP32):
    """An fp32 matmul summed over ``parts`` chunks of K in order, the running sum kept
    in ``partial_dtype`` (fp32: another correct summation order; 16 bits: wrong)."""

    def mm(a, b):
        acc = None
        for a_k, b_k in zip(a.chunk(parts, -1), b.chunk(parts, -2)):
            p = a_k @ b_k
            acc = p if acc is None else acc + p
            acc = acc.to(partial_dtype).float()
        return acc

    return mm


class TestValueCriterion(TestCase):
    """numerics.compare/verdict (the GPU tests' and the checker's criterion), GPU-free:
    eager is emulated on the CPU; correct results pass, wrong ones fail."""

    def judge(self, op, dtype, out, mnk=(48, 160, 4096)):
        inputs = matmul_inputs(op, *mnk, batch=2)
        refs = numerics.references(lambda *a: emulate(op, a, dtype), lambda *d: emulate_fp64(op, d),
                                   inputs, dtype)
        c = numerics.compare(out(inputs), refs, dtype)
        return numerics.verdict(c), c

    @parametrize("op", ["mm", "addmm", "bmm", "baddbmm"])
    @parametrize("dtype", [BF16, FP16], name_fn=dtype_name)
    def test_criterion(self, op, dtype):
        cases = {
            # correct: eager itself, and another fp32 summation order (split K)
            "eager": (True, lambda i: emulate(op, i, dtype)),
            "split_k": (True, lambda i: emulate(op, i, dtype, matmul=split_k_matmul(8))),
            # wrong: operands not rounded to 16 bits, 16-bit partial sums, fp32 output
            "unrounded_operands": (False, lambda i: emulate(op, i, dtype, rounded=False)),
            "16bit_partials": (False, lambda i: emulate(op, i, dtype, matmul=split_k_matmul(8, dtype))),
            "fp32_output": (False, lambda i: emulate(op, i, dtype).float()),
        }
        if op in ("addmm", "baddbmm"):
            # a rounding too many: the product rounded to 16 bits before alpha and beta
            cases["double_rounding"] = (False, lambda i: emulate(
                op, i, dtype, matmul=lambda a, b: (a @ b).to(dtype).float()))

        def perturbed(i):  # 2 ulps off on 10% of the elements
            out = emulate(op, i, dtype).double()
            g = torch.Generator().manual_seed(1)
            hit = torch.rand(out.shape, generator=g) < 0.1
            return torch.where(hit, out + 2 * numerics.ulp_at(out, dtype), out).to(dtype)

        cases["2ulps_on_10pct"] = (False, perturbed)
        for name, (ok, out) in cases.items():
            passed, c = self.judge(op, dtype, out)
            self.assertEqual(passed, ok, (name, c))

    def test_fp32_summation_near_zero(self):
        # fp16 outputs near 0 carry the fp32 summation error (H200: up to 1.9e-5 at K=4096,
        # several 16-bit ulps there): within tolerance, not a mismatch
        def noisy(i):
            exact = emulate_fp64("baddbmm", [t.to(FP16) for t in i])
            g = torch.Generator().manual_seed(2)
            err = (torch.rand(exact.shape, generator=g, dtype=torch.float64) * 2 - 1) * 2e-5
            return (exact + err).to(FP16)

        passed, c = self.judge("baddbmm", FP16, noisy, mnk=(16, 512, 4096))
        self.assertTrue(passed, c)
        self.assertGreater(c["ulps_ideal"], 1.0, "no element near 0 exercised the allowance")


_INTERPRETER_MAIN = r'''
import os, sys
os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: every @jit interpreted
os.environ["CUDA_VISIBLE_DEVICES"] = ""  # no GPU: the interpreter runs on the CPU
import torch
jobs = torch.load(sys.argv[1])
header = ("import triton\nimport triton.language as tl\n"
          "from torch._inductor.runtime import triton_helpers\n"
          "from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math\n")
outs = []
for job in jobs:
    ns = {}
    exec(compile(header + job["source"], job["name"], "exec"), ns)
    ns[job["name"]][tuple(job["grid"])](*job["args"])  # CPU tensors, run on the CPU
    outs.append(job["args"][job["out"]])
    if len(job["args"]) > job["out"] + 1:  # split-K leaves its semaphores zeroed
        ws = job["args"][-1]
        outs[-1] = (outs[-1], bool((ws[-job["semaphores"]:] == 0).all()))
torch.save(outs, sys.argv[2])
'''


def run_in_interpreter(jobs):
    with tempfile.TemporaryDirectory() as d:
        d = pathlib.Path(d)
        torch.save(jobs, d / "jobs.pt")
        (d / "main.py").write_text(_INTERPRETER_MAIN)
        # the CPU only, on a GPU machine too: no CUDA device for torch or Triton to pick
        # up; the environment (PYTHONPATH included) otherwise this process's. Its stderr
        # goes into the failure (it needs only torch and triton, not this repository)
        env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
        proc = subprocess.run([sys.executable, str(d / "main.py"), str(d / "jobs.pt"), str(d / "outs.pt")],
                              capture_output=True, text=True, timeout=300, env=env, cwd=d)
        if proc.returncode != 0:
            raise AssertionError(f"Triton's interpreter exited {proc.returncode}:\n"
                                 f"{proc.stderr[-6000:]}\n{proc.stdout[-2000:]}")
        return torch.load(d / "outs.pt")


def config_of(src: str) -> heuristics.TileConfig:
    def get(name):
        return re.search(rf"{name} : tl.constexpr = (\w+)", src).group(1)

    stages = int(re.search(r"num_stages=(\d+)", src).group(1))
    warps = int(re.search(r"num_warps=(\d+)", src).group(1))
    return heuristics.TileConfig(int(get("BLOCK_M")), int(get("BLOCK_N")), int(get("BLOCK_K")),
                                 int(get("GROUP_M")), warps, stages, get("SWAP_AB") == "True",
                                 int(get("SPLIT_K")))


def compile_for_sm90(name: str, src: str) -> dict:
    """Compile a generated template kernel with Triton for sm_90; no GPU needed."""
    import importlib.util

    import triton
    from torch._inductor.runtime.hints import DeviceProperties
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    triton_meta = eval(re.search(r"triton_meta=(\{.*?\}),\n", src, re.S).group(1),
                       {"DeviceProperties": DeviceProperties})
    cfg = config_of(src)
    with tempfile.TemporaryDirectory() as d:
        path = pathlib.Path(d) / f"{name}.py"
        path.write_text("import triton\nimport triton.language as tl\n"
                        + src[src.index("@triton.jit"):])
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        compiled = triton.compile(
            ASTSource(fn=getattr(module, name), signature=triton_meta["signature"],
                      attrs=triton_meta["configs"][0]),
            target=GPUTarget("cuda", 90, 32),
            options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages},
        )
        ptx = compiled.asm["ptx"]
        ptxas = pathlib.Path(triton.__file__).parent / "backends/nvidia/bin/ptxas"
        (pathlib.Path(d) / "k.ptx").write_text(ptx)
        info = subprocess.run([str(ptxas), "-v", "--gpu-name=sm_90a", str(pathlib.Path(d) / "k.ptx"),
                               "-o", str(pathlib.Path(d) / "k.cubin")],
                              capture_output=True, text=True, check=True).stderr
    return dict(shared=compiled.metadata.shared,
                spill_bytes=int(re.search(r"(\d+) bytes spill stores", info).group(1)),
                mma=ptx.count("wgmma.mma_async") + ptx.count("mma.sync"))


# ---------------------------------------------------------------------------- GPU

# values: tools/check_tensorcore_mm.py's criterion, from the module both use
# (torch_overlay/testing/numerics.py; its ``compare`` defines it)
# the cost model keeps these batched shapes on the stock path (checked GPU-free with
# the h200 profile); their values are still checked, against the same criterion
STOCK_BY_COST_MODEL = {("bmm", (200, 96, 4095)), ("baddbmm", (200, 96, 4095))}


class TestTensorCoreMMGPU(TensorCoreMMTestCase):
    """On a CUDA GPU: values against eager autocast and an fp64 reference."""

    def compile_and_run(self, fn, *inputs, dynamic=None):
        torch._dynamo.reset()
        tensorcore(True)
        try:
            with (inductor_config.patch(fx_graph_cache=False),
                  functorch_config.patch(enable_autograd_cache=False)):
                return run_and_get_code(torch.compile(fn, dynamic=dynamic), *inputs)
        finally:
            tensorcore(False)

    def assertLikeEager(self, actual, fn, inputs, fn64, dtype):
        """tools/check_tensorcore_mm.py's criterion, the same code (numerics.compare
        documents it): (a) error vs fp64 no worse than eager autocast's; (b) within one
        16-bit ulp plus fp32 summation error of the correctly rounded value, and equal
        to it (or to a rounding that summation error explains, or to eager with fp32
        reductions) on all but 2% of the elements."""
        c = numerics.compare(actual, numerics.references(fn, fn64, inputs, dtype), dtype)
        self.assertTrue(numerics.verdict(c), c)

    @requires_cuda_gpu
    @parametrize("op", ["mm", "addmm", "bmm", "baddbmm"])
    @parametrize("dtype", [BF16, FP16], name_fn=dtype_name)
    # the last splits K (mm, addmm); M=1 takes the gemv reduction (mm, addmm)
    @parametrize("mnk", [(1, 4096, 4096), (1, 1001, 999), (16, 4096, 4096), (37, 1001, 999),
                         (128, 256, 136), (200, 96, 4095), (16, 1024, 4096)],
                 name_fn=lambda mnk: "x".join(map(str, mnk)))
    def test_values(self, op, dtype, mnk):
        inputs = matmul_inputs(op, *mnk, batch=2, device=GPU_TYPE)
        fn = matmul_op(op, dtype)
        out, code = self.compile_and_run(fn, *inputs)
        self.assertLikeEager(out, fn, inputs, lambda *d: emulate_fp64(op, d), dtype)
        if mnk[0] == 1 and op in ("mm", "addmm"):  # one row: a reduction kernel
            self.assertEqual(template_kernels(code), [])
            self.assertEqual(self.counts["tensorcore_mm_gemv"], 1, dict(self.counts))
        elif (op, mnk) in STOCK_BY_COST_MODEL:
            self.assertEqual(template_kernels(code), [])
            self.assertGreaterEqual(self.counts["tensorcore_mm_stock:cost_model"], 1, dict(self.counts))
        else:
            self.assertEqual(len(template_kernels(code)), 1, dict(self.counts))

    @requires_cuda_gpu
    def test_fused_epilogue_values(self):
        def fn(x, w, b, r):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return F.gelu(F.linear(x, w, b), approximate="tanh") + r

        g = torch.Generator(device=GPU_TYPE).manual_seed(0)
        x, w, b, r = (torch.randn(s, device=GPU_TYPE, generator=g) for s in
                      ((16, 1024), (512, 1024), (512,), (16, 512)))
        out, code = self.compile_and_run(fn, x, w, b, r)
        self.assertEqual(len(template_kernels(code)), 1)
        torch.testing.assert_close(out, fn(x, w, b, r), atol=2**-6, rtol=2**-7)

    @requires_cuda_gpu
    def test_dynamic_m(self):
        fn = linear()
        w, b = torch.randn(512, 1024, device=GPU_TYPE), torch.randn(512, device=GPU_TYPE)
        torch._dynamo.reset()
        tensorcore(True)
        try:
            compiled = torch.compile(fn)
            for m in (16, 2, 33, 64):
                x = torch.randn(m, 1024, device=GPU_TYPE)
                torch._dynamo.mark_dynamic(x, 0, min=2, max=64)
                self.assertLikeEager(compiled(x, w, b), fn, [x, w, b], F.linear, BF16)
            self.assertEqual(self.counts["tensorcore_mm_template"], 1)  # one compile, symbolic M
        finally:
            tensorcore(False)

    @requires_cuda_gpu
    @parametrize("dtype", [BF16, FP16], name_fn=dtype_name)
    def test_training(self, dtype):
        # forward and backward of an MLP with fp32 parameters under autocast
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(),
                                    torch.nn.Linear(512, 256)).to(GPU_TYPE)
        x = torch.randn(16, 256, device=GPU_TYPE, requires_grad=True)

        def step(m, inp):
            with torch.autocast("cuda", dtype=dtype):
                out = m(inp)
            out.float().square().mean().backward()
            return out

        eager_out = step(model, x)
        eager_grads = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
        model.zero_grad()
        x.grad = None
        torch._dynamo.reset()
        tensorcore(True)
        try:
            out = step(torch.compile(model), x)
        finally:
            tensorcore(False)
        torch.testing.assert_close(out, eager_out, atol=2e-2, rtol=2e-2)
        for got, want in zip([p.grad for p in model.parameters()] + [x.grad], eager_grads):
            torch.testing.assert_close(got, want, atol=2e-2, rtol=5e-2)


# ----------------------------------------------------------------------- freezing

def frozen_linear(n, k, bias=True, seed=0):
    """An fp32 nn.Linear whose parameters Inductor's freezing folds into bf16 constants."""
    g = torch.Generator().manual_seed(seed)
    lin = torch.nn.Linear(k, n, bias=bias).requires_grad_(False)
    lin.weight.copy_(torch.randn(n, k, generator=g) / k**0.5)
    if bias:
        lin.bias.copy_(torch.randn(n, generator=g))
    return lin


def under_bf16_autocast(mod, x):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return mod(x)


def constant_args(code, kernel):
    """The arguments of ``kernel``'s launch in the wrapper."""
    m = re.search(rf"{kernel}\.run\(([^)]*)\)", "\n".join(code))
    assert m is not None, kernel
    return [a.strip() for a in m.group(1).split(",")]


class TestTensorCoreMMFreezing(TensorCoreMMTestCase):
    """``torch._inductor.config.freezing`` (issue 17): the autocast casts of fp32 parameters
    are folded into bf16 constants before this lowering runs; the matmul reads them as
    stored, never an fp32 weight, and the decode kernels stream them where the cost model
    predicts a win over cuBLAS. GPU-free, for the H200."""

    def frozen_code(self, mod, x, overlay=True):
        with torch.no_grad(), inductor_config.patch(freezing=True):
            return self.cuda_code(under_bf16_autocast, mod, x, overlay=overlay)

    def assertReadsBf16Constants(self, code, kernel):
        src = kernel_source(code, kernel)
        signature = re.search(r"'signature': \{([^}]*)\}", src).group(1)
        args = constant_args(code, kernel)
        frozen = [i for i, a in enumerate(args) if a.startswith("_frozen_param")]
        self.assertTrue(frozen, args)
        types = re.findall(r"'(\w+)': '(\*?\w+)'", signature)
        for i in frozen:  # each frozen constant is read as bf16
            self.assertEqual(types[i][1], "*bf16", (args[i], types))
        # the fp32 parameters are not arguments of the graph
        self.assertNotRegex("\n".join(code), r"_frozen_param\d+ = None  # [^\n]*torch\.float32 \((4096|14336), ")

    def test_golden_frozen_decode(self):
        # M=16, 4096x4096: one template kernel reads the fp32 x (cast in registers), the
        # bf16 weight and bias constants freezing folded; no cast kernel, no cuBLAS call
        code = self.frozen_code(frozen_linear(4096, 4096), torch.randn(16, 4096))
        self.assertTemplate(code)
        self.assertEqual(self.counts["tensorcore_mm_template_frozen"], 1)
        (kernel,) = template_kernels(code)
        self.assertReadsBf16Constants(code, kernel)
        self.assertNotIn("extern_kernels.", "\n".join(code))
        self.assertExpectedCode(code)

    def test_golden_frozen_gemv(self):
        # M=1: the gemv reduction over K reads the bf16 weight constant (K contiguous)
        code = self.frozen_code(frozen_linear(4096, 4096), torch.randn(1, 4096))
        self.assertEqual(self.counts["tensorcore_mm_gemv_frozen"], 1, dict(self.counts))
        self.assertEqual(template_kernels(code) + cast_kernels(code), [])
        (kernel,) = re.findall(r"(triton_red_fused_\w+?_\d+)\.run\(", "\n".join(code))
        self.assertReadsBf16Constants(code, kernel)
        # x (fp32) rounded to bf16 in registers; the weight loaded as bf16, then fp32 sums
        FileCheck().check("tl.load(in_ptr0").check("tl.load(in_ptr1").check(
            ".to(tl.bfloat16)").check("tl.sum").check("tl.store").run(kernel_source(code, kernel))
        self.assertExpectedCode(code)

    def test_frozen_prefill_is_frozen_stock(self):
        # M=256: cuBLAS on the bf16 constant, as frozen stock (same code, metadata aside)
        mod, x = frozen_linear(1024, 4096), torch.randn(256, 4096)
        code = self.frozen_code(mod, x)
        self.assertEqual(template_kernels(code), [])
        self.assertGreaterEqual(self.counts["tensorcore_mm_stock:cost_model"], 1, dict(self.counts))
        stock = self.frozen_code(mod, x, overlay=False)
        self.assertEqual(comparable(code), comparable(stock))
        self.assertIn("extern_kernels.addmm(_frozen_param", "\n".join(code))

    def test_frozen_16bit_x_where_cublas_is_not_beaten_is_stock(self):
        # x already bf16 (a norm's output in a model), 16x4096x4096: the template would
        # only stream the weight about as cuBLAS does: stock, counted as such
        def fn(mod, x):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return mod(torch.relu(x).to(torch.bfloat16))

        mod, x = frozen_linear(4096, 4096, bias=False), torch.randn(16, 4096)
        with torch.no_grad(), inductor_config.patch(freezing=True):
            code = self.cuda_code(fn, mod, x)
        self.assertEqual(template_kernels(code), [])
        self.assertEqual(self.counts["tensorcore_mm_stock:cost_model_frozen"], 1, dict(self.counts))

    def test_frozen_concatenated_linears(self):
        # freezing concatenates linears that share their input (Llama's w1, w3) into one
        # mm traced anew, without autocast's marks: still a bf16 mm of a frozen weight
        class GatedUp(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.w1 = frozen_linear(14336, 4096, bias=False, seed=1)
                self.w3 = frozen_linear(14336, 4096, bias=False, seed=2)

            def forward(self, x):
                return F.silu(self.w1(x)) * self.w3(x)

        code = self.frozen_code(GatedUp(), torch.randn(16, 4096))
        self.assertEqual(self.counts["tensorcore_mm_template_frozen"], 1, dict(self.counts))
        (kernel,) = template_kernels(code)
        self.assertReadsBf16Constants(code, kernel)
        self.assertRegex("\n".join(code), r"torch\.bfloat16 \(4096, 28672\)")  # w1|w3, one constant

    def test_frozen_distinct_constants_stay_distinct(self):
        # the harness keeps two frozen parameters of one shape apart (their FakeTensors
        # share data_ptr 0, which Inductor's constant dedup would otherwise merge)
        class Two(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = frozen_linear(256, 256, seed=1), frozen_linear(256, 256, seed=2)

            def forward(self, x):
                return self.a(x) + self.b(x)

        code = self.frozen_code(Two(), torch.randn(4, 256), overlay=False)
        consts = set(re.findall(r"^(_frozen_param\d+) = None  # [^\n]*\(256, 256\)", "\n".join(code), re.M))
        self.assertEqual(len(consts), 2, consts)

    def test_plans_for_a_frozen_weight(self):
        op = heuristics.Operand

        def problem(m, n, k, x_fp32=True):
            return heuristics.Problem("addmm" if x_fp32 else "mm", 1, m, n, k, op(m * k, x_fp32),
                                      op(n * k, False), op(n, False) if x_fp32 else None,
                                      weight16=True)

        paths = {mnk: heuristics.plan(problem(*mnk), H200).path for mnk in [
            (1, 4096, 4096), (16, 4096, 4096), (16, 14336, 4096), (1, 4096, 14336),
            (1, 14336, 4096), (64, 14336, 4096), (256, 14336, 4096), (16, 4096, 14336)]}
        self.assertEqual(paths, {
            (1, 4096, 4096): "gemv", (16, 4096, 4096): "template", (16, 14336, 4096): "template",
            # one row: the gemv, never a 16-row tile (H200: 0.0438 ms against 0.0475)
            (1, 4096, 14336): "gemv", (1, 14336, 4096): "gemv",
            # beyond decode, and where one tile an SM streams no faster than cuBLAS: stock
            (64, 14336, 4096): "stock", (256, 14336, 4096): "stock", (16, 4096, 14336): "stock"})
        plan = heuristics.plan(problem(16, 14336, 4096), H200)
        self.assertFalse(plan.fused_b)  # the weight is read as stored, 2 bytes an element
        self.assertTrue(plan.fused_a)
        # batched, or a device without the cuBLAS rate measured: as before (no 16-bit path)
        batched = dataclasses.replace(problem(16, 14336, 4096, x_fp32=False), op="bmm", batch=2)
        self.assertEqual(heuristics.plan(batched, H200).path, "stock")
        unknown = dataclasses.replace(H200, stream_cublas16=0.0)
        self.assertEqual(heuristics.plan(problem(16, 14336, 4096, x_fp32=False), unknown).path,
                         "stock")

    @requires_cuda_gpu
    @parametrize("mnk", [(1, 4096, 4096), (16, 4096, 4096), (1, 14336, 4096), (16, 14336, 4096),
                         (4, 14336, 4096), (1, 4096, 14336), (64, 14336, 4096)],
                 name_fn=lambda mnk: "x".join(map(str, mnk)))
    def test_frozen_values_GPU(self, mnk):
        # against eager autocast on the fp32 parameters and an fp64 reference
        m, n, k = mnk
        lin = frozen_linear(n, k).to(GPU_TYPE)
        x = torch.randn(m, k, device=GPU_TYPE)
        torch._dynamo.reset()
        tensorcore(True)
        try:
            with (torch.no_grad(), inductor_config.patch(freezing=True, fx_graph_cache=False),
                  functorch_config.patch(enable_autograd_cache=False)):
                out, code = run_and_get_code(torch.compile(under_bf16_autocast), lin, x)
        finally:
            tensorcore(False)
        self.assertIn("_frozen_param", "\n".join(code))
        refs = numerics.references(linear(), F.linear, [x, lin.weight, lin.bias], BF16)
        c = numerics.compare(out, refs, BF16)
        self.assertTrue(numerics.verdict(c), c)


def emulate_fp64(op, inputs):
    d = [t.double() for t in inputs]
    if op == "mm":
        return d[0] @ d[1].t()
    if op == "bmm":
        return torch.bmm(d[0], d[1].transpose(1, 2))
    if op == "addmm":
        return 2.0 * (d[1] @ d[2].t()) + 0.5 * d[0]
    return 2.0 * torch.bmm(d[1], d[2].transpose(1, 2)) + 0.5 * d[0]


instantiate_parametrized_tests(TestCostModel)
instantiate_parametrized_tests(TestTensorCoreMMCodegen)
instantiate_parametrized_tests(TestTensorCoreMMGPU)
instantiate_parametrized_tests(TestValueCriterion)
instantiate_parametrized_tests(TestTensorCoreMMFreezing)

if __name__ == "__main__":
    run_tests()
