# Owner(s): ["module: inductor"]
"""The mm template for a decode-sized matmul of a downcast weight, in default mode
(``config.downcast_mm_template``).

``DowncastMMChoices`` (kernel/mm_downcast.py) offers the Triton mm template alone where
the weight is an fp32 -> 16-bit cast used by the matmul alone and one row tile spans M;
prologue fusion (``config.prologue_fusion_downcast``) then loads the fp32 weight in the
template. One row lowers to a reduction over K instead, and 129 to 256 rows are swapped,
``(w @ x.t()).t()`` (fx_passes/decompose_downcast_mm.py). The plan
(kernel/mm_downcast_plan.py) is checked as plain Python, the code with ``get_code``
(nothing runs), the values on a GPU.
"""

import contextlib
import dataclasses
import math
import types
from unittest import mock

import sympy

import torch
import torch.nn.functional as F
from torch._dynamo.source import ConstantSource
from torch._dynamo.utils import counters
from torch._inductor import config
from torch._inductor.heuristics.template import downcast_mm as downcast_heuristics
from torch._inductor.kernel import mm_downcast_plan as downcast_plan
from torch._inductor.select_algorithm import AlgorithmSelectorCache, ExternKernelCaller
from torch._inductor.test_case import run_tests, TestCase
from torch._inductor.utils import get_code, is_big_gpu, run_and_get_code
from torch._inductor.virtualized import V
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv
from torch.testing import FileCheck
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
    skipIfRocm,
)
from torch.testing._internal.inductor_utils import GPU_TYPE, HAS_GPU
from torch.testing._internal.triton_utils import requires_gpu


@contextlib.contextmanager
def tolerate_dynamic_outputs():
    # get_code's stand-in module returns None; AOTAutograd then marks dynamic dims on it
    from torch._functorch._aot_autograd import runtime_wrappers

    mark = runtime_wrappers.mark_dynamo_propagated_dynamic_indices
    with mock.patch.object(
        runtime_wrappers,
        "mark_dynamo_propagated_dynamic_indices",
        lambda t, dims: None if t is None else mark(t, dims),
    ):
        yield


def linear(x, w, b=None):
    with torch.autocast(GPU_TYPE, torch.bfloat16):
        return F.linear(x, w, b)


def matmul_t(x, w):
    with torch.autocast(GPU_TYPE, torch.bfloat16):
        return x @ w.t()


def triton_fastest(
    self, name, input_nodes, layout, input_gen_fns, inputs_key, choices, *args, **kwargs
):
    # max-autotune's timings, set: every Triton choice ahead of the extern ones
    return {c: 2.0 if isinstance(c, ExternKernelCaller) else 1.0 for c in choices}


# shared memory a program may use on GPUs upstream CI runs (A10G/L4, A100, H100)
SMALL, A100, H100 = 101376, 166912, 232448
# columns whose 64-wide tiles fill one wave of 128-row tiles on A10G, A100 and H100
TALL_N = 5120


