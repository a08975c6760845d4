# Owner(s): ["module: inductor"]
"""``config.tensorcore_mm_autocast`` for bmm and baddbmm: the batch is the template's
second grid dimension, and the cost model counts each batch's operands.

The generated CUDA code for the H200's plans (nothing run), on any CUDA GPU with sm_80;
values on such a GPU against eager autocast and an fp64 reference, for the A10G's plans.
"""

from __future__ import annotations

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
        BF16,
        dtype_name,
        FP16,
        H200,
        kernel_source,
        matmul_inputs,
        matmul_op,
        plans_as_a10g,
        plans_as_h200,
        template_kernels,
        TensorCoreMMTestCase,
    )
except ImportError:
    from test_tensorcore_mm import (
        BF16,
        dtype_name,
        FP16,
        H200,
        kernel_source,
        matmul_inputs,
        matmul_op,
        plans_as_a10g,
        plans_as_h200,
        template_kernels,
        TensorCoreMMTestCase,
    )


class TestBatchedCostModel(TestCase):
    def test_batch_counts_every_weight(self):
        # a weight per batch: 8 batches of 16x4096x4096 read 8 weights, as one 16x4096x4096
        # reads one, so the template pays the same way; their tiles fill the SMs sooner
        op = planner.Operand
        one = planner.Problem(
            "bmm", 1, 16, 4096, 4096, op(16 * 4096, True), op(4096**2, True)
        )
        eight = planner.Problem(
            "bmm", 8, 16, 4096, 4096, op(8 * 16 * 4096, True), op(8 * 4096**2, True)
        )
        p1, p8 = planner.plan(one, H200), planner.plan(eight, H200)
        template = planner.Path.TEMPLATE
        self.assertEqual((p1.path, p8.path), (template, template), p8.describe())
        self.assertGreater(p8.predictions[0].seconds, 4 * p1.predictions[0].seconds)
        self.assertGreaterEqual(p8.config.BLOCK_N, p1.config.BLOCK_N)


@plans_as_h200
class TestTensorCoreBMMCodegen(TensorCoreMMTestCase):
    @parametrize("op", ["bmm", "baddbmm"])
    @parametrize("dtype", [BF16, FP16], name_fn=dtype_name)
    def test_ops(self, op, dtype):
        code = self.cuda_code(
            matmul_op(op, dtype), *matmul_inputs(op, 16, 64, 96, device=GPU_TYPE)
        )
        self.assertTemplate(code)
        src = kernel_source(code, template_kernels(code)[0])
        FileCheck().check("BATCHED : tl.constexpr = True").check(
            f"DOT_DTYPE : tl.constexpr = tl.{dtype_name(dtype)}"
        ).check("idx_q = tl.program_id(1)").run(src)
        if op == "baddbmm":  # alpha and beta in the epilogue, before the rounding
            FileCheck().check("tl.full([1], 2.0").check("= acc * ").check(
                "tl.full([1], 0.5"
            ).check(f".to(tl.{dtype_name(dtype)})").run(src)
        # the batch is the launch grid's second dimension
        self.assertRegex("\n".join(code), r"triton_tem_fused_\w+\.run\([^\n]*, 3, 1")


# the A10G's cost model (the H200's too) keeps these shapes on the stock path; their
# values are still checked, against the same criterion
STOCK_BY_COST_MODEL = {(op, (200, 96, 4095)) for op in ("bmm", "baddbmm")}


class TestTensorCoreBMMGPU(TensorCoreMMTestCase):
    @plans_as_a10g
    @parametrize("op", ["bmm", "baddbmm"])
    @parametrize("dtype", [BF16, FP16], name_fn=dtype_name)
    @parametrize(
        "mnk",
        [
            (2, 4096, 4096),
            (3, 1001, 999),
            (16, 4096, 4096),
            (37, 1001, 999),
            (128, 256, 136),
            (200, 96, 4095),
            (16, 1024, 4096),
        ],
        name_fn=lambda mnk: "x".join(map(str, mnk)),
    )
    def test_values(self, op, dtype, mnk):
        code = self.compile_values(op, dtype, mnk)
        stock = (op, mnk) in STOCK_BY_COST_MODEL
        self.assertPath(code, "tensorcore_mm_stock:cost_model" if stock else None)


instantiate_parametrized_tests(TestTensorCoreBMMCodegen)
instantiate_parametrized_tests(TestTensorCoreBMMGPU)

if __name__ == "__main__":
    run_tests()
