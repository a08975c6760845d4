# Owner(s): ["module: inductor"]
"""Prologue fusion of a downcast (``config.prologue_fusion_downcast``).

``Scheduler.check_prologue_fusion_heuristics_fusable`` refuses a prologue that reads
more bytes than it writes, so an fp32 -> 16-bit cast stays its own kernel: right where
the template re-reads each operand tile many times, wrong where it reads the operand
about once (a weight at decode), since the cast kernel then costs a write and a read of
the 16-bit copy more than the in-kernel cast. With the flag, such a downcast fuses when
the output dim the operand does not span fits one tile: at most 128 rows where it is B
(the mm template's tallest row tile), 256 columns where it is A (its widest column
tile); elsewhere the refusal holds.

Set up as test_max_autotune.py's TestPrologueFusion (one Triton config, no fusion
benchmarking), so the fusion decision is the heuristic's alone; the codegen checks use
``get_code`` (nothing runs), the values need a GPU.
"""

import re
from unittest import mock

import torch
from torch._inductor import config
from torch._inductor.scheduler import FusionResult, Scheduler, SchedulerNode
from torch._inductor.test_case import run_tests, TestCase
from torch._inductor.utils import get_code, is_big_gpu, run_and_get_code
from torch.testing import FileCheck
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
)
from torch.testing._internal.inductor_utils import (
    get_func_call,
    get_kernel_launch,
    GPU_TYPE,
    HAS_GPU,
)
from torch.testing._internal.triton_utils import requires_gpu


def weight_cast(x, w):
    return x @ w.to(x.dtype)


def weight_t_cast(x, w):
    return x @ w.t().to(x.dtype)


def weight_cast_t(x, w):
    # F.linear's order (autocast's too): the template reads the copy through its transpose
    return x @ w.to(x.dtype).t()


def weight_first(x, w):
    # the weight as A (a swapped matmul, w @ x.t()): its column tiles span x's rows
    return w.to(x.dtype) @ x.t()


def activation_cast(x, w):
    return x.to(w.dtype) @ w


WEIGHT_CASTS = (weight_cast, weight_t_cast, weight_cast_t)