class TestDowncastMMPlan(TestCase):
    def plan(self, m, n=4096, k=4096, smem=H100, sms=132, **kwargs):
        p = downcast_plan.DowncastMM(m_max=m, n=n, k=k, weight_downcast=True)
        p = dataclasses.replace(p, **kwargs)
        return downcast_plan.plan(p, downcast_plan.Device(sms, smem))

    def test_declines(self):
        D = downcast_plan.Decline
        self.assertIs(self.plan(16, weight_downcast=False).decline, D.NOT_A_DOWNCAST)
        self.assertIs(self.plan(0).decline, D.EMPTY)
        self.assertIs(self.plan(129).decline, D.TOO_MANY_ROWS)
        self.assertIs(self.plan(128, n=1024).decline, D.FEW_TILES)
        self.assertIs(self.plan(16, n=512, k=512).decline, D.SMALL_WEIGHT)
        self.assertIs(self.plan(16, smem=16 * 1024).decline, D.NO_FIT)
        self.assertEqual(self.plan(16, smem=16 * 1024).configs, ())

    def test_one_config_that_fits(self):
        for smem in (SMALL, A100, H100):
            for m in (1, 16, 17, 64, 65, 128):
                (cfg,) = self.plan(m, smem=smem).configs
                self.assertLessEqual(cfg.smem_bytes(2), smem)
                self.assertGreaterEqual(cfg.BLOCK_M, min(m, 16))
                self.assertGreaterEqual(cfg.num_stages, 2)

    def test_rows_and_columns(self):
        # a row tile spans M; column tiles narrow until they fill the SMs
        self.assertEqual(self.plan(16).configs[0].BLOCK_M, 16)
        self.assertEqual(self.plan(64).configs[0].BLOCK_M, 64)
        self.assertEqual(self.plan(64, n=4096).configs[0].BLOCK_N, 32)
        self.assertEqual(self.plan(64, n=14336).configs[0].BLOCK_N, 64)
        # 128-row tiles: the widest whose column tiles fill one wave
        self.assertEqual(self.plan(65).configs[0].BLOCK_M, 128)
        self.assertEqual(self.plan(128, n=4096).configs[0].BLOCK_N, 32)
        self.assertEqual(self.plan(128, n=14336).configs[0].BLOCK_N, 128)
        # more than one wave at every width
        self.assertEqual(self.plan(128, n=18944).configs[0].BLOCK_N, 64)

    def test_one_row_reduces_over_k(self):
        p = downcast_plan.DowncastMM(
            m_max=1, n=4096, k=4096, weight_downcast=True, k_contiguous=True
        )
        self.assertTrue(downcast_plan.reduces_over_k(p))
        # a [K, N] weight where K is split; past that, the template
        kn = dataclasses.replace(p, k_contiguous=False)
        self.assertTrue(downcast_plan.reduces_over_k(kn))
        self.assertFalse(downcast_plan.reduces_over_k(dataclasses.replace(kn, n=14336)))
        self.assertTrue(
            downcast_plan.reduces_over_k(dataclasses.replace(p, n=14336, k=14336))
        )
        # one kernel where stock runs two: small weights too
        self.assertTrue(
            downcast_plan.reduces_over_k(dataclasses.replace(p, n=512, k=512))
        )
        for change in ({"m_max": 2}, {"weight_downcast": False}):
            self.assertFalse(
                downcast_plan.reduces_over_k(dataclasses.replace(p, **change))
            )

    def test_rewrite(self):
        R = downcast_plan.Rewrite
        dev = downcast_plan.Device(132, H100)
        p = downcast_plan.DowncastMM(m_max=1, n=4096, k=4096, weight_downcast=True)
        self.assertIs(downcast_plan.rewrite(p, dev), R.REDUCE_OVER_K)
        for m, expected in ((2, None), (128, None), (129, R.SWAP), (256, R.SWAP)):
            p = dataclasses.replace(p, m_max=m)
            self.assertIs(downcast_plan.rewrite(p, dev), expected)
        for change in (
            {"m_max": 257},
            {"n": 512, "k": 512},
            {"weight_downcast": False},
        ):
            q = dataclasses.replace(p, **change)
            self.assertIsNone(downcast_plan.rewrite(q, dev))

    def test_swapped(self):
        # w @ x.t(): the weight is A, M counts its rows, N x's
        p = downcast_plan.DowncastMM(256, 4096, 4096, weight_downcast=True).swapped()
        self.assertEqual(
            (p.m_max, p.n, p.a_downcast, p.weight_downcast), (4096, 256, True, False)
        )
        self.assertTrue(p.weight_is_a)
        # where x's rows are a downcast too, they are B's while one row tile spans M
        both = dataclasses.replace(p, m_max=128, weight_downcast=True)
        self.assertFalse(both.weight_is_a)

        def plan(smem=H100, cc=90, **change):
            q = dataclasses.replace(p, **change)
            return downcast_plan.plan(q, downcast_plan.Device(132, smem, cc))

        def tile(**change):
            cfg = plan(**change).configs[0]
            return cfg.BLOCK_M, cfg.BLOCK_N

        # 128 weight rows a tile, spanning x's rows, where those tiles fill one wave;
        # two tiles of 64 rows where those do; else 64 rows spanning x's in more waves
        self.assertEqual(tile(m_max=14336), (128, 256))
        self.assertEqual(tile(), (64, 128))
        self.assertEqual(tile(m_max=18944), (64, 256))
        self.assertEqual(tile(m_max=14336, n=100), (128, 128))
        # before wgmma, a 256-column accumulator spills: 128 columns of x's rows
        self.assertEqual(tile(m_max=14336, cc=80)[1], 128)
        D = downcast_plan.Decline
        self.assertIs(plan(m_max=2048).decline, D.FEW_TILES)
        self.assertIs(plan(n=257).decline, D.TOO_MANY_ROWS)
        self.assertIs(plan(a_downcast=False).decline, D.NOT_A_DOWNCAST)
        for smem in (SMALL, A100, H100):
            for m_max in (4096, 14336, 18944):
                (cfg,) = plan(smem, m_max=m_max).configs
                self.assertLessEqual(cfg.smem_bytes(4, 2), smem)

    def test_neighbours(self):
        p = downcast_plan.DowncastMM(m_max=16, n=4096, k=4096, weight_downcast=True)
        configs = downcast_plan.plan(
            p, downcast_plan.Device(132, H100), neighbours=True
        ).configs
        self.assertGreater(len(configs), 1)
        self.assertEqual(len(set(configs)), len(configs))


