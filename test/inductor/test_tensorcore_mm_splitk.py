# Owner(s): ["module: inductor"]
"""``config.tensorcore_mm_autocast`` splitting K where M and N give too few tiles for the
SMs: each program sums a range of K steps into an fp32 workspace, and the last program
of a tile adds the partials in split order (deterministic) and runs the epilogue.

The configs as plain Python for the H200's properties; the generated CUDA code for an
H200's plan (nothing run); values on any CUDA GPU with sm_80.
"""

from __future__ import annotations

from torch._inductor.kernel import mm_tensorcore_plan as planner
from torch._inductor.test_case import run_tests, TestCase
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
)
from torch.testing._internal.inductor_utils import GPU_TYPE


try:
    from .test_tensorcore_mm import (
        BF16,
        constexpr,
        DEVICE_SPECS,
        dtype_name,
        emulate_fp64,
        FP16,
        gpu_randn,
        H200,
        kernel_source,
        linear,
        linear_problem,
        matmul_inputs,
        matmul_op,
        plans_as_h200,
        requires_cuda_sm80,
        template_kernels,
        TensorCoreMMTestCase,
    )
except ImportError:
    from test_tensorcore_mm import (
        BF16,
        constexpr,
        DEVICE_SPECS,
        dtype_name,
        emulate_fp64,
        FP16,
        gpu_randn,
        H200,
        kernel_source,
        linear,
        linear_problem,
        matmul_inputs,
        matmul_op,
        plans_as_h200,
        requires_cuda_sm80,
        template_kernels,
        TensorCoreMMTestCase,
    )


def bmm_problem(batch, m, n, k):
    """torch.bmm of fp32 tensors under autocast, as the cost model sees it."""
    op = planner.Operand
    return planner.Problem(
        "bmm", batch, m, n, k, op(batch * m * k, True), op(batch * k * n, True)
    )


class TestSplitKPlan(TestCase):
    def test_split_where_tiles_leave_sms_idle(self):
        # 16x1024: 64 column tiles for 132 SMs, two splits fill one wave; 16x4096 fills
        # them without a split
        split = planner.plan(linear_problem(16, 1024, 4096), H200).config
        self.assertEqual(split.SPLIT_K, 2, split)
        self.assertGreater(split.workspace_bytes(16, 1024), 0)
        self.assertEqual(
            planner.plan(linear_problem(16, 4096, 4096), H200).config.SPLIT_K, 1
        )
        # no split where two would need a second wave (16x1280: 80 tiles) or leave fewer
        # than 8 steps of K a split (K = 1024: 8 steps in all)
        self.assertEqual(
            planner.plan(linear_problem(16, 1280, 5120), H200).config.SPLIT_K, 1
        )
        self.assertEqual(
            planner.plan(linear_problem(16, 1024, 1024), H200).config.SPLIT_K, 1
        )
        # batched, or K too short: no split
        batched = bmm_problem(4, 16, 1024, 4096)
        self.assertEqual(planner.plan(batched, H200).config.SPLIT_K, 1)
        self.assertEqual(
            planner.plan(linear_problem(16, 1024, 256), H200).config.SPLIT_K, 1
        )

    def test_two_row_tiles_where_the_weight_is_narrow(self):
        def tile(m, n, k, dev=H200):
            return planner.select_configs(linear_problem(m, n, k), dev, False, True)[0]

        # 1024 columns: 64 tiles of 16 for 132 SMs; two row tiles fill one wave, where
        # K = 768-1024 (6-8 steps) is too short to split
        for mnk, rows in [
            ((128, 1024, 1024), 64),
            ((96, 768, 768), 64),
            ((64, 1024, 1024), 32),
            ((48, 1024, 1024), 32),
        ]:
            config = tile(*mnk)
            self.assertEqual(config.BLOCK_M, rows, (mnk, config))
            self.assertEqual(config.BLOCK_N, 16, (mnk, config))
            self.assertEqual(config.SPLIT_K, 1, config)
        # K long enough to split: split K, the weight read once
        config = tile(64, 1024, 4096)
        self.assertEqual((config.BLOCK_M, config.SPLIT_K), (64, 2), config)
        # not where two would need a second wave: 1536 columns on 132 SMs, 1024 on
        # A100's 108
        self.assertEqual(tile(128, 1536, 1536).BLOCK_M, 128)
        a100 = planner.device_model(DEVICE_SPECS["a100"])
        self.assertEqual(tile(128, 1024, 1024, a100).BLOCK_M, 128)
        # 16 rows, M = 129-256 (two 128-row tiles already) and batches keep their tiles
        self.assertEqual(tile(16, 1024, 1024).BLOCK_M, 16)
        self.assertEqual(tile(200, 1024, 1024).BLOCK_M, 128)
        batched = bmm_problem(2, 128, 1024, 1024)
        config = planner.select_configs(batched, H200, False, True)[0]
        self.assertEqual(config.BLOCK_M, 128)


@plans_as_h200
class TestTensorCoreMMSplitKCodegen(TensorCoreMMTestCase):
    """Generated code for the H200's plans (nothing run)."""

    def test_decode_split_k(self):
        # N=1024: 64 tiles for 132 SMs, so K is split in two; the last program of a
        # tile adds the partials in a fixed order and runs the epilogue
        code = self.cuda_code(linear(), *gpu_randn((16, 4096), (1024, 4096), (1024,)))
        self.assertTemplate(code)
        src = kernel_source(code, template_kernels(code)[0])
        self.assertGreater(constexpr(src, "SPLIT_K"), 1)
        self.assertRegex("\n".join(code), r"workspace_\d+\.zero_\(\)")

    def test_two_row_tiles(self):
        # 96 rows of a 1024-column weight: two row tiles, the second masked, and K
        # whole (no workspace)
        code = self.cuda_code(linear(), *gpu_randn((96, 1024), (1024, 1024), (1024,)))
        self.assertTemplate(code)
        src = kernel_source(code, template_kernels(code)[0])
        self.assertEqual(-(-96 // constexpr(src, "BLOCK_M")), 2)
        self.assertIn("SPLIT_K : tl.constexpr = 1", src)
        self.assertNotIn("workspace_", "\n".join(code))


class TestTensorCoreMMSplitKGPU(TensorCoreMMTestCase):
    @requires_cuda_sm80
    @parametrize("op", ["mm", "addmm"])
    @parametrize("dtype", [BF16, FP16], name_fn=dtype_name)
    # split K; two row tiles where the device's SMs take them
    @parametrize(
        "mnk",
        [(16, 1024, 4096), (96, 1024, 1024)],
        name_fn=lambda s: "x".join(map(str, s)),
    )
    def test_values(self, op, dtype, mnk):
        inputs = matmul_inputs(op, *mnk, device=GPU_TYPE)
        fn = matmul_op(op, dtype)
        out, code = self.compile_and_run(fn, *inputs)
        self.assertLikeEager(out, fn, inputs, lambda *d: emulate_fp64(op, d), dtype)
        # deterministic: the partials are added in split order
        again, _ = self.compile_and_run(fn, *inputs)
        self.assertEqual(out, again, atol=0, rtol=0)


instantiate_parametrized_tests(TestSplitKPlan)
instantiate_parametrized_tests(TestTensorCoreMMSplitKGPU)

if __name__ == "__main__":
    run_tests()