@instantiate_parametrized_tests
class TestPrologueDowncast(TestCase):
    def setUp(self):
        super().setUp()
        if not is_big_gpu():
            self.skipTest("max-autotune's GEMM templates need a big GPU")
        patch = config.patch(
            {
                "max_autotune": True,
                "prologue_fusion": True,
                "prologue_fusion_downcast": True,
                "benchmark_epilogue_fusion": False,
                "shape_padding": False,
                "max_autotune_gemm_backends": "TRITON",
                "test_configs.max_mm_configs": 1,
            }
        )
        patch.__enter__()
        self.addCleanup(patch.__exit__, None, None, None)

    def check_kernels(self, code, num_kernels):
        FileCheck().check(get_func_call()).check_count(
            get_kernel_launch(), num_kernels, exactly=True
        ).run(code)

    def check_cast_in_template(self, code, dtype):
        # the fp32 tile is loaded and cast in the k loop, right before tl.dot
        FileCheck().check("def triton_tem").check("for k_idx").check(
            f".to({'tl.bfloat16' if dtype == torch.bfloat16 else 'tl.float16'})"
        ).check("tl.dot").run(code)

    def inputs(self, fn, M, K, N, dtype):
        if fn is activation_cast:
            x = torch.randn(M, K, device=GPU_TYPE)
            w = torch.randn(K, N, device=GPU_TYPE, dtype=dtype)
        else:
            x = torch.randn(M, K, device=GPU_TYPE, dtype=dtype)
            shape = (K, N) if fn is weight_cast else (N, K)
            w = torch.randn(shape, device=GPU_TYPE) / K**0.5
        return x, w

    @parametrize("fn", WEIGHT_CASTS, name_fn=lambda fn: fn.__name__)
    @parametrize("dtype", (torch.bfloat16, torch.float16))
    @parametrize("sizes", ((16, 256, 512), (64, 128, 256), (37, 120, 250), (1, 64, 96)))
    def test_weight_downcast_fuses_at_decode(self, fn, dtype, sizes):
        code = get_code(torch.compile(fn), *self.inputs(fn, *sizes, dtype))[0]
        self.check_kernels(code, 1)
        self.check_cast_in_template(code, dtype)

    @parametrize("fn", WEIGHT_CASTS, name_fn=lambda fn: fn.__name__)
    @parametrize("M", (129, 256))
    def test_weight_downcast_refused_past_one_tile(self, fn, M):
        # each weight tile would be read, and cast, once per 128 rows or fewer
        code = get_code(
            torch.compile(fn), *self.inputs(fn, M, 128, 256, torch.bfloat16)
        )[0]
        self.check_kernels(code, 2)

    @parametrize("M", (16, 200, 256, 257))
    def test_weight_as_a_fuses_up_to_256_columns(self, M):
        x, w = self.inputs(weight_cast_t, M, 128, 256, torch.bfloat16)
        code = get_code(torch.compile(weight_first), x, w)[0]
        if M <= 256:
            self.check_kernels(code, 1)
            self.check_cast_in_template(code, torch.bfloat16)
        else:
            self.check_kernels(code, 2)

    @parametrize("M", (1, 16, 64, 96, 129))
    def test_autocast_linear(self, M):
        # the weight's cast fuses at decode; the activation's, read by each of more
        # column tiles than one, stays a kernel of its own
        def fn(x, w):
            with torch.autocast(GPU_TYPE, torch.bfloat16):
                return torch.nn.functional.linear(x, w)

        x = torch.randn(M, 128, device=GPU_TYPE)
        w = torch.randn(512, 128, device=GPU_TYPE) / 128**0.5
        code = get_code(torch.compile(fn), x, w)[0]
        if M <= 128:
            self.check_kernels(code, 2)
            self.check_cast_in_template(code, torch.bfloat16)
        else:
            self.check_kernels(code, 3)

    def test_unfused_downcast_keeps_its_loop_order(self):
        # aligned to the template's read, then not fused (as a benchmark may decide):
        # the cast kernel is the one it would have been without the flag
        def refuse_prologues(self, node1, node2):
            return FusionResult.fuse(not node2.is_template())

        fn = weight_cast_t
        inputs = self.inputs(fn, 16, 256, 512, torch.bfloat16)
        with mock.patch.object(Scheduler, "speedup_by_fusion", refuse_prologues):
            with config.patch(prologue_fusion_downcast=False):
                off = get_code(torch.compile(fn), *inputs)[0]
            torch._dynamo.reset()
            on = get_code(torch.compile(fn), *inputs)[0]
        self.check_kernels(on, 2)
        pointwise = re.compile(r"def triton_poi\w*\(.*?\n\n", re.DOTALL)
        self.assertEqual(len(pointwise.findall(off)), 1)
        self.assertEqual(pointwise.findall(on), pointwise.findall(off))

    def test_heuristic_has_no_side_effect(self):
        # the heuristic only decides; the cast read through w.t() is reordered where
        # fusion is decided (shared_data_after_reordering_loop), and then fuses
        checking = []
        reorders = []
        check = Scheduler.check_prologue_fusion_heuristics_fusable
        reorder = SchedulerNode.reorder_loops_by_dep_pair

        def checked(self, *args):
            checking.append(True)
            try:
                return check(self, *args)
            finally:
                checking.pop()

        def reordered(self, *args):
            reorders.append(bool(checking))
            return reorder(self, *args)

        fn = weight_cast_t
        inputs = self.inputs(fn, 16, 256, 512, torch.bfloat16)
        with (
            mock.patch.object(
                Scheduler, "check_prologue_fusion_heuristics_fusable", checked
            ),
            mock.patch.object(SchedulerNode, "reorder_loops_by_dep_pair", reordered),
        ):
            code = get_code(torch.compile(fn), *inputs)[0]
        self.check_kernels(code, 1)
        self.assertIn(False, reorders)
        self.assertNotIn(True, reorders)

    def test_activation_downcast_refused(self):
        # test_max_autotune.py's test_downcast, flag on, and more columns than the
        # widest column tile: x is re-read once per column tile
        code = get_code(
            torch.compile(activation_cast),
            *self.inputs(activation_cast, 64, 128, 512, torch.float16),
        )[0]
        self.check_kernels(code, 2)

    def test_other_prologues_unchanged(self):
        # not a downcast: the heuristics' other refusals apply as before
        def fn(x, w):
            return x @ (w.to(x.dtype) + 1).to(x.dtype)

        x = torch.randn(16, 128, device=GPU_TYPE, dtype=torch.bfloat16)
        w = torch.randn(128, 256, device=GPU_TYPE, dtype=torch.float16)
        with config.patch(prologue_fusion_downcast=False):
            off = get_code(torch.compile(fn), x, w)[0]
        on = get_code(torch.compile(fn), x, w)[0]
        self.assertEqual(on.count(get_kernel_launch()), off.count(get_kernel_launch()))

    @config.patch(prologue_fusion_downcast=False)
    def test_flag_off_keeps_the_refusal(self):
        fn = weight_t_cast
        code = get_code(
            torch.compile(fn), *self.inputs(fn, 16, 256, 512, torch.bfloat16)
        )[0]
        self.check_kernels(code, 2)

    @requires_gpu
    @parametrize("fn", WEIGHT_CASTS, name_fn=lambda fn: fn.__name__)
    @parametrize("sizes", ((16, 256, 512), (37, 120, 250)))
    def test_values(self, fn, sizes):
        x, w = self.inputs(fn, *sizes, torch.bfloat16)
        out, code = run_and_get_code(torch.compile(fn), x, w)
        self.check_kernels(code[0], 1)
        self.assertEqual(out, fn(x, w), atol=0.05, rtol=0.05)
        # the kernel rounds the fp32 weight to bf16 as the cast kernel does
        w16 = (w if fn is weight_cast else w.t()).to(x.dtype)
        self.assertEqual(
            out, (x.double() @ w16.double()).to(out.dtype), atol=0.05, rtol=0.05
        )


if __name__ == "__main__":
    if HAS_GPU and is_big_gpu():
        run_tests()
