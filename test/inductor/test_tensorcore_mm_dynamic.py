# Owner(s): ["module: inductor"]
"""``config.tensorcore_mm_autocast`` with a symbolic M: one kernel for every M up to the
bound ``mark_dynamic`` gives, with a config planned for the whole range, or stock.

As test_tensorcore_mm.py: the plans as plain Python for the H200's properties, the
generated CUDA code for the H200's plans and values, on any CUDA GPU with sm_80.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor.kernel import mm_tensorcore_plan as planner
from torch._inductor.test_case import run_tests, TestCase
from torch._inductor.utils import get_code
from torch.testing._internal.inductor_utils import GPU_TYPE


try:
    from .test_tensorcore_mm import (
        BF16, H200, IS_H200, TensorCoreMMTestCase, gpu_randn, kernel_source, linear, linear_problem,
        no_caches, plans_as_h200, requires_cuda_sm80, template_kernels, tensorcore,
        tolerate_dynamic_outputs,
    )
except ImportError:
    from test_tensorcore_mm import (
        BF16, H200, IS_H200, TensorCoreMMTestCase, gpu_randn, kernel_source, linear, linear_problem,
        no_caches, plans_as_h200, requires_cuda_sm80, template_kernels, tensorcore,
        tolerate_dynamic_outputs,
    )


class TestDynamicMPlan(TestCase):
    """The plan for a symbolic M, from shapes alone: no compile."""

    def test_dynamic_m_plan_holds_over_the_range(self):
        p = linear_problem(16, 4096, 4096)
        bounded = planner.plan_dynamic_m(p, H200, 64)
        self.assertEqual(bounded.path, "template", bounded.describe())
        hinted = planner.plan(p, H200)
        self.assertGreater(bounded.config.BLOCK_M, hinted.config.BLOCK_M)  # not M=16's tile
        unbounded = planner.plan_dynamic_m(p, H200, 8192)
        self.assertEqual(unbounded.path, "stock", unbounded.describe())


@plans_as_h200
class TestTensorCoreMMDynamicCodegen(TensorCoreMMTestCase):
    """Generated code for the H200's plans (nothing run)."""

    def dynamic_m_code(self, m_max):
        def fn(x, w, b):
            if m_max is None:
                torch._dynamo.mark_dynamic(x, 0)
            else:
                torch._dynamo.mark_dynamic(x, 0, min=2, max=m_max)
            return torch.compile(linear())(x, w, b)

        torch._dynamo.reset()
        counters.clear()
        with tensorcore(True), no_caches(), tolerate_dynamic_outputs():
            code = get_code(fn, *gpu_randn((16, 4096), (4096, 4096), (4096,)))
        return [c for c in code if c]

    def test_dynamic_m_bounded(self):
        # M symbolic up to 64: one kernel, with a config chosen for the whole range
        code = self.dynamic_m_code(64)
        self.assertTemplate(code)
        src = kernel_source(code, template_kernels(code)[0])
        self.assertRegex(src, r"\n    M = ks0\n")  # M symbolic, N and K static
        self.assertRegex(src, r"\n    N = 4096\n")

    def test_dynamic_m_without_bound_keeps_stock(self):
        # a decode-shaped kernel would also run every prefill: not without a bound on M
        code = self.dynamic_m_code(None)
        self.assertStock(code, "tensorcore_mm_stock:dynamic_m_range")


class TestTensorCoreMMDynamicGPU(TensorCoreMMTestCase):
    """Values on a CUDA GPU as M varies within its bound; on an H200, one compile."""

    @requires_cuda_sm80
    def test_dynamic_m(self):
        fn = linear()
        w, b = gpu_randn((512, 1024), (512,))
        torch._dynamo.reset()
        with tensorcore(True), no_caches():
            compiled = torch.compile(fn)
            for m in (16, 2, 33, 64):
                x = torch.randn(m, 1024, device=GPU_TYPE)
                torch._dynamo.mark_dynamic(x, 0, min=2, max=64)
                self.assertLikeEager(compiled(x, w, b), fn, [x, w, b], F.linear, BF16)
        if IS_H200:
            self.assertEqual(self.counts["tensorcore_mm_template"], 1)  # one compile, symbolic M


if __name__ == "__main__":
    run_tests()
