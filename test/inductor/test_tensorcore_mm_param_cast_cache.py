# Owner(s): ["module: inductor"]
"""``config.tensorcore_mm_autocast`` with ``config.autocast_param_cache``: a parameter's
cast kept across calls is a 16-bit weight in memory, which the decode kernels read as
stored, as they read a frozen one, where the cost model predicts a win over cuBLAS.
The generated code is the H200's (nothing run).
"""

from __future__ import annotations

import torch
from torch._inductor import config as inductor_config
from torch._inductor.test_case import run_tests
from torch.testing import FileCheck
from torch.testing._internal.inductor_utils import GPU_TYPE


try:
    from .test_tensorcore_mm import (
        kernel_source,
        plans_as_h200,
        template_kernels,
        TensorCoreMMTestCase,
    )
    from .test_tensorcore_mm_decode import Conv1D, frozen_linear
except ImportError:
    from test_tensorcore_mm import (
        kernel_source,
        plans_as_h200,
        template_kernels,
        TensorCoreMMTestCase,
    )
    from test_tensorcore_mm_decode import Conv1D, frozen_linear


KEPT = "torch.ops.inductor.cached_casts.default("


class TestTensorCoreMMKeptCasts(TensorCoreMMTestCase):
    def kept_code(self, mod, x, **kwargs):
        """The code of ``mod`` compiled inside an ambient bf16 autocast region, its
        parameters' casts kept across calls."""
        with (
            torch.no_grad(),
            torch.autocast(GPU_TYPE, dtype=torch.bfloat16),
            inductor_config.patch(
                autocast_param_cache=True, autocast_param_cache_budget=2**32
            ),
        ):
            return self.cuda_code(mod, x, **kwargs)

    @plans_as_h200
    def test_kept_cast_gemv(self):
        # M=1: the gemv template reads the kept bf16 weight (K contiguous); no cuBLAS
        code = self.kept_code(
            frozen_linear(4096, 4096).to(GPU_TYPE),
            torch.randn(1, 4096, device=GPU_TYPE),
        )
        self.assertIn(KEPT, "\n".join(code))
        self.assertEqual(self.counts["tensorcore_mm_gemv_frozen"], 1, dict(self.counts))
        (kernel,) = template_kernels(code)
        self.assertNotIn("extern_kernels.", "\n".join(code))
        FileCheck().check("'arg_B': '*bf16'").check("stride_bk = 1").check(
            "tl.sum(acc, 0)"
        ).run(kernel_source(code, kernel))

    @plans_as_h200
    def test_kept_cast_gemv_of_a_row_major_weight(self):
        # M=1 over a kept bf16 [K, N] weight (GPT-2's Conv1D): the gemv template, one
        # split over K = 1280, the bias in its epilogue; no cuBLAS call
        code = self.kept_code(
            Conv1D(1280, 3840).to(GPU_TYPE), torch.randn(1, 1280, device=GPU_TYPE)
        )
        self.assertIn(KEPT, "\n".join(code))
        self.assertEqual(self.counts["tensorcore_mm_gemv_frozen"], 1, dict(self.counts))
        (kernel,) = template_kernels(code)
        self.assertNotIn("extern_kernels.", "\n".join(code))
        FileCheck().check("'arg_B': '*bf16'").check("ROWS : tl.constexpr = 1280").check(
            "stride_bn = 1"
        ).check("tl.sum(acc, 0)").run(kernel_source(code, kernel))

    @plans_as_h200
    def test_kept_cast_decode_tile(self):
        # M=16, 4096x4096: one template kernel reads the kept bf16 weight and bias; no
        # cast kernel, no cuBLAS call
        code = self.kept_code(
            frozen_linear(4096, 4096).to(GPU_TYPE),
            torch.randn(16, 4096, device=GPU_TYPE),
        )
        self.assertTemplate(code)
        self.assertEqual(self.counts["tensorcore_mm_template_frozen"], 1)
        self.assertNotIn("extern_kernels.", "\n".join(code))

    @plans_as_h200
    def test_kept_cast_prefill_is_cublas(self):
        # M=256: cuBLAS reads the kept bf16 weight, as for a 16-bit model
        code = self.kept_code(
            frozen_linear(1024, 4096).to(GPU_TYPE),
            torch.randn(256, 4096, device=GPU_TYPE),
        )
        self.assertEqual(template_kernels(code), [])
        self.assertGreaterEqual(
            self.counts["tensorcore_mm_stock:cost_model"], 1, dict(self.counts)
        )
        self.assertRegex("\n".join(code), r"extern_kernels\.addmm\(buf\d+")


if __name__ == "__main__":
    run_tests()
