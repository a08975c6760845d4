"""tensorcore_mm's symbolic M under the C++ wrapper (project-only): no per-range kernels.

The C++ wrapper calls a multi-kernel with one kernel's arguments, which the template's
kernels, each with its grid, do not share (torch/_inductor/codegen/multi_kernel.py says
so; with them the compile fails: "expected multi_kernel_name ... to be recorded during
cpp-wrapper codegen"). There a symbolic M takes one plan for its whole range. On torch
2.11 the C++ wrapper runs the graph while compiling it, which only a real GPU does.
"""
from __future__ import annotations

import pathlib
import sys
import unittest

import torch
from torch._inductor import config as inductor_config
from torch._inductor.test_case import run_tests

# the exported test module, as pytest imports it (test/inductor has no __init__.py)
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "inductor"))
import test_tensorcore_mm_dynamic as exported  # noqa: E402

HAS_REAL_GPU = torch._C._cuda_getDeviceCount() > 0
TORCH = tuple(int(v) for v in torch.__version__.split(".")[:2])


@unittest.skipIf(TORCH < (2, 15) and not HAS_REAL_GPU,
                 "torch 2.11's C++ wrapper runs the graph while compiling: a real GPU")
class TestDynamicMCppWrapper(exported.TestTensorCoreMMDynamicCodegen):
    def test_dynamic_m_cpp_wrapper_takes_one_plan(self):
        with inductor_config.patch(
                {"cpp_wrapper": True, "triton.autotune_at_compile_time": False}):
            code, _ = self.dynamic_m_code(None)
        self.assertNotIn("multi_kernel", "\n".join(code))
        # one plan for M up to 8192 does not hold up for this weight: stock
        self.assertStock(code, "tensorcore_mm_stock:dynamic_m_range")
        self.assertEqual(self.counts["tensorcore_mm_dynamic_m_dispatch"], 0)


# only the test above: the inherited ones run in the exported file
for _name in dir(TestDynamicMCppWrapper):
    if _name.startswith("test") and _name != "test_dynamic_m_cpp_wrapper_takes_one_plan":
        setattr(TestDynamicMCppWrapper, _name, None)


if __name__ == "__main__":
    run_tests()
