# Owner(s): ["module: inductor"]
"""The bmm template for a batch of downcast weights, in default mode
(``config.downcast_mm_template`` with ``config.bmm_prologue_fusion``).

A bmm or baddbmm of a batch of fp32 weights cast to 16 bits (experts at decode) gets
the bmm template alone from ``DowncastMMChoices`` where one row tile spans M, with
configs from the plan (kernel/mm_downcast_plan.py) for the batch's tiles; the bmm
template then loads its operands through ``load_input``, and the cast fuses into it as
a prologue. One row is a reduction over K (fx_passes/decompose_downcast_mm.py), whose
loads fuse the cast. The plan is checked as plain Python, the code with ``get_code`` (nothing
runs), the values on a GPU.
"""

import torch
from torch._dynamo.utils import counters
from torch._inductor import config
from torch._inductor.kernel import mm_downcast_plan as downcast_plan
from torch._inductor.test_case import run_tests, TestCase
from torch._inductor.utils import get_code, is_big_gpu, run_and_get_code
from torch.testing import FileCheck
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
    skipIfRocm,
)
from torch.testing._internal.inductor_utils import GPU_TYPE, HAS_GPU
from torch.testing._internal.triton_utils import requires_gpu


# columns whose 64-wide tiles over 8 experts fill one wave of 128-row tiles on A10G,
# A100 and H100
TALL_N = 640


def experts(x, w):
    # a batch of fp32 weights in F.linear's layout, read once each at decode
    with torch.autocast(GPU_TYPE, torch.bfloat16):
        return torch.bmm(x, w.transpose(1, 2))


def experts_bias(b, x, w):
    with torch.autocast(GPU_TYPE, torch.bfloat16):
        return torch.baddbmm(b, x, w.transpose(1, 2))


class TestDowncastBmmPlan(TestCase):
    def plan(self, m, batch, n=1024, k=4096):
        p = downcast_plan.DowncastMM(
            m_max=m, n=n, k=k, weight_downcast=True, batch=batch
        )
        return downcast_plan.plan(
            p, downcast_plan.Device(sm_count=132, smem_per_block=232448)
        )

    def test_the_batch_fills_the_sms(self):
        # 128-row tiles: 8 experts of 1024 columns fill the SMs where one does not
        self.assertEqual(self.plan(128, 1).decline, downcast_plan.Decline.FEW_TILES)
        self.assertEqual(self.plan(128, 8).configs[0].BLOCK_M, 128)

    def test_the_batch_counts_toward_the_weight(self):
        self.assertEqual(
            self.plan(16, 1, 256, 2048).decline, downcast_plan.Decline.SMALL_WEIGHT
        )
        self.assertEqual(self.plan(16, 8, 256, 2048).configs[0].BLOCK_M, 16)

    def test_rows_past_one_tile_decline(self):
        self.assertEqual(self.plan(129, 8).decline, downcast_plan.Decline.TOO_MANY_ROWS)


@instantiate_parametrized_tests
class TestDowncastBmm(TestCase):
    def setUp(self):
        super().setUp()
        if not is_big_gpu():
            self.skipTest("the bmm template needs a big GPU")
        patch = config.patch(
            {
                "downcast_mm_template": True,
                "bmm_prologue_fusion": True,
                "prologue_fusion_downcast": True,
                "prologue_fusion": True,
                "shape_padding": False,
            }
        )
        patch.__enter__()
        self.addCleanup(patch.__exit__, None, None, None)
        counters.clear()

    def inputs(self, batch, m, n=1024, k=4096):
        x = torch.randn(batch, m, k, device=GPU_TYPE)
        w = torch.randn(batch, n, k, device=GPU_TYPE) / k**0.5
        return x, w

    def check_template(self, code, kernels=2):
        # the template loads the fp32 weight through load_input and casts it in the
        # k loop: x's cast (and the bias's) and the template, no extern bmm
        FileCheck().check("def triton_tem").check("for k_idx").check(
            ".to(tl.bfloat16)"
        ).check("tl.dot").run(code)
        self.assertNotIn("extern_kernels.bmm", code)
        self.assertNotIn("extern_kernels.baddbmm", code)
        self.assertEqual(code.count("@triton.jit"), kernels)
        # one choice: nothing benchmarked in default mode
        self.assertEqual(counters["inductor"]["select_algorithm_autotune"], 0)

    def check_reduction(self, code):
        # one row: a reduction over K loads the fp32 weights; no kernel writes their
        # 16-bit copy
        FileCheck().check("def triton_red").check("tl.sum").run(code)
        self.assertNotIn("def triton_tem", code)
        self.assertNotIn("extern_kernels.bmm", code)
        self.assertEqual(code.count("@triton.jit"), 2)
        self.assertEqual(counters["inductor"]["decompose_downcast_mm"], 1)

    @skipIfRocm
    @parametrize("m", (16, 37, 128))
    def test_decode_takes_the_template(self, m):
        n = TALL_N if m > 64 else 1024
        code = get_code(torch.compile(experts), *self.inputs(8, m, n))[0]
        self.check_template(code)

    def test_one_row_reduces(self):
        code = get_code(torch.compile(experts), *self.inputs(8, 1))[0]
        self.check_reduction(code)
        self.assertNotIn("33554432", code)  # 8 x 1024 x 4096

    @skipIfRocm
    def test_baddbmm(self):
        b = torch.randn(8, 16, 1024, device=GPU_TYPE)
        code = get_code(torch.compile(experts_bias), b, *self.inputs(8, 16))[0]
        self.check_template(code, kernels=3)

    def test_rows_past_one_tile_stay_stock(self):
        code = get_code(torch.compile(experts), *self.inputs(8, 129))[0]
        self.assertNotIn("def triton_tem", code)

    @config.patch(bmm_prologue_fusion=False)
    def test_without_prologue_loads_stays_stock(self):
        # the bmm template's plain loads would not fuse the cast
        code = get_code(torch.compile(experts), *self.inputs(8, 16))[0]
        self.assertNotIn("def triton_tem", code)

    @config.patch(downcast_mm_template=False)
    def test_flag_off(self):
        code = get_code(torch.compile(experts), *self.inputs(8, 16))[0]
        self.assertNotIn("def triton_tem", code)

    @requires_gpu
    @skipIfRocm
    @parametrize("m", (1, 16, 37))
    def test_values(self, m):
        x, w = self.inputs(8, m, 1000, 1030)
        out, code = run_and_get_code(torch.compile(experts), x, w)
        if m == 1:
            self.check_reduction(code[0])
        else:
            self.check_template(code[0])
        ref = torch.bmm(x.double(), w.double().transpose(1, 2))
        eager = experts(x, w)
        self.assertLessEqual(
            (out.double() - ref).abs().max(), 2 * (eager.double() - ref).abs().max()
        )


if __name__ == "__main__":
    if HAS_GPU:
        run_tests()