class TestDowncastMMDispatch(TestCase):
    def dispatch(self, m_max, m_hint=4, n=4096, smem=H100, sms=132):
        p = downcast_plan.DowncastMM(
            m_max=m_max, n=n, k=4096, weight_downcast=True, m_hint=m_hint
        )
        return downcast_plan.dispatch(p, downcast_plan.Device(sms, smem))

    def test_dispatch_hints(self):
        # the hint nearest M in log2 (the lower on a tie), as the size-hint
        # multi-kernel picks, is that of M's range
        for bounds in ((16, 64, 128), (64, 128), (16, 100)):
            hints = downcast_plan.dispatch_hints(bounds)
            self.assertEqual(list(hints), sorted(set(hints)))
            for m in range(1, 2 * bounds[-1]):
                dist = [abs(math.log2(m) - math.log2(h)) for h in hints]
                want = next(
                    (i for i, b in enumerate(bounds) if m <= b), len(bounds) - 1
                )
                self.assertEqual(dist.index(min(dist)), want, (bounds, m))

    def test_a_kernel_per_range(self):
        for smem in (SMALL, A100, H100):
            kernels = self.dispatch(128, smem=smem, n=TALL_N)
            self.assertEqual([q.bound for q in kernels], [16, 64, 128])
            self.assertEqual([q.config.BLOCK_M for q in kernels], [16, 64, 128])
            for q in kernels:
                sizes = (2, 4)
                self.assertLessEqual(q.config.smem_bytes(*sizes), smem)
        self.assertEqual([q.bound for q in self.dispatch(40)], [16, 40])

    def test_no_dispatch(self):
        # static, one range, or rows past one tile (each row tile would cast the
        # weight again: stock)
        self.assertEqual(self.dispatch(128, m_hint=0), ())
        self.assertEqual(self.dispatch(16), ())
        self.assertEqual(self.dispatch(129), ())
        self.assertEqual(self.dispatch(downcast_plan.M_UNBOUNDED), ())


class TestDowncastMMProblem(TestCase):
    def test_m_range(self):
        # a symbolic M without a maximum: its bound is torch's int_oo, which sympy calls
        # finite but no integer can hold
        shape_env = ShapeEnv()
        m = shape_env.create_symbol(
            8, source=ConstantSource("m"), dynamic_dim=DimDynamic.DYNAMIC
        )
        graph = types.SimpleNamespace(
            sizevars=types.SimpleNamespace(
                shape_env=shape_env, optimization_hint=lambda e: 8
            )
        )
        with V.set_graph_handler(graph):
            self.assertEqual(
                downcast_heuristics._m_range(m), (downcast_plan.M_UNBOUNDED, 8)
            )
            self.assertEqual(downcast_heuristics._m_range(sympy.Integer(8)), (8, 0))
            shape_env.constrain_symbol_range(m, compiler_min=2, compiler_max=64)
            self.assertEqual(downcast_heuristics._m_range(m), (64, 8))


