"""tensorcore_mm_measure's timing of the 16-bit GEMM against the profiler's kernel time
(project-only: a timing, on a GPU with the H200's shared memory, as its plan is the
H200's).
"""
from __future__ import annotations

import pathlib
import sys
import unittest
from unittest import mock

import torch
from torch._dynamo.testing import rand_strided
from torch._inductor.kernel import mm_tensorcore
from torch._inductor.test_case import run_tests

# the exported test module, as pytest imports it (test/inductor has no __init__.py)
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "inductor"))
from test_tensorcore_mm import (  # noqa: E402
    BF16, DEVICE_SPECS, TensorCoreMMTestCase, gpu_randn, linear, plans_as_h200,
)

# the H200's plan timed here launches tiles only its shared memory (an H100's) holds
HAS_H200_SMEM = torch.cuda.is_available() and (
    torch.cuda.get_device_properties().shared_memory_per_block_optin
    >= DEVICE_SPECS["h200"].smem_per_block
)


class TestTensorCoreMMTiming(TensorCoreMMTestCase):
    config = {"tensorcore_mm_measure": True}

    @unittest.skipUnless(HAS_H200_SMEM, "the H200's plan needs its shared memory")
    @plans_as_h200
    def test_measured_gemm_is_kernel_time(self):
        # the 16-bit GEMM is timed as a model runs it: timed call by call during a
        # compile, the host's launch time counted several times its kernel's
        timed = []
        measure = mm_tensorcore._measure

        def spy(*args):
            timed.append((args[3], measure(*args)))
            return timed[-1][1]

        inputs = gpu_randn((96, 6144), (1536, 6144), (1536,))
        with mock.patch.object(mm_tensorcore, "_measure", spy):
            self.compile_and_run(linear(), *inputs)
        ((layouts, (template, gemm)),) = timed
        self.assertGreater(template, 0)
        stock = mm_tensorcore._stock_fn("addmm", BF16, 1, 1)
        copies = [
            [rand_strided(size, stride, BF16, "cuda") for size, stride in layouts]
            for _ in range(8)
        ]
        for args in copies:
            stock(*args)
        torch.cuda.synchronize()
        activities = [torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=activities) as prof:
            for args in copies:
                stock(*args)
            torch.cuda.synchronize()
        kernels = sum(e.self_device_time_total for e in prof.key_averages())
        kernel = kernels / len(copies) / 1e6
        self.assertLess(gemm, 2 * kernel, (gemm, kernel))
        self.assertGreater(gemm, kernel / 2, (gemm, kernel))


if __name__ == "__main__":
    run_tests()
