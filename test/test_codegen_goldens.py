# Owner(s): ["module: inductor"]
"""Whole-source goldens: every line Inductor generates for the exported tests' scenarios.

The project's spec of generated code, GPU-free (the plugin fakes an H200), compared with
the expect files beside this file (``expect/``, one per torch release where the code
differs: torch_overlay.testing.release_goldens). The exported tests under test/inductor
assert kernel facts only, so that they hold on any CUDA GPU upstream CI runs; each class
here runs the named exported tests again, keeps the code of their first compile and
compares it whole. ``EXPECTTEST_ACCEPT=1`` rewrites the files: read every diff.
"""
from __future__ import annotations

import pathlib
import sys
from typing import Any
from unittest import mock

from torch._inductor.test_case import run_tests

from torch_overlay.testing.golden import normalize

# the exported test modules, as pytest imports them (test/inductor has no __init__.py)
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "inductor"))
import test_bmm_prologue  # noqa: E402
import test_downcast_mm  # noqa: E402
import test_downcast_mm_bmm  # noqa: E402
import test_gelu_add  # noqa: E402
import test_matmul_meta  # noqa: E402
import test_tensorcore_mm  # noqa: E402
import test_tensorcore_mm_decode  # noqa: E402
import test_tensorcore_mm_dynamic  # noqa: E402
import test_tensorcore_mm_gelu_add  # noqa: E402
import test_tensorcore_mm_splitk  # noqa: E402


def goldens(module: Any, cls: type, tests: list[str]) -> type:
    """``cls`` with only ``tests``, each also comparing the code of its first ``get_code``
    (``module``'s, which the tests call) with the expect file of the same class and test
    name."""

    def golden(name: str) -> Any:
        def test(self: Any) -> None:
            codes: list[list[str]] = []
            get_code = module.get_code

            def capture(*args: Any, **kwargs: Any) -> Any:
                codes.append(get_code(*args, **kwargs))
                return codes[-1]

            with mock.patch.object(module, "get_code", capture):
                getattr(cls, name)(self)
            self.assertTrue(codes, f"{name} compiled nothing")
            self.assertExpected(normalize([c for c in codes[0] if c]))

        return test

    missing = [t for t in tests if not callable(getattr(cls, t, None))]
    assert not missing, f"{cls.__name__} has no {missing}"
    body: dict[str, Any] = {n: None for n in dir(cls) if n.startswith("test")}
    body.update({n: golden(n) for n in tests}, __module__=__name__)
    return type(cls.__name__, (cls,), body)


APPROXIMATIONS = ("none", "tanh")

TestTensorCoreMMCodegen = goldens(test_tensorcore_mm, test_tensorcore_mm.TestTensorCoreMMCodegen, [
    "test_decode", "test_prefill", "test_stock_kept"])
# (through the get_code of the module that calls it: the test case's, or its own)
TestTensorCoreMMSplitKCodegen = goldens(
    test_tensorcore_mm, test_tensorcore_mm_splitk.TestTensorCoreMMSplitKCodegen,
    ["test_decode_split_k"])
TestTensorCoreMMDynamicCodegen = goldens(
    test_tensorcore_mm_dynamic, test_tensorcore_mm_dynamic.TestTensorCoreMMDynamicCodegen,
    ["test_dynamic_m_bounded"])
TestTensorCoreMMGemvCodegen = goldens(
    test_tensorcore_mm, test_tensorcore_mm_decode.TestTensorCoreMMGemvCodegen,
    ["test_gemv", "test_gemv_of_an_lm_head", "test_one_row_of_a_row_major_weight"])
TestTensorCoreMMFreezing = goldens(
    test_tensorcore_mm, test_tensorcore_mm_decode.TestTensorCoreMMFreezing,
    ["test_frozen_decode", "test_frozen_gemv"])
GeluAddPointwiseTests = goldens(test_gelu_add, test_gelu_add.GeluAddPointwiseTests, [
    f"test_pointwise_{dtype}_approximate_{a}" for dtype in ("bf16", "fp32") for a in APPROXIMATIONS
] + ["test_broadcast_residual"])
GeluAddEpilogueTests = goldens(test_gelu_add, test_tensorcore_mm_gelu_add.GeluAddEpilogueTests, [
    f"test_gemm_epilogue_bf16_approximate_{a}" for a in APPROXIMATIONS])
TestDowncastMM = goldens(test_downcast_mm, test_downcast_mm.TestDowncastMM, [
    "test_decode_takes_the_template_m_16_bias_True",
    "test_decode_takes_the_template_m_100_bias_False",
    "test_one_row_with_bias_reduces",
    "test_one_row_kn_weight_reduces",
    "test_rows_past_one_tile_swap_m_200_bias_True"])
TestBmmPrologue = goldens(test_bmm_prologue, test_bmm_prologue.TestBmmPrologue, [
    "test_upcast_fuses_3x37x120x250",
    "test_weight_downcast_at_decode_M_16",
    "test_flag_off_keeps_the_producer_apart"])
TestDowncastBmm = goldens(test_downcast_mm_bmm, test_downcast_mm_bmm.TestDowncastBmm, [
    "test_decode_takes_the_template_m_16",
    "test_one_row_reduces",
    "test_baddbmm"])
TestMatmulMetaCUDACodegen = goldens(test_matmul_meta, test_matmul_meta.TestMatmulMetaCUDACodegen,
                                    ["test_autocast_linear"])


if __name__ == "__main__":
    run_tests()