@instantiate_parametrized_tests
class TestDowncastMM(TestCase):
    def setUp(self):
        super().setUp()
        if not is_big_gpu():
            self.skipTest("the mm template needs a big GPU")
        patch = config.patch(
            {
                "downcast_mm_template": True,
                "prologue_fusion_downcast": True,
                "prologue_fusion": True,
                # shape padding benchmarks odd sizes on the device
                "shape_padding": False,
            }
        )
        patch.__enter__()
        self.addCleanup(patch.__exit__, None, None, None)
        counters.clear()

    def inputs(self, m, n=4096, k=4096, bias=True):
        x = torch.randn(m, k, device=GPU_TYPE)
        w = torch.randn(n, k, device=GPU_TYPE) / k**0.5
        return (x, w, torch.randn(n, device=GPU_TYPE)) if bias else (x, w)

    def check_template(self, code):
        # the template loads the fp32 weight and casts it in the k loop; no GEMM call
        FileCheck().check("def triton_tem").check("for k_idx").check(
            ".to(tl.bfloat16)"
        ).check("tl.dot").run(code)
        FileCheck().check_not("extern_kernels.addmm").check_not(
            "extern_kernels.mm"
        ).run(code)

    def check_reduction(self, code):
        # a reduction over K loads the fp32 weight; no kernel writes its 16-bit copy
        FileCheck().check("def triton_red").check("tl.sum").run(code)
        self.assertNotIn("def triton_tem", code)
        self.assertNotIn("extern_kernels.mm", code)
        self.assertEqual(counters["inductor"]["decompose_downcast_mm"], 1)

    @skipIfRocm
    @parametrize("m", (16, 37, 64, 100))
    @parametrize("bias", (True, False))
    def test_decode_takes_the_template(self, m, bias):
        code = get_code(torch.compile(linear), *self.inputs(m, TALL_N, bias=bias))[0]
        self.check_template(code)
        # one choice: nothing benchmarked in default mode
        self.assertEqual(counters["inductor"]["select_algorithm_autotune"], 0)

    def test_one_row_reduces(self):
        code = get_code(torch.compile(linear), *self.inputs(1, bias=False))[0]
        self.check_reduction(code)
        self.assertNotIn("16777216", code)  # 4096 x 4096

    def test_one_row_with_bias_reduces(self):
        # the bias is added in the reduction's kernel: x's cast (realized, as each row
        # reads it) and the reduction are the only kernels
        code = get_code(torch.compile(linear), *self.inputs(1))[0]
        self.check_reduction(code)
        self.assertNotIn("extern_kernels.addmm", code)
        self.assertEqual(code.count("@triton.jit"), 2)

    def test_one_row_norm_is_not_recomputed(self):
        # the activation is realized: inlined, its norm would be recomputed for every
        # row of the weight
        def fn(h, g, w):
            with torch.autocast(GPU_TYPE, torch.bfloat16):
                return F.linear(F.rms_norm(h, (4096,), g), w)

        h, g = torch.randn(1, 4096, device=GPU_TYPE), torch.randn(4096, device=GPU_TYPE)
        code = get_code(torch.compile(fn), h, g, self.inputs(1, bias=False)[1])[0]
        self.check_reduction(code)
        kernels = code.split("@triton.jit")[1:]
        (reduction,) = [k for k in kernels if "xnumel = 4096" in k]
        self.assertNotIn("rsqrt", reduction)

    def test_one_row_kn_weight_reduces(self):
        # a [K, N] weight (Conv1D's): the cast fuses into the reduction over K, whose
        # programs read rows of N in order
        def fn(x, w, b):
            with torch.autocast(GPU_TYPE, torch.bfloat16):
                return torch.addmm(b, x, w)

        x = torch.randn(1, 1280, device=GPU_TYPE)
        w = torch.randn(1280, 5120, device=GPU_TYPE)
        code = get_code(torch.compile(fn), x, w, torch.randn(5120, device=GPU_TYPE))[0]
        self.check_reduction(code)
        self.assertNotIn("xnumel = 6553600", code)  # a 1280 x 5120 copy
        # x's cast, then reductions (K split where the GPU has SMs to spare), the last
        # with the bias add
        self.assertEqual(code.count("def triton_poi"), 1)

    def test_one_row_wide_kn_weight_takes_the_template(self):
        # past KN_MAX_COLUMNS a program would read whole columns: the template
        def fn(x, w):
            with torch.autocast(GPU_TYPE, torch.bfloat16):
                return x @ w

        x = torch.randn(1, 1024, device=GPU_TYPE)
        w = torch.randn(1024, 10240, device=GPU_TYPE)
        code = get_code(torch.compile(fn), x, w)[0]
        self.check_template(code)
        self.assertEqual(counters["inductor"]["decompose_downcast_mm"], 0)

    @skipIfRocm
    @parametrize("m", (129, 200, 256))
    @parametrize("bias", (True, False))
    def test_rows_past_one_tile_swap(self, m, bias):
        # w @ x.t(): the template loads the fp32 weight as A and writes the output
        # column-major, which its transpose views as x @ w's: x's cast (and the
        # bias's), then the template, and no copy of the output
        code = get_code(torch.compile(linear), *self.inputs(m, bias=bias))[0]
        self.check_template(code)
        self.assertNotIn("16777216", code)  # 4096 x 4096
        self.assertEqual(code.count("@triton.jit"), 3 if bias else 2)
        self.assertEqual(counters["inductor"]["swap_downcast_mm"], 1)
        self.assertEqual(counters["inductor"]["select_algorithm_autotune"], 0)

    @config.patch(
        {
            "max_autotune": True,
            "max_autotune_gemm_backends": "ATEN,TRITON",
            "test_configs.max_mm_configs": 1,
            # no fusion to benchmark: the choice is finalized from the timings alone
            "prologue_fusion": False,
        }
    )
    @parametrize("fn", (linear, matmul_t), name_fn=lambda fn: fn.__name__)
    def test_max_autotune_does_not_swap(self, fn):
        # max-autotune times its choices in the row-major output layout its lowering
        # gives the matmul: a swapped matmul's choices, written column-major, would
        # not fit it. Rows past one tile keep stock's choices, unswapped.
        with mock.patch.object(AlgorithmSelectorCache, "do_autotuning", triton_fastest):
            code = get_code(torch.compile(fn), *self.inputs(256, bias=False))[0]
        self.assertEqual(counters["inductor"]["swap_downcast_mm"], 0)
        if fn is linear:
            # the Triton choice, timed fastest, reading the cast weight
            FileCheck().check("def triton_tem").check("tl.dot").run(code)

    def test_rows_past_swapped_tiles_stay_stock(self):
        code = get_code(torch.compile(linear), *self.inputs(257))[0]
        self.assertNotIn("def triton_tem", code)
        self.assertEqual(counters["inductor"]["swap_downcast_mm"], 0)

    def dynamic_code(self, m_max, m=4):
        """The code for x of ``m`` rows, M marked dynamic up to ``m_max`` (None:
        unbounded)."""

        def fn(x, w, b):
            torch._dynamo.mark_dynamic(
                x, 0, **({} if m_max is None else {"min": 2, "max": m_max})
            )
            return torch.compile(linear)(x, w, b)

        torch._dynamo.reset()
        with tolerate_dynamic_outputs():
            return get_code(fn, *self.inputs(m, TALL_N))

    @skipIfRocm
    def test_dynamic_m_dispatches(self):
        # a kernel per range of M, the one of M's range picked at run time by the
        # size-hint multi-kernel; no guard on M and nothing benchmarked
        src = "\n".join(c for c in self.dynamic_code(128) if c)
        self.check_template(src)
        FileCheck().check("async_compile.size_hint_multi_kernel(").check(
            "multi_kernel_0.run("
        ).run(src)
        self.assertEqual(src.count("def triton_tem"), 3)
        for block_m in (16, 64, 128):
            self.assertIn(f"BLOCK_M : tl.constexpr = {block_m}\n", src)
        self.assertEqual(counters["inductor"]["downcast_mm_size_hint_dispatch"], 1)
        self.assertEqual(counters["inductor"]["select_algorithm_autotune"], 0)

    def test_unbounded_m_stays_stock(self):
        src = "\n".join(c for c in self.dynamic_code(None) if c)
        self.assertNotIn("def triton_tem", src)
        self.assertEqual(counters["inductor"]["downcast_mm_size_hint_dispatch"], 0)

    def test_small_weight_stays_stock(self):
        code = get_code(torch.compile(linear), *self.inputs(16, n=256, k=256))[0]
        self.assertNotIn("def triton_tem", code)

    def test_shared_cast_stays_stock(self):
        # the 16-bit copy is read by another op too: its cast kernel runs anyway
        def fn(x, w):
            w16 = w.to(torch.bfloat16)
            return (x.to(torch.bfloat16) @ w16.t()) * w16.amax()

        code = get_code(torch.compile(fn), *self.inputs(16, bias=False))[0]
        self.assertNotIn("def triton_tem", code)

    @config.patch(downcast_mm_template=False)
    def test_flag_off(self):
        code = get_code(torch.compile(linear), *self.inputs(16))[0]
        self.assertNotIn("def triton_tem", code)
        code = get_code(torch.compile(linear), *self.inputs(1, bias=False))[0]
        self.assertNotIn("def triton_red", code)

    @skipIfRocm
    @requires_gpu
    @parametrize("m", (16, 37, 64, 100, 200))
    def test_values(self, m):
        # odd sizes: masked tiles
        x, w, b = self.inputs(m, n=TALL_N - 3, k=2000)
        out, (code,) = run_and_get_code(torch.compile(linear), x, w, b)
        self.check_template(code)
        expected = linear(x, w, b)
        ref = F.linear(x.double(), w.double(), b.double())
        self.assertEqual(out, expected, atol=0.05, rtol=0.05)
        # no further from fp64 than eager autocast, beyond a rounding step of the output
        self.assertLessEqual(
            (out.double() - ref).norm(), 1.01 * (expected.double() - ref).norm()
        )

    @skipIfRocm
    @requires_gpu
    def test_dynamic_m_values(self):
        # M across the ranges in one graph, each run's kernel picked at run time
        compiled = torch.compile(linear)
        _, w, b = self.inputs(1, n=TALL_N - 3, k=2000)
        for m in (4, 3, 16, 17, 64, 65, 128):
            x = torch.randn(m, 2000, device=GPU_TYPE)
            torch._dynamo.mark_dynamic(x, 0, min=2, max=128)
            out = compiled(x, w, b)
            expected = linear(x, w, b)
            ref = F.linear(x.double(), w.double(), b.double())
            self.assertEqual(out, expected, atol=0.05, rtol=0.05)
            self.assertLessEqual(
                (out.double() - ref).norm(), 1.01 * (expected.double() - ref).norm()
            )
        self.assertEqual(counters["inductor"]["downcast_mm_size_hint_dispatch"], 1)

    @requires_gpu
    @parametrize("bias", (True, False))
    def test_one_row_values(self, bias):
        args = self.inputs(1, n=2300, k=2000, bias=bias)
        out, (code,) = run_and_get_code(torch.compile(linear), *args)
        self.check_reduction(code)
        expected = linear(*args)
        ref = F.linear(*(a.double() for a in args))
        self.assertEqual(out, expected, atol=0.05, rtol=0.05)
        self.assertLessEqual(
            (out.double() - ref).norm(), 1.01 * (expected.double() - ref).norm()
        )


if __name__ == "__main__":
    if HAS_GPU:
        run_tests()
