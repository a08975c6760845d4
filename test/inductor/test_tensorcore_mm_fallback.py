# Owner(s): ["module: inductor"]
"""``config.tensorcore_mm_precompile``: a tensorcore_mm kernel that fails to compile or
load (a driver without a binary for it) lowers as stock, with one warning a cause,
instead of failing the compile.
"""
from __future__ import annotations

import contextlib
import logging
from unittest import mock

import torch.nn.functional as F
from torch._inductor import config as inductor_config
from torch._inductor.kernel import mm_tensorcore
from torch._inductor.kernel import mm_tensorcore_plan as planner
from torch._inductor.test_case import run_tests
from torch.testing import FileCheck


try:
    from .test_tensorcore_mm import (
        BF16, H200, TensorCoreMMTestCase, comparable, gpu_randn, linear, requires_cuda_sm80,
    )
except ImportError:
    from test_tensorcore_mm import (
        BF16, H200, TensorCoreMMTestCase, comparable, gpu_randn, linear, requires_cuda_sm80,
    )


@contextlib.contextmanager
def no_template_binary():
    """Loading a template kernel fails as on a driver with no binary for it; yields the
    names of the kernels refused."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    make_launchers = CachingAutotuner._make_launchers
    refused = []

    def refuse(self):
        name = self.fn.__name__
        if name.startswith(("triton_tensorcore", "triton_tem_")):
            refused.append(name)
            raise RuntimeError("Triton Error [CUDA]: CUDA_ERROR_NO_BINARY_FOR_GPU")
        return make_launchers(self)

    with mock.patch.object(CachingAutotuner, "_make_launchers", refuse):
        yield refused


class TestTensorCoreMMCompileFailure(TensorCoreMMTestCase):
    def test_kernel_failing_to_compile_or_load(self):
        # found while lowering, where the stock lowering can still take over: loaded with
        # the output module, CUDA_ERROR_NO_BINARY_FOR_GPU failed the compile
        from torch._inductor.select_algorithm import TritonTemplateCaller

        error = RuntimeError("Triton Error [CUDA]: CUDA_ERROR_NO_BINARY_FOR_GPU")
        inputs = gpu_randn((16, 4096), (4096, 4096), (4096,))
        with (inductor_config.patch(tensorcore_mm_precompile=True),
              mock.patch.object(planner, "device_model", return_value=H200),
              mock.patch.object(TritonTemplateCaller, "precompile", side_effect=error) as precompile,
              mock.patch.object(mm_tensorcore, "_failed_compiles", set()),
              self.assertLogs(mm_tensorcore.log, logging.WARNING) as logs):
            code = self.cuda_code(linear(), *inputs)
            precompile.assert_called_once()
            # the same cause again, at another shape: falls back, no second warning
            self.cuda_code(linear(), *gpu_randn((16, 2048), (4096, 2048), (4096,)))
            self.assertEqual(self.counts["tensorcore_mm_fallback:compile_error"], 1)
        self.assertEqual(len(logs.records), 1)
        self.assertIn("addmm of (B, M, N, K) (1, 16, 4096, 4096)", logs.output[0])
        self.assertIn("RuntimeError: Triton Error [CUDA]: CUDA_ERROR_NO_BINARY_FOR_GPU",
                      logs.output[0])
        self.assertStock(code, "tensorcore_mm_fallback:compile_error")
        FileCheck().check_not("triton_tem_").check("extern_kernels.addmm(").run("\n".join(code))
        stock = self.cuda_code(linear(), *inputs, enabled=False)
        self.assertEqual(comparable(code), comparable(stock))

    @requires_cuda_sm80
    def test_kernel_failing_to_load_runs_stock(self):
        # the driver refuses every template kernel's binary, the final one's too
        x, w, b = gpu_randn((16, 4096), (4096, 4096), (4096,))
        with (mock.patch.object(planner, "device_model", return_value=H200),
              no_template_binary() as refused,
              mock.patch.object(mm_tensorcore, "_failed_compiles", set()),
              self.assertLogs(mm_tensorcore.log, logging.WARNING) as logs):
            out, code = self.compile_and_run(linear(), x, w, b)
        self.assertTrue(refused)
        self.assertEqual(len(logs.records), 1)
        self.assertIn("CUDA_ERROR_NO_BINARY_FOR_GPU", logs.output[0])
        self.assertStock(code, "tensorcore_mm_fallback:compile_error")
        self.assertLikeEager(out, linear(), [x, w, b], F.linear, BF16)


if __name__ == "__main__":
    run_tests()
