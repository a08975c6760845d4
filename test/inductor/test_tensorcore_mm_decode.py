# Owner(s): ["module: inductor"]
"""``config.tensorcore_mm_autocast`` at decode: one row as a reduction over K (gemv), and
16-bit weights that Inductor's freezing folded into constants.

As test_tensorcore_mm.py: the plans as plain Python for the H200's properties, the
generated CUDA code for the H200's plans, and values on any CUDA GPU with sm_80.
"""

from __future__ import annotations

import dataclasses
import re

import torch
import torch.nn.functional as F
from torch._inductor import config as inductor_config
from torch._inductor.kernel import mm_tensorcore_plan as planner
from torch._inductor.test_case import run_tests, TestCase
from torch.testing import FileCheck
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
)
from torch.testing._internal.inductor_utils import GPU_TYPE


try:
    from .test_tensorcore_mm import (
        A10G,
        BF16,
        cast_kernels,
        comparable,
        constexpr,
        DEVICE_SPECS,
        dtype_name,
        FP16,
        gpu_randn,
        H200,
        kernel_source,
        linear,
        linear_problem,
        matmul_inputs,
        matmul_op,
        plans_as_a10g,
        plans_as_h200,
        requires_cuda_sm80,
        template_kernels,
        TensorCoreMMTestCase,
    )
except ImportError:
    from test_tensorcore_mm import (
        A10G,
        BF16,
        cast_kernels,
        comparable,
        constexpr,
        DEVICE_SPECS,
        dtype_name,
        FP16,
        gpu_randn,
        H200,
        kernel_source,
        linear,
        linear_problem,
        matmul_inputs,
        matmul_op,
        plans_as_a10g,
        plans_as_h200,
        requires_cuda_sm80,
        template_kernels,
        TensorCoreMMTestCase,
    )


def frozen_weight_problem(m, n, k, x_fp32=True):
    """A linear's 16-bit [N, K] weight constant (``Problem.weight16``) and x, fp32 or not."""
    op = planner.Operand
    return planner.Problem(
        "addmm" if x_fp32 else "mm",
        1,
        m,
        n,
        k,
        op(m * k, x_fp32),
        op(n * k, False),
        op(n, False) if x_fp32 else None,
        weight16=True,
        b_k_contiguous=True,
    )


