"""tensorcore_mm's numerics, project-only: what the exported test/inductor/test_tensorcore_mm.py
and test_tensorcore_mm_decode.py cannot carry upstream.

- ``TestTensorCoreMMInterpreter``: the generated kernels' values, run by Triton's
  interpreter on the CPU (GPU-free; the kernels come from the faked H200 of the pytest
  plugin torch_overlay.testing.gpu_free).
- ``TestValueCriterion``: torch_overlay.testing.numerics (the criterion the GPU tests
  below share), GPU-free on emulated eager results.
- ``TestTensorCoreMMGPUCriterion``, ``TestTensorCoreBMMGPUCriterion``, ``...GemvGPUCriterion``,
  ``...FreezingCriterion``: the exported files' value tests on the GPU again, judged by
  numerics.compare/verdict (the exported file checks dtype and the error against fp64 only).
- ``TestTensorCoreMMFreezingHarness``: the plugin keeps frozen parameters of one shape
  apart.

The cases and helpers are the exported file's (imported, not copied).
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import unittest
import unittest.mock

import torch
from torch._inductor import config as inductor_config
from torch._inductor.kernel import mm_tensorcore_plan as planner
from torch._inductor.test_case import TestCase, run_tests
from torch.testing._internal.common_utils import instantiate_parametrized_tests, parametrize
from torch.testing._internal.inductor_utils import GPU_TYPE

from torch_overlay.testing import numerics

# the exported test module, as pytest imports it (test/inductor has no __init__.py)
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "inductor"))
import test_tensorcore_mm as exported  # noqa: E402
import test_tensorcore_mm_bmm as exported_bmm  # noqa: E402
import test_tensorcore_mm_decode as exported_decode  # noqa: E402
import test_tensorcore_mm_dynamic as exported_dynamic  # noqa: E402

BF16, FP16, FP32 = exported.BF16, exported.FP16, exported.FP32
TensorCoreMMTestCase = exported.TensorCoreMMTestCase
matmul_inputs, matmul_op, emulate_fp64 = exported.matmul_inputs, exported.matmul_op, exported.emulate_fp64
template_kernels, kernel_source = exported.template_kernels, exported.kernel_source
dtype_name = exported.dtype_name

# a real CUDA device (torch.cuda.is_available() is true on the plugin's faked one too)
HAS_REAL_GPU = torch._C._cuda_getDeviceCount() > 0


# With a GPU, TestTensorCoreMMGPU checks the same values on the device; and Triton 3.6's
# interpreter fails under numpy 2.5 (the H200 image: "only 0-dimensional arrays can be
# converted to Python scalars"), while constraints.txt pins the numpy it runs with here.
@unittest.skipIf(HAS_REAL_GPU, "the GPU value tests cover this on a GPU")
class TestTensorCoreMMInterpreter(TensorCoreMMTestCase):
    """The generated kernels' values, run by Triton's interpreter on the CPU.

    fp16 autocast: the interpreter rounds fp32 -> fp16 as the GPU does (round to
    nearest even; its bf16 conversion does not), so the kernel must match the
    emulation of eager autocast up to fp32 summation order.
    """

    def test_values(self):
        swap = planner.TileConfig(16, 64, 32, 8, 4, 3, SWAP_AB=True)
        cases = [
            ("addmm", (37, 70, 99), None),  # M, N, K off every tile size
            ("mm", (1, 33, 64), None),
            ("bmm", (16, 24, 40), None),
            ("baddbmm", (5, 16, 17), None),
            ("addmm", (37, 70, 99), swap),  # C^T = B^T A^T, stored transposed
            ("baddbmm", (20, 9, 50), swap),
            # K split in 4, the last program of each tile sums the partials
            ("addmm", (5, 40, 300), planner.TileConfig(16, 16, 32, 8, 4, 2, SPLIT_K=4)),
            ("mm", (1, 20, 1000), planner.TileConfig(16, 16, 64, 8, 4, 3, SPLIT_K=8)),
            # both: the partials are [BLOCK_N, BLOCK_M] tiles (max-autotune's neighbour)
            ("addmm", (37, 70, 300), dataclasses.replace(swap, SPLIT_K=2)),
            # fewer rows than tl.dot takes: products on the CUDA cores, rows past M wrap
            ("addmm", (3, 70, 99), planner.TileConfig(4, 4, 64, 8, 4, 3)),
            ("mm", (2, 33, 600), planner.TileConfig(2, 2, 512, 8, 4, 3)),
        ]
        jobs, expected = [], []
        for op, (m, n, k), config in cases:
            inputs = matmul_inputs(op, m, n, k, batch=2)
            fn = matmul_op(op, FP16)

            def scaled(*args, fn=fn):
                return fn(*args) * 3.0  # a fused epilogue after the rounding

            # the template even where M = 1 would take the gemv reduction
            with inductor_config.patch(
                    tensorcore_mm_force_path="template",
                    tensorcore_mm_force_config=config and dataclasses.asdict(config)):
                code = self.cuda_code(scaled, *[t.to(GPU_TYPE) for t in inputs])
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
            # fp32 sums in another order (the CPU reference's BLAS differs between
            # machines) flip an fp16 rounding now and then: 2% of the elements, or one
            self.assertLessEqual(int((diff > 0).sum()), max(1, int(0.02 * diff.numel())),
                                 (op, shape))

    def test_dynamic_m_dispatch_values(self):
        # a symbolic M's kernels (one per range, picked at run time) each mask any M:
        # every kernel is right at an M of every range, its grid the wrapper's for M
        n = k = 256
        fn = matmul_op("mm", FP16)

        def marked(x, w):
            torch._dynamo.mark_dynamic(x, 0)
            return torch.compile(fn)(x, w)

        torch._dynamo.reset()
        with exported.tensorcore(True), exported.no_caches(), exported.tolerate_dynamic_outputs():
            code = exported.get_code(marked, *[t.to(GPU_TYPE) for t in matmul_inputs("mm", 4, n, k)])
        src = "\n".join(c for c in code if c)
        names = re.findall(r"\): (triton_tem_fused_\w+?_\d+),\n", src)
        self.assertEqual(len(names), 3, src)  # up to 64, up to 256, above
        call = re.search(r"multi_kernel_\d+\.run\((.*?), stream=", src).group(1).split(", ")
        # the kernels' arguments, M (a size symbol), then each kernel's grid
        grids, symbol = call[-3 * len(names):], call[-3 * len(names) - 1]
        jobs, expected = [], []
        for m in (3, 17, 64, 65, 300):
            inputs = matmul_inputs("mm", m, n, k)
            for i, name in enumerate(names):
                source = kernel_source(code, name)
                grid = [eval(g, {symbol: m}) for g in grids[3 * i:3 * i + 3]]  # noqa: S307
                out = torch.empty(m, n, dtype=FP16)
                jobs.append(dict(name=name, source=source[source.index("@triton.jit"):],
                                 grid=grid, args=[*inputs, out, m], out=2, semaphores=0))
                x16, w16 = (t.to(FP16).float().abs() for t in inputs)
                expected.append((m, name, emulate("mm", inputs), k * 2.0**-24 * (x16 @ w16.t())))
        for out, (m, name, ref, sum_error) in zip(run_in_interpreter(jobs), expected):
            diff = (out.float() - ref.float()).abs()
            # one fp16 ulp, and near 0 the fp32 sum's error in another order
            ulp = ref.float().abs().clamp_min(2**-14) * 2.0**-10
            self.assertTrue(bool((diff <= ulp + sum_error).all()), (m, name, diff.max()))
            self.assertLessEqual(int((diff > 0).sum()), max(1, int(0.02 * diff.numel())), (m, name))

    def test_gemv_template_values(self):
        # one row times a [K, N] weight (the gemv template): K off the split, N off
        # BLOCK_N; each split's fp32 partial sum of fp16-rounded products (fp16: the
        # interpreter rounds it as the GPU does)
        k, n = 200, 70
        x, w = torch.randn(1, k), torch.randn(k, n)

        def row_major_fp16(x, w):
            with torch.autocast("cuda", dtype=FP16):
                return x @ w

        code = self.cuda_code(row_major_fp16, x.to(GPU_TYPE), w.to(GPU_TYPE))
        (name,) = template_kernels(code)
        call = re.search(rf"{name}\.run\((.*?), stream=", "\n".join(code)).group(1)
        grid = [int(a) for a in call.split(", ")[-3:]]
        (rows,) = map(int, re.findall(r"ROWS : tl.constexpr = (\d+)", "\n".join(code)))
        splits = -(-k // rows)
        self.assertEqual(grid[1], splits)
        src = kernel_source(code, name)
        (out,) = run_in_interpreter([dict(
            name=name, source=src[src.index("@triton.jit"):], grid=grid,
            args=[x, w, torch.full((splits, n), float("nan"))], out=2)])
        products = x.to(FP16).float().t() * w.to(FP16).float()
        expected = torch.stack([products[s * rows:(s + 1) * rows].sum(0) for s in range(splits)])
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)

    def test_gemv_nk_template_values(self):
        # one row times an [N, K] weight through the gemv template (one split, the
        # epilogue fused): K off BLOCK_K and past 1024 with a third of Inductor's lanes
        # idle, N off BLOCK_N (the width rule patched away: the interpreter runs few
        # programs); fp32 sums of fp16-rounded products, one rounding
        k, n = 1279, 37
        x, w, b = torch.randn(1, k), torch.randn(n, k) / k**0.5, torch.randn(n)

        def linear_fp16(x, w, b):
            with torch.autocast("cuda", dtype=FP16):
                return torch.nn.functional.linear(x, w, b)

        with unittest.mock.patch.object(planner, "GEMV_NK_COLUMNS_PER_SM", 0):
            code = self.cuda_code(linear_fp16, *(t.to(GPU_TYPE) for t in (x, w, b)))
        (name,) = template_kernels(code)
        self.assertEqual(re.findall(r"triton_(?:per|red|poi)_\w+\.run\(", "\n".join(code)), [])
        call = re.search(rf"{name}\.run\((.*?), stream=", "\n".join(code)).group(1)
        grid = [int(a) for a in call.split(", ")[-3:]]
        self.assertEqual(grid[1], 1)
        src = kernel_source(code, name)
        # the kernel's parameters: x, w, the bias (the epilogue's input), the output
        self.assertRegex(src, rf"def {name}\(arg_A, arg_B, in_ptr\d+, out_ptr\d+\)")
        (out,) = run_in_interpreter([dict(
            name=name, source=src[src.index("@triton.jit"):], grid=grid,
            args=[x, w, b, torch.full((1, n), float("nan"), dtype=FP16)], out=3)])
        r = lambda t: t.to(FP16).float()  # noqa: E731
        expected = (r(x) @ r(w).t() + r(b)).to(FP16)
        diff = (out.float() - expected.float()).abs()
        ulp = expected.float().abs().clamp_min(2**-14) * 2.0**-10
        self.assertTrue(bool((diff <= ulp).all()), diff.max())


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
    if len(job["args"]) > job["out"] + 1 and job["semaphores"]:  # split-K's zeroed
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


def numerics_assert_like_eager(self, actual, fn, inputs, fn64, dtype):
    """The value criterion, the same code (numerics.compare
    documents it): (a) error vs fp64 no worse than eager autocast's; (b) within one
    16-bit ulp plus fp32 summation error of the correctly rounded value, and equal
    to it (or to a rounding that summation error explains, or to eager with fp32
    reductions) on all but 2% of the elements."""
    c = numerics.compare(actual, numerics.references(fn, fn64, inputs, dtype), dtype)
    if c["dtype_ok"] and c["mismatch_default"] == 0.0:
        # eager autocast's own values: a stock path (a GPU's timed choice may keep stock).
        # (b) judges the template's rounding; cuBLAS under torch's defaults may reduce
        # fp16 in fp16 (H100, fp16 200x96x4095: 18 ulps)
        return
    self.assertTrue(numerics.verdict(c), c)


def only_tests(cls, *prefixes):
    """``cls`` with the inherited tests not named ``prefixes`` removed."""
    for name in dir(cls):
        if name.startswith("test") and not name.startswith(prefixes):
            setattr(cls, name, None)  # not callable: unittest does not collect it
    return cls


class TestTensorCoreMMGPUCriterion(exported.TestTensorCoreMMGPU):
    """The exported GPU value tests (test_values), judged by numerics, through the
    template on every GPU (elsewhere than the H200 the plan may keep stock)."""

    assertLikeEager = numerics_assert_like_eager

    def compile_values(self, op, dtype, mnk):
        with inductor_config.patch(tensorcore_mm_force_path="template"):
            return super().compile_values(op, dtype, mnk)

    def assertPath(self, code, other=None):
        # the path is forced: a shape the plan keeps on stock runs the template too
        super().assertPath(code)


only_tests(TestTensorCoreMMGPUCriterion, "test_values")


class TestTensorCoreBMMGPUCriterion(exported_bmm.TestTensorCoreBMMGPU):
    """The exported bmm/baddbmm value tests, judged by numerics."""

    assertLikeEager = numerics_assert_like_eager


class TestTensorCoreMMDynamicGPUCriterion(exported_dynamic.TestTensorCoreMMDynamicGPU):
    """The exported symbolic-M value test, judged by numerics."""

    assertLikeEager = numerics_assert_like_eager


class TestTensorCoreMMGemvGPUCriterion(exported_decode.TestTensorCoreMMGemvGPU):
    """The exported one-row value tests, judged by numerics."""

    assertLikeEager = numerics_assert_like_eager


class TestTensorCoreMMFewRowsGPUCriterion(exported_decode.TestTensorCoreMMFewRowsGPU):
    """The exported few-row value tests, judged by numerics."""

    assertLikeEager = numerics_assert_like_eager


class TestTensorCoreMMFreezingCriterion(exported_decode.TestTensorCoreMMFreezing):
    """The exported frozen value tests, judged by numerics."""

    assertLikeEager = numerics_assert_like_eager


only_tests(TestTensorCoreMMFreezingCriterion, "test_frozen_values_GPU")


class TestTensorCoreMMFreezingHarness(TensorCoreMMTestCase):
    def test_frozen_distinct_constants_stay_distinct(self):
        # the harness keeps two frozen parameters of one shape apart (their FakeTensors
        # share data_ptr 0, which Inductor's constant dedup would otherwise merge)
        class Two(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a = exported_decode.frozen_linear(256, 256, seed=1)
                self.b = exported_decode.frozen_linear(256, 256, seed=2)

            def forward(self, x):
                return self.a(x) + self.b(x)

        with torch.no_grad(), inductor_config.patch(freezing=True):
            code = self.cuda_code(exported_decode.under_bf16_autocast, Two().to(GPU_TYPE),
                                  torch.randn(4, 256, device=GPU_TYPE), enabled=False)
        consts = set(re.findall(r"^(_frozen_param\d+) = None  # [^\n]*\(256, 256\)", "\n".join(code), re.M))
        self.assertEqual(len(consts), 2, consts)


instantiate_parametrized_tests(TestValueCriterion)

if __name__ == "__main__":
    run_tests()