class TestGemvPlan(TestCase):
    """The plan for one row, from shapes alone: no compile."""

    @parametrize("k_contiguous", [False, True])
    def test_gemv_configs(self, k_contiguous):
        # the template's program steps through its ROWS by BLOCK_K, and every config of
        # one matmul splits K alike (the partial sums' layout); more only under autotune.
        # Over a K-contiguous weight one split spans K
        (default,) = planner.gemv_configs(1280, 5120, H200, k_contiguous)
        tuned = planner.gemv_configs(1280, 5120, H200, k_contiguous, autotune=True)
        self.assertEqual(tuned[0], default)
        self.assertGreater(len(tuned), 1)
        for cfg in tuned:
            self.assertEqual(cfg.ROWS % cfg.BLOCK_K, 0, cfg)
            self.assertEqual(cfg.ROWS, default.ROWS, cfg)
        self.assertEqual(default.ROWS >= 1280, k_contiguous)

    def test_gemv_rows(self):
        # over a [K, N] weight: the deepest split that leaves three programs an SM
        def programs(k, n, rows):
            return -(-n // planner.GEMV_CONFIG.BLOCK_N) * -(-k // rows)

        for dev in (H200, A10G):
            for k, n in [(1280, 1280), (1280, 3840), (5120, 1280), (64, 64)]:
                rows = planner.gemv_rows(k, n, dev)
                enough = [
                    r
                    for r in planner.GEMV_ROWS
                    if programs(k, n, r) >= 3 * dev.sm_count
                ]
                self.assertEqual(rows, max(enough, default=128), (k, n))
        shapes = [(1280, 1280), (1280, 3840), (1280, 5120), (5120, 1280)]
        rows = [planner.gemv_rows(k, n, H200) for k, n in shapes]
        self.assertEqual(rows, [128, 256, 512, 512])

    def test_gemv_nk(self):
        # an [N, K] weight takes the template where Inductor's reduction idles over 30%
        # of its lanes (K = 1280, 2560) and N is an lm_head's; not power-of-two K, K of
        # a persistent reduction (768), 22-25% idle (1600, 3072) or narrow weights
        for gpu in ("h200", "h100"):
            dev = planner.device_model(DEVICE_SPECS[gpu])
            for k, n, nk in [
                (1280, 50257, True),
                (2560, 10240, True),
                (2560, 50304, True),
                (1280, 5120, False),
                (2560, 2560, False),
                (768, 30522, False),
                (1600, 50257, False),
                (3072, 50257, False),
                (4096, 128256, False),
            ]:
                self.assertEqual(planner.gemv_nk(k, n, dev), nk, (gpu, k, n))

    def test_gemv16_nk(self):
        # a 16-bit [N, K] weight takes the template where it is wide enough for its
        # programs to fill the SMs, and K is a whole number of its steps
        for gpu in ("h200", "a10g", "l4"):
            dev = planner.device_model(DEVICE_SPECS[gpu])
            self.assertTrue(planner.gemv16_nk(4096, 128256, dev))
            self.assertTrue(planner.gemv16_nk(1280, 50257, dev))
            self.assertFalse(planner.gemv16_nk(4096, 1024, dev))
            self.assertFalse(planner.gemv16_nk(11008, 4096, dev))  # 256-deep, long
            self.assertFalse(planner.gemv16_nk(1000, 50257, dev))
        for k, block_k in [(4096, 512), (3584, 512), (1280, 256), (768, 256)]:
            (cfg,) = planner.gemv16_nk_configs(k)
            self.assertEqual((cfg.BLOCK_N, cfg.BLOCK_K, cfg.ROWS), (8, block_k, k))
        tuned = planner.gemv16_nk_configs(4096, autotune=True)
        self.assertEqual(tuned[0], planner.gemv16_nk_configs(4096)[0])
        self.assertGreater(len(tuned), 1)
        for cfg in tuned:  # one split of whole steps
            self.assertEqual((cfg.ROWS, cfg.ROWS % cfg.BLOCK_K), (4096, 0), cfg)

    def test_gemv_template_configs(self):
        # one row's configs by the weight as it is read: 16-bit or fp32, [K, N] or [N, K]
        def configs(k, n, weight16, k_contiguous):
            return planner.gemv_template_configs(k, n, H200, weight16, k_contiguous)

        self.assertEqual(
            configs(1280, 3840, True, False),
            planner.gemv16_kn_configs(1280, 3840, H200),
        )
        self.assertEqual(
            configs(4096, 128256, True, True), planner.gemv16_nk_configs(4096)
        )
        self.assertEqual(
            configs(1280, 3840, False, False), planner.gemv_configs(1280, 3840, H200)
        )
        self.assertEqual(
            configs(1280, 50257, False, True),
            planner.gemv_configs(1280, 50257, H200, k_contiguous=True),
        )
        # Inductor's inner reduction: a narrow 16-bit [N, K] weight, an fp32 one whose
        # rows fill its lanes
        self.assertEqual(configs(4096, 1024, True, True), [])
        self.assertEqual(configs(4096, 4096, False, True), [])

    def test_gemv16_kn(self):
        # a 16-bit [K, N] weight (Conv1D's) takes the template where it is small; K is
        # split in 512 rows past 2K, and below where its columns leave SMs idle
        small = dataclasses.replace(
            frozen_weight_problem(1, 3840, 1280), b_k_contiguous=False
        )
        self.assertTrue(planner.gemv16_kn(small))
        self.assertFalse(
            planner.gemv16_kn(dataclasses.replace(small, b_k_contiguous=True))
        )
        large = dataclasses.replace(
            small, n=14336, k=4096, b=planner.Operand(14336 * 4096, False)
        )
        self.assertFalse(planner.gemv16_kn(large))
        rows = {
            (k, n): planner.gemv16_kn_configs(k, n, H200)[0].ROWS
            for k, n in [(1280, 3840), (1280, 1280), (5120, 1280), (1000, 5120)]
        }
        self.assertEqual(
            rows,
            {
                (1280, 3840): 1280,
                (1280, 1280): 256,
                (5120, 1280): 512,
                (1000, 5120): 1024,
            },
        )
        tuned = planner.gemv16_kn_configs(5120, 1280, H200, autotune=True)
        self.assertEqual(tuned[0], planner.gemv16_kn_configs(5120, 1280, H200)[0])
        self.assertGreater(len(tuned), 1)
        for cfg in tuned:  # every config splits K alike, in whole steps
            self.assertEqual((cfg.ROWS, cfg.ROWS % cfg.BLOCK_K), (512, 0), cfg)

    @parametrize(
        "mnk",
        [(1, 4096, 4096), (1, 11008, 4096), (1, 4096, 11008)],
        name_fn=lambda mnk: "x".join(map(str, mnk)),
    )
    def test_one_row_takes_gemv(self, mnk):
        # one row: a reduction over K reads each operand once, no MMA tile a sixteenth full
        plan = planner.plan(linear_problem(*mnk), H200)
        self.assertEqual(plan.path, planner.Path.GEMV, plan.describe())
        preds = {q.label: q.seconds for q in plan.predictions}
        self.assertLess(preds["gemv"], min(v for k, v in preds.items() if k != "gemv"))
        batched = dataclasses.replace(linear_problem(*mnk), op="bmm", batch=2)
        self.assertEqual(planner.plan(batched, H200).path, planner.Path.TEMPLATE)
        # a symbolic M whose hint is 1 must serve larger M too: never the reduction
        dynamic = planner.plan_dynamic_m(linear_problem(*mnk), H200, 64)
        self.assertEqual(dynamic.path, planner.Path.TEMPLATE, dynamic.describe())


@plans_as_h200
class TestTensorCoreMMGemvCodegen(TensorCoreMMTestCase):
    """Generated code for the H200's plans (nothing run)."""

    def test_gemv(self):
        # M=1: one reduction over K reads the fp32 x, w and bias, rounds them to bf16
        # in registers and sums in fp32; the bias and the rounding follow in the kernel
        code = self.cuda_code(linear(), *gpu_randn((1, 4096), (4096, 4096), (4096,)))
        self.assertEqual(template_kernels(code), [])
        self.assertEqual(cast_kernels(code), [])
        self.assertEqual(self.counts["tensorcore_mm_gemv"], 1)
        (name,) = re.findall(r"(triton_red_fused_\w+?_\d+)\.run\(", "\n".join(code))
        src = kernel_source(code, name)
        self.assertNotRegex("\n".join(code), r"extern_kernels\.\w+\(")
        FileCheck().check("tl.load").check(".to(tl.bfloat16)").check(
            ".to(tl.float32)"
        ).check("tl.sum").check(".to(tl.bfloat16)").check("tl.store").run(src)

    def test_gemv_of_an_lm_head(self):
        # an [N, K] weight whose K leaves Inductor's reduction lanes idle (1280 of 2048):
        # the gemv template sums two whole rows a program, one split, bias and rounding
        # in its epilogue; one kernel
        code = self.cuda_code(linear(), *gpu_randn((1, 1280), (50257, 1280), (50257,)))
        self.assertEqual(cast_kernels(code), [])
        self.assertEqual(self.counts["tensorcore_mm_gemv"], 1)
        (name,) = template_kernels(code)
        self.assertEqual(
            re.findall(r"triton_(?:per|red|poi)_\w+\.run\(", "\n".join(code)), []
        )
        self.assertNotRegex("\n".join(code), r"extern_kernels\.\w+\(")
        FileCheck().check("'arg_B': '*fp32'").check("BLOCK_N : tl.constexpr = 2").check(
            "ROWS : tl.constexpr = 1536"
        ).check("stride_bk = 1").check("b.to(DOT_DTYPE)").check("tl.sum(acc, 0)").check(
            ".to(tl.bfloat16)"
        ).check("tl.store").run(kernel_source(code, name))

    def test_gemv_after_a_norm(self):
        # x from a norm (its bf16 copy comes out of the norm's kernel): the reduction reads
        # it from a buffer, not recomputing the norm for every output column
        def fn(h, g, w):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                x = F.layer_norm(h, (h.shape[-1],), g)
                return F.linear(x, w)

        code = self.cuda_code(fn, *gpu_randn((1, 1280), (1280,), (50257, 1280)))
        self.assertEqual(self.counts["tensorcore_mm_gemv"], 1, dict(self.counts))
        reductions = re.findall(r"(triton_\w+?_\d+)\.run\(", "\n".join(code))
        gemv = [
            k
            for k in reductions
            if "rsqrt" not in kernel_source(code, k)
            and "tl.sum" in kernel_source(code, k)
            and "50257" in kernel_source(code, k)
        ]
        self.assertEqual(len(gemv), 1, reductions)
        # the norm ran before it
        self.assertNotIn("rsqrt", kernel_source(code, gemv[0]))

    def test_one_row_of_a_row_major_weight(self):
        # Conv1D's [K, N] weight (N contiguous): the gemv template reads slabs of the fp32
        # weight, rounds them to bf16 in registers and writes a partial sum a split; one
        # reduction kernel adds the splits. No cast kernel, no cuBLAS call
        code = self.cuda_code(row_major_weight, *gpu_randn((1, 4096), (4096, 4096)))
        self.assertEqual(self.counts["tensorcore_mm_gemv"], 1, dict(self.counts))
        self.assertEqual(cast_kernels(code), [])
        self.assertNotRegex("\n".join(code), r"extern_kernels\.\w+\(")
        (name,) = template_kernels(code)
        FileCheck().check("'arg_A': '*fp32'").check("'arg_B': '*fp32'").check(
            "DOT_DTYPE : tl.constexpr = tl.bfloat16"
        ).check("B + rk[:, None] * stride_bk").check("b.to(DOT_DTYPE)").check(
            "tl.sum(acc, 0)"
        ).check("tl.store").run(kernel_source(code, name))
        reductions = re.findall(
            r"triton_(?:per|red)_fused_\w+?_\d+\.run\(", "\n".join(code)
        )
        self.assertEqual(len(reductions), 1, reductions)

    @parametrize("op", ["mm", "addmm"])
    @parametrize("dtype", [BF16, FP16], name_fn=dtype_name)
    def test_gemv_ops(self, op, dtype):
        inputs = matmul_inputs(op, 1, 999, 1001, device=GPU_TYPE)
        code = self.cuda_code(matmul_op(op, dtype), *inputs)
        self.assertEqual(self.counts["tensorcore_mm_gemv"], 1, dict(self.counts))
        self.assertEqual(template_kernels(code) + cast_kernels(code), [])
        self.assertIn(f".to(tl.{dtype_name(dtype)})", "\n".join(code))


def row_major_weight(x, w):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return x @ w


class TestTensorCoreMMGemvGPU(TensorCoreMMTestCase):
    """One row on a CUDA GPU, for the A10G's plans: values against eager autocast and an
    fp64 reference, and the path its cost model takes."""

    @plans_as_a10g
    @parametrize("op", ["mm", "addmm", "bmm", "baddbmm"])
    @parametrize("dtype", [BF16, FP16], name_fn=dtype_name)
    @parametrize(
        "mnk",
        [(1, 4096, 4096), (1, 1001, 999), (1, 10241, 1279)],
        name_fn=lambda mnk: "x".join(map(str, mnk)),
    )
    def test_values(self, op, dtype, mnk):
        # 10241 x 1279: the [N, K] gemv template, its masks on both
        code = self.compile_values(op, dtype, mnk)
        if op in ("mm", "addmm"):  # a reduction; batched rows take the tile template
            gemv_nk = planner.gemv_nk(mnk[2], mnk[1], A10G)
            self.assertEqual(len(template_kernels(code)), int(gemv_nk))
            self.assertEqual(self.counts["tensorcore_mm_gemv"], 1, dict(self.counts))
        else:
            self.assertEqual(len(template_kernels(code)), 1, dict(self.counts))

    @requires_cuda_sm80
    @parametrize(
        "kn",
        [(1001, 999), (4096, 4096), (33, 200)],
        name_fn=lambda kn: "x".join(map(str, kn)),
    )
    def test_row_major_weight_values(self, kn):
        # the gemv template's masks: K and N neither multiples of its blocks nor of a split
        inputs = gpu_randn((1, kn[0]), kn)
        out, code = self.compile_and_run(row_major_weight, *inputs)
        self.assertLikeEager(out, row_major_weight, inputs, torch.mm, torch.bfloat16)
        self.assertEqual(self.counts["tensorcore_mm_gemv"], 1, dict(self.counts))


def linear_weight_problem(m, n, k):
    """``linear_problem`` with F.linear's weight: its K contiguous."""
    return dataclasses.replace(linear_problem(m, n, k), b_k_contiguous=True)


class TestFewRowsPlan(TestCase):
    """Two to four rows of an fp32 weight: tiles under tl.dot's 16 rows, from shapes alone."""

    @parametrize(
        "mnk,rows",
        [
            ((2, 4096, 4096), 2),
            ((2, 32128, 1024), 2),
            ((3, 1024, 4096), 4),
            ((4, 1024, 1024), 4),
            # 16-column tiles fill the SMs: the tensor cores keep up with the weight
            ((4, 4096, 1024), 16),
            ((4, 14336, 4096), 16),
            ((8, 1024, 1024), 16),
        ],
        name_fn=lambda mnk, rows: "x".join(map(str, mnk)),
    )
    def test_block_m(self, mnk, rows):
        plan = planner.plan(linear_weight_problem(*mnk), H200)
        self.assertEqual(plan.path, planner.Path.TEMPLATE, plan.describe())
        self.assertEqual(plan.config.BLOCK_M, rows, plan.describe())
        if rows < 16:  # one row tile reads the weight once, K in deep steps
            self.assertEqual(plan.config.BLOCK_N, rows)
            self.assertEqual(plan.config.SPLIT_K, 1)
            self.assertIn(plan.config.BLOCK_K, (512, 1024))

    def test_forced_configs_fit_every_gpu(self):
        # the values tests launch these on any CI GPU: the A10G's shared memory, the least
        smem = DEVICE_SPECS["a10g"].smem_per_block
        for rows in (2, 4):
            config = planner.TileConfig(**few_rows_config(rows))
            self.assertLessEqual(config.smem_bytes(4, 4), smem, config)

    def test_only_an_fp32_weight_of_one_matmul(self):
        p = linear_weight_problem(2, 4096, 4096)
        self.assertLess(planner.select_configs(p, H200, True, True)[0].BLOCK_M, 16)
        # a 16-bit weight, batched rows: the 16-row tiles
        self.assertEqual(planner.select_configs(p, H200, True, False)[0].BLOCK_M, 16)
        batched = dataclasses.replace(p, op="bmm", batch=2)
        self.assertEqual(
            planner.select_configs(batched, H200, True, True)[0].BLOCK_M, 16
        )
        # a [K, N] weight (Conv1D's): its rows along K would be strided loads
        rows_n = dataclasses.replace(p, b_k_contiguous=False)
        self.assertEqual(
            planner.select_configs(rows_n, H200, True, True)[0].BLOCK_M, 16
        )

    def test_max_autotune_keeps_16_row_tiles(self):
        configs = planner.select_configs(
            linear_weight_problem(2, 4096, 4096), H200, True, True, exhaustive=True
        )
        self.assertLess(configs[0].BLOCK_M, 16)
        self.assertTrue(any(c.BLOCK_M == 16 for c in configs), configs)
        self.assertEqual(len(configs), len(set(configs)))

    def test_symbolic_m_never_few_rows(self):
        # a larger M would run in several few-row tiles, each reading the weight again
        for hint, m_max in ((2, 16), (4, 64)):
            plan = planner.plan_dynamic_m(
                linear_weight_problem(hint, 1024, 1024), H200, m_max
            )
            self.assertEqual(plan.path, planner.Path.TEMPLATE, plan.describe())
            self.assertGreaterEqual(plan.config.BLOCK_M, 16, plan.describe())
        # up to the tile's own rows it may
        plan = planner.plan_dynamic_m(linear_weight_problem(2, 1024, 1024), H200, 2)
        self.assertEqual(plan.config.BLOCK_M, 2, plan.describe())


@plans_as_h200
class TestTensorCoreMMFewRowsCodegen(TensorCoreMMTestCase):
    """Generated code for the H200's plans (nothing run)."""

    @parametrize("m", [2, 3])
    def test_few_rows(self, m):
        # one program per BLOCK_N rows of w: every loaded element of the fp32 weight
        # multiplies each row of x on the CUDA cores; no tl.dot, no cast kernel
        code = self.cuda_code(linear(), *gpu_randn((m, 1024), (1024, 1024), (1024,)))
        self.assertTemplate(code)
        src = kernel_source(code, template_kernels(code)[0])
        # fewer than tl.dot's 16 rows, all of M
        self.assertIn(constexpr(src, "BLOCK_M"), range(m, 16))
        FileCheck().check("acc = tl.zeros((BLOCK_M, BLOCK_N, BLOCK_K)").check(
            "b = b.to(DOT_DTYPE).to(ACC_TYPE)"
        ).check("acc += a[:, None, :] * b[None, :, :]").check(
            "acc = tl.sum(acc, 2)"
        ).check("tl.store").run(src)
        self.assertNotIn("tl.dot(", src)

    def test_row_major_weight_takes_16_row_tiles(self):
        code = self.cuda_code(row_major_weight, *gpu_randn((2, 1024), (1024, 1024)))
        self.assertTemplate(code)
        src = kernel_source(code, template_kernels(code)[0])
        FileCheck().check("BLOCK_M : tl.constexpr = 16").check("tl.dot(").run(src)


def few_rows_config(rows):
    """The few-row tile the values tests force: ``rows`` rows and columns."""
    return dict(
        BLOCK_M=rows,
        BLOCK_N=rows,
        BLOCK_K=512,
        GROUP_M=8,
        num_warps=4,
        num_stages=3,
    )


class TestTensorCoreMMFewRowsGPU(TensorCoreMMTestCase):
    """Few-row tiles on a CUDA GPU: values against eager autocast and an fp64 reference."""

    @requires_cuda_sm80
    @parametrize("op", ["mm", "addmm"])
    @parametrize("dtype", [BF16, FP16], name_fn=dtype_name)
    @parametrize(
        "mnk",
        [(2, 1001, 999), (3, 1024, 4095), (4, 33, 200)],
        name_fn=lambda mnk: "x".join(map(str, mnk)),
    )
    def test_values(self, op, dtype, mnk):
        # K and N neither multiples of the blocks; rows past M wrap around
        config = few_rows_config(2 if mnk[0] == 2 else 4)
        with inductor_config.patch(
            tensorcore_mm_force_config=config, tensorcore_mm_force_path="template"
        ):
            code = self.compile_values(op, dtype, mnk)
        src = kernel_source(code, template_kernels(code)[0])
        self.assertIn("acc += a[:, None, :] * b[None, :, :]", src)


def frozen_linear(n, k, bias=True, seed=0):
    """An fp32 nn.Linear whose parameters Inductor's freezing folds into bf16 constants."""
    g = torch.Generator().manual_seed(seed)
    lin = torch.nn.Linear(k, n, bias=bias).requires_grad_(False)
    lin.weight.copy_(torch.randn(n, k, generator=g) / k**0.5)
    if bias:
        lin.bias.copy_(torch.randn(n, generator=g))
    return lin


class Conv1D(torch.nn.Module):
    """GPT-2's linear layer: an [nx, nf] weight (N contiguous) and x @ w + b as addmm."""

    def __init__(self, nx, nf, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.weight = torch.nn.Parameter(torch.randn(nx, nf, generator=g) / nx**0.5)
        self.bias = torch.nn.Parameter(torch.randn(nf, generator=g))
        self.requires_grad_(False)

    def forward(self, x):
        return torch.addmm(self.bias, x, self.weight)


def autocast_addmm(b, x, w):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return torch.addmm(b, x, w)


def under_bf16_autocast(mod, x):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return mod(x)


def constant_args(code, kernel):
    """The arguments of ``kernel``'s launch in the wrapper."""
    m = re.search(rf"{kernel}\.run\(([^)]*)\)", "\n".join(code))
    if m is None:
        raise AssertionError(f"no launch of {kernel} in the code")
    return [a.strip() for a in m.group(1).split(",")]


class TestTensorCoreMMFreezing(TensorCoreMMTestCase):
    """``torch._inductor.config.freezing``: the autocast casts of fp32 parameters are
    folded into bf16 constants before this lowering runs; the matmul reads them as stored,
    never an fp32 weight, and the decode kernels stream them where the cost model predicts
    a win over cuBLAS. The generated code is the H200's."""

    def frozen_code(self, mod, x, enabled=True):
        """The code of the fp32 module ``mod`` frozen under bf16 autocast (CUDA tensors)."""
        with torch.no_grad(), inductor_config.patch(freezing=True):
            return self.cuda_code(under_bf16_autocast, mod, x, enabled=enabled)

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
        self.assertNotRegex(
            "\n".join(code),
            r"_frozen_param\d+ = None  # [^\n]*torch\.float32 \((4096|14336), ",
        )

    @plans_as_h200
    def test_frozen_decode(self):
        # M=16, 4096x4096: one template kernel reads the fp32 x (cast in registers), the
        # bf16 weight and bias constants freezing folded; no cast kernel, no cuBLAS call
        code = self.frozen_code(
            frozen_linear(4096, 4096).to(GPU_TYPE),
            torch.randn(16, 4096, device=GPU_TYPE),
        )
        self.assertTemplate(code)
        self.assertEqual(self.counts["tensorcore_mm_template_frozen"], 1)
        (kernel,) = template_kernels(code)
        self.assertReadsBf16Constants(code, kernel)
        self.assertNotIn("extern_kernels.", "\n".join(code))

    @plans_as_h200
    def test_frozen_gemv(self):
        # M=1 over a wide bf16 weight constant (K contiguous): the gemv template, eight
        # whole rows a program, reads it as stored, x rounded in registers; one split,
        # bias and rounding in its epilogue; no cuBLAS call
        code = self.frozen_code(
            frozen_linear(4096, 4096).to(GPU_TYPE),
            torch.randn(1, 4096, device=GPU_TYPE),
        )
        self.assertEqual(self.counts["tensorcore_mm_gemv_frozen"], 1, dict(self.counts))
        self.assertEqual(cast_kernels(code), [])
        (kernel,) = template_kernels(code)
        self.assertReadsBf16Constants(code, kernel)
        self.assertNotRegex("\n".join(code), r"extern_kernels\.\w+\(")
        FileCheck().check("'arg_B': '*bf16'").check("BLOCK_N : tl.constexpr = 8").check(
            "BLOCK_K : tl.constexpr = 512"
        ).check("ROWS : tl.constexpr = 4096").check("stride_bk = 1").check(
            "tl.sum(acc, 0)"
        ).check("tl.store").run(kernel_source(code, kernel))

    @plans_as_h200
    def test_frozen_gemv_of_a_narrow_weight(self):
        # M=1 over a bf16 constant of 1024 rows: Inductor's reduction over K, as fast
        # there as the template
        code = self.frozen_code(
            frozen_linear(1024, 4096).to(GPU_TYPE),
            torch.randn(1, 4096, device=GPU_TYPE),
        )
        self.assertEqual(self.counts["tensorcore_mm_gemv_frozen"], 1, dict(self.counts))
        self.assertEqual(template_kernels(code) + cast_kernels(code), [])
        (kernel,) = re.findall(r"(triton_red_fused_\w+?_\d+)\.run\(", "\n".join(code))
        self.assertReadsBf16Constants(code, kernel)
        # x (fp32) rounded to bf16 in registers; the weight loaded as bf16, then fp32 sums
        FileCheck().check("tl.load(in_ptr0").check("tl.load(in_ptr1").check(
            ".to(tl.bfloat16)"
        ).check("tl.sum").check("tl.store").run(kernel_source(code, kernel))

    @plans_as_h200
    def test_frozen_gemv_of_a_row_major_weight(self):
        # M=1 over a bf16 [K, N] constant (Conv1D's): the gemv template reads slabs of it
        # as stored, 32 columns a program, K split in 512 rows; one kernel adds the
        # splits, the bias and the rounding; no cuBLAS call
        code = self.frozen_code(
            Conv1D(5120, 1280).to(GPU_TYPE), torch.randn(1, 5120, device=GPU_TYPE)
        )
        self.assertEqual(self.counts["tensorcore_mm_gemv_frozen"], 1, dict(self.counts))
        self.assertEqual(cast_kernels(code), [])
        (kernel,) = template_kernels(code)
        self.assertReadsBf16Constants(code, kernel)
        self.assertNotRegex("\n".join(code), r"extern_kernels\.\w+\(")
        FileCheck().check("'arg_B': '*bf16'").check(
            "BLOCK_N : tl.constexpr = 32"
        ).check("ROWS : tl.constexpr = 512").check("stride_bn = 1").check(
            "tl.sum(acc, 0)"
        ).run(kernel_source(code, kernel))

    @plans_as_h200
    def test_frozen_prefill_is_frozen_stock(self):
        # M=256: cuBLAS on the bf16 constant, as frozen stock (same code, metadata aside)
        mod, x = (
            frozen_linear(1024, 4096).to(GPU_TYPE),
            torch.randn(256, 4096, device=GPU_TYPE),
        )
        code = self.frozen_code(mod, x)
        self.assertEqual(template_kernels(code), [])
        self.assertGreaterEqual(
            self.counts["tensorcore_mm_stock:cost_model"], 1, dict(self.counts)
        )
        stock = self.frozen_code(mod, x, enabled=False)
        self.assertEqual(comparable(code), comparable(stock))
        self.assertIn("extern_kernels.addmm(_frozen_param", "\n".join(code))

    @plans_as_h200
    def test_frozen_16bit_x_where_cublas_is_not_beaten_is_stock(self):
        # x already bf16 (a norm's output in a model), 16x4096x4096: the template would
        # only stream the weight about as cuBLAS does: stock, counted as such
        def fn(mod, x):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return mod(torch.relu(x).to(torch.bfloat16))

        mod = frozen_linear(4096, 4096, bias=False).to(GPU_TYPE)
        x = torch.randn(16, 4096, device=GPU_TYPE)
        with torch.no_grad(), inductor_config.patch(freezing=True):
            code = self.cuda_code(fn, mod, x)
        self.assertEqual(template_kernels(code), [])
        self.assertEqual(
            self.counts["tensorcore_mm_stock:cost_model_frozen"], 1, dict(self.counts)
        )

    @plans_as_h200
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

        code = self.frozen_code(
            GatedUp().to(GPU_TYPE), torch.randn(16, 4096, device=GPU_TYPE)
        )
        self.assertEqual(
            self.counts["tensorcore_mm_template_frozen"], 1, dict(self.counts)
        )
        (kernel,) = template_kernels(code)
        self.assertReadsBf16Constants(code, kernel)
        # w1|w3, one constant
        self.assertRegex("\n".join(code), r"torch\.bfloat16 \(4096, 28672\)")

    def test_plans_for_a_frozen_weight(self):
        P, problem = planner.Path, frozen_weight_problem

        paths = {
            mnk: planner.plan(problem(*mnk), H200).path
            for mnk in [
                (1, 4096, 4096),
                (16, 4096, 4096),
                (16, 14336, 4096),
                (1, 4096, 14336),
                (1, 14336, 4096),
                (64, 14336, 4096),
                (256, 14336, 4096),
                (16, 4096, 14336),
            ]
        }
        self.assertEqual(
            paths,
            {
                (1, 4096, 4096): P.GEMV,
                (16, 4096, 4096): P.TEMPLATE,
                (16, 14336, 4096): P.TEMPLATE,
                # one row: the gemv, never a 16-row tile
                (1, 4096, 14336): P.GEMV,
                (1, 14336, 4096): P.GEMV,
                # beyond decode, and where one tile an SM streams no faster than cuBLAS: stock
                (64, 14336, 4096): P.STOCK,
                (256, 14336, 4096): P.STOCK,
                (16, 4096, 14336): P.STOCK,
            },
        )
        # one row of a weight stored [K, N] (GPT-2's Conv1D): the gemv where it is small,
        # cuBLAS past that
        conv1d = dataclasses.replace(problem(1, 5120, 1280), b_k_contiguous=False)
        self.assertEqual(planner.plan(conv1d, H200).path, P.GEMV)
        large = dataclasses.replace(problem(1, 14336, 4096), b_k_contiguous=False)
        self.assertEqual(planner.plan(large, H200).path, P.STOCK)
        # a few rows over an odd vocabulary (GPT-2's lm_head): cuBLAS's unaligned rows
        # load no vectors, the template streams them
        lm_head = {
            n: planner.plan(problem(8, n, 1280, x_fp32=False), H200).path
            for n in (50257, 50304)
        }
        self.assertEqual(lm_head, {50257: P.TEMPLATE, 50304: P.STOCK})
        plan = planner.plan(problem(16, 14336, 4096), H200)
        # the weight is read as stored, 2 bytes an element
        self.assertFalse(plan.fused_b)
        self.assertTrue(plan.fused_a)
        # batched, or a device without the cuBLAS rate measured: as before (no 16-bit path)
        batched = dataclasses.replace(
            problem(16, 14336, 4096, x_fp32=False), op="bmm", batch=2
        )
        self.assertEqual(planner.plan(batched, H200).path, P.STOCK)
        unknown = dataclasses.replace(H200, stream_cublas16=0.0)
        self.assertEqual(
            planner.plan(problem(16, 14336, 4096, x_fp32=False), unknown).path, P.STOCK
        )

    @requires_cuda_sm80
    @parametrize(
        "kn",
        [(5120, 1280), (1280, 3840), (1000, 999)],
        name_fn=lambda kn: "x".join(map(str, kn)),
    )
    def test_frozen_row_major_values_GPU(self, kn):
        # one row over a frozen [K, N] constant, whichever path the GPU's plan takes
        conv = Conv1D(*kn).to(GPU_TYPE)
        x = torch.randn(1, kn[0], device=GPU_TYPE)
        with torch.no_grad(), inductor_config.patch(freezing=True):
            out, code = self.compile_and_run(under_bf16_autocast, conv, x)
        self.assertIn("_frozen_param", "\n".join(code))
        inputs = [conv.bias, x, conv.weight]
        self.assertLikeEager(out, autocast_addmm, inputs, torch.addmm, BF16)

    @requires_cuda_sm80
    @parametrize(
        "mnk",
        [
            (1, 4096, 4096),
            (16, 4096, 4096),
            (1, 14336, 4096),
            (16, 14336, 4096),
            (4, 14336, 4096),
            (1, 4096, 14336),
            (64, 14336, 4096),
        ],
        name_fn=lambda mnk: "x".join(map(str, mnk)),
    )
    def test_frozen_values_GPU(self, mnk):
        # against eager autocast on the fp32 parameters and an fp64 reference
        m, n, k = mnk
        lin = frozen_linear(n, k).to(GPU_TYPE)
        x = torch.randn(m, k, device=GPU_TYPE)
        with torch.no_grad(), inductor_config.patch(freezing=True):
            out, code = self.compile_and_run(under_bf16_autocast, lin, x)
        self.assertIn("_frozen_param", "\n".join(code))
        self.assertLikeEager(out, linear(), [x, lin.weight, lin.bias], F.linear, BF16)


instantiate_parametrized_tests(TestGemvPlan)
instantiate_parametrized_tests(TestTensorCoreMMGemvCodegen)
instantiate_parametrized_tests(TestTensorCoreMMGemvGPU)
instantiate_parametrized_tests(TestTensorCoreMMFreezing)
instantiate_parametrized_tests(TestFewRowsPlan)
instantiate_parametrized_tests(TestTensorCoreMMFewRowsCodegen)
instantiate_parametrized_tests(TestTensorCoreMMFewRowsGPU)

if __name__ == "__main__":
    run_tests()
