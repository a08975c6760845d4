# Owner(s): ["module: inductor"]
"""The gelu_add pass (``config.gelu_add_fusion``): gelu(x) + r matched and lowered to one
named pointwise kernel with Inductor's numerics (one rounding; gelu's output rounded as
eager rounds it under ``config.emulate_precision_casts``).

Pattern structure and kernels are checked in the CUDA code Inductor generates
(``get_code``, which runs nothing), values and gradients on
Inductor's CPU backend and on the CUDA GPU against eager and an fp64 reference.
"""

from __future__ import annotations

import logging
import re
import unittest
from unittest import mock

import torch
import torch._functorch.config as functorch_config
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.fx_passes import gelu_add as gelu_add_pass
from torch._inductor.test_case import run_tests, TestCase
from torch._inductor.utils import get_code, run_and_get_code
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
)
from torch.testing._internal.inductor_utils import GPU_TYPE, HAS_CPU
from torch.testing._internal.triton_utils import requires_cuda_and_triton

APPROXIMATIONS = ("none", "tanh")
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# (x shape, residual shape): the same shape, a bias-like [N], a [1, N] row
CASES = (((37, 129), (37, 129)), ((5, 7, 33), (33,)), ((9, 65), (1, 65)))

# eager vs the fused kernel. fp32: 1e-6 relative (atol for sums that cancel to ~0).
# bf16/fp16: equal after rounding, i.e. at most one unit in the last place apart ...
TOLERANCES = {
    torch.float32: (1e-6, 1e-6),
    torch.bfloat16: (1e-6, 2.0**-7),
    torch.float16: (1e-6, 2.0**-10),
}
# ... and that on a vanishing fraction of elements (stock's fused kernel: about 20%)
MAX_MISMATCH_FRACTION = 1e-3
# against the fp64 reference
REFERENCE_TOLERANCES = {
    torch.float32: (1e-5, 1e-5),
    torch.bfloat16: (1e-2, 1e-2),
    torch.float16: (2e-3, 2e-3),
}


def gelu_add_three_ways(approximate: str):
    """gelu(x) + r, r + gelu(x), gelu(x) + r: one match each, over CASES."""

    def fn(x0, r0, x1, r1, x2, r2):
        return (
            F.gelu(x0, approximate=approximate) + r0,
            r1 + F.gelu(x1, approximate=approximate),
            F.gelu(x2, approximate=approximate) + r2,
        )

    return fn


# the same x shape, for functions whose outputs are multiplied together
SAME_X_CASES = (((37, 129), (37, 129)), ((37, 129), (129,)), ((37, 129), (1, 129)))


def product_of(fn):
    def product(*inputs):
        result = 1
        for out in fn(*inputs):
            result = result * out
        return result

    return product


def make_inputs(dtype, device="cpu", cases=CASES, requires_grad=False, seed=0):
    generator = torch.Generator().manual_seed(seed)
    inputs = []
    for x_shape, r_shape in cases:
        # x over gelu's tails and its knee; r of the same scale as gelu(x)
        inputs += [
            torch.randn(x_shape, generator=generator) * 3,
            torch.randn(r_shape, generator=generator),
        ]
    return [
        t.to(device=device, dtype=dtype).requires_grad_(requires_grad) for t in inputs
    ]


def fp64_reference(fn, inputs, dtype):
    outs = fn(*[t.detach().double() for t in inputs])
    return [o.to(dtype) if dtype == torch.float32 else o for o in outs]


def elements_per_thread(code: list[str]) -> list[str]:
    """The ``min_elem_per_thread`` of each pointwise kernel's heuristic."""
    return re.findall(r"min_elem_per_thread=(\d+)", "\n".join(code))


def rounded_to(code: list[str]) -> list[str]:
    """The dtypes a value is rounded to and read back from as fp32 (an explicit round trip)."""
    rounding = re.compile(
        r"(tmp\d+) = tmp\d+\.to\(tl\.(\w+)\)\n\s+tmp\d+ = \1\.to\(tl\.float32\)"
    )
    return [m.group(2) for m in rounding.finditer("\n".join(code))]


def kernel_names(code: list[str]) -> list[str]:
    return sorted(
        set(re.findall(r"\b(?:triton_poi|cpp)_fused_\w+?_\d+\b", "\n".join(code)))
    )


# the config flags of each feature: gelu_add, and tensorcore_mm with the metadata it needs
FLAGS = {
    "gelu_add": ("gelu_add_fusion",),
    "tensorcore_mm": ("autocast_matmul_meta", "tensorcore_mm_autocast"),
}


def features(names=()):
    """config.patch with exactly the named features on."""
    on = {flag for name in names for flag in FLAGS[name]}
    return inductor_config.patch(
        {flag: flag in on for flags in FLAGS.values() for flag in flags}
    )


class GeluAddTestCase(TestCase):
    def cuda_code(self, fn, *inputs, enabled=True, dynamic=False, names=("gelu_add",)):
        """The generated code of a fresh compile (nothing run), the features ``names`` on
        or none; the inputs are CUDA tensors."""
        torch._dynamo.reset()
        with (
            features(names if enabled else ()),
            inductor_config.patch(fx_graph_cache=False),
            functorch_config.patch(enable_autograd_cache=False),
        ):
            # a graph of extern kernels only comes with an empty kernel module
            return [
                code
                for code in get_code(torch.compile(fn, dynamic=dynamic), *inputs)
                if code
            ]

    def compile_and_run(
        self, fn, *inputs, enabled=True, dynamic=False, names=("gelu_add",)
    ):
        """(outputs, code) of a fresh compile on the inputs' device, the features ``names``
        on or none."""
        torch._dynamo.reset()
        with (
            features(names if enabled else ()),
            inductor_config.patch(fx_graph_cache=False),
            functorch_config.patch(enable_autograd_cache=False),
        ):
            return run_and_get_code(torch.compile(fn, dynamic=dynamic), *inputs)

    def assertMatchesEager(self, actual, expected, dtype):
        atol, rtol = TOLERANCES[dtype]
        torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)
        if dtype != torch.float32:
            mismatch = (actual != expected).float().mean().item()
            self.assertLessEqual(
                mismatch,
                MAX_MISMATCH_FRACTION,
                f"{mismatch:.2%} of {dtype} elements differ from eager: gelu's output not rounded?",
            )

    def assertMatchesReference(self, actual, reference, dtype):
        atol, rtol = REFERENCE_TOLERANCES[dtype]
        torch.testing.assert_close(
            actual.double(), reference.double(), atol=atol, rtol=rtol
        )


@requires_cuda_and_triton
class GeluAddPatternTests(GeluAddTestCase):
    """What matches and what does not, in the generated CUDA code.

    Each compiled function has one output: ``get_code`` runs nothing and its stand-in
    module returns one value, so several matches are multiplied into one result.
    """

    @parametrize("dtype", DTYPES, name_fn=dtype_name)
    @parametrize("approximate", APPROXIMATIONS)
    def test_matches_both_orders_and_broadcast_residuals(self, approximate, dtype):
        inputs = make_inputs(dtype, device=GPU_TYPE, cases=SAME_X_CASES)
        code = self.cuda_code(product_of(gelu_add_three_ways(approximate)), *inputs)
        self.assertEqual(counters["inductor"]["gelu_add_matched"], 3)
        self.assertEqual(counters["inductor"]["gelu_add_lowered"], 3)
        self.assertEqual(counters["inductor"]["gelu_add_fallback"], 0)
        self.assertEqual(kernel_names(code), ["triton_poi_fused_gelu_add_mul_0"])
        # Inductor's numerics: gelu and the add in fp32, one rounding at the store
        self.assertEqual(rounded_to(code), [])
        # tensors this small keep Inductor's elements per thread
        self.assertEqual(elements_per_thread(code), ["0"])

    @parametrize("dtype", DTYPES, name_fn=dtype_name)
    def test_eager_rounding_under_emulate_precision_casts(self, dtype):
        # one match: emulate_precision_casts rounds the product of several as eager too
        x, r = make_inputs(dtype, device=GPU_TYPE, cases=SAME_X_CASES[:1])
        with inductor_config.patch(emulate_precision_casts=True):
            code = self.cuda_code(lambda x, r: F.gelu(x) + r, x, r)
        self.assertEqual(counters["inductor"]["gelu_add_lowered"], 1)
        # bf16/fp16: gelu's output rounded as eager's gelu kernel stores it, then the add
        self.assertEqual(
            rounded_to(code), [] if dtype == torch.float32 else [dtype_name(dtype)]
        )

    @parametrize("dtype", DTYPES, name_fn=dtype_name)
    def test_elements_per_thread_for_large_16_bit(self, dtype):
        # 16M elements: 16-bit kernels take 16 elements a thread (XBLOCK 2048 with 4
        # warps), fp32 stays as stock
        x, r = (torch.empty(4096, 4096, dtype=dtype, device=GPU_TYPE) for _ in range(2))
        code = self.cuda_code(lambda x, r: F.gelu(x) + r, x, r)
        self.assertEqual(counters["inductor"]["gelu_add_matched"], 1)
        self.assertEqual(
            elements_per_thread(code), ["0" if dtype == torch.float32 else "16"]
        )
        # a bf16 gelu with an fp32 residual, add and output: not all 16-bit
        code = self.cuda_code(lambda x, r: F.gelu(x) + r.float(), x, r)
        self.assertEqual(elements_per_thread(code), ["0"])

    def test_elements_per_thread_configs(self):
        # what Inductor's pointwise heuristic makes of the hint: both autotuned configs
        # at 16 elements a thread (the copy rate), none past its
        # XBLOCK limit (an assert there would fail the compile)
        from torch._inductor.runtime import triton_heuristics
        from torch._inductor.runtime.hints import DeviceProperties

        h200 = DeviceProperties(
            type="cuda",
            index=0,
            multi_processor_count=132,
            cc=90,
            major=9,
            regs_per_multiprocessor=65536,
            max_threads_per_multi_processor=2048,
            max_threads_per_block=1024,
            warp_size=32,
        )
        configs = triton_heuristics.pointwise(
            {"x": 1 << 26},
            triton_meta={"device": h200, "signature": {}},
            min_elem_per_thread=gelu_add_pass._elements_per_thread(),
            inductor_meta={"autotune_pointwise": True},
            return_configs=True,
        )
        self.assertEqual(
            [(c.kwargs["XBLOCK"], c.num_warps) for c in configs], [(2048, 4), (4096, 8)]
        )

    def test_disabled_is_stock(self):
        fn = product_of(gelu_add_three_ways("none"))
        code = self.cuda_code(
            fn,
            *make_inputs(torch.bfloat16, device=GPU_TYPE, cases=SAME_X_CASES),
            enabled=False,
        )
        self.assertEqual(counters["inductor"]["gelu_add_matched"], 0)
        self.assertEqual(kernel_names(code), ["triton_poi_fused_add_gelu_mul_0"])

    @parametrize("dtype", (torch.float32, torch.bfloat16), name_fn=dtype_name)
    def test_no_match_when_an_intermediate_has_another_user(self, dtype):
        def fn(x0, r0, x1, r1, x2, r2):
            gelu = F.gelu(x0)  # the gelu output (bf16: its downcast) is used again
            # a hand-written gelu whose erf is reused
            erf = torch.erf(x1 * 0.7071067811865476)
            tanh_gelu = F.gelu(x2, approximate="tanh")
            return (
                (gelu + r0)
                * gelu
                * (x1 * 0.5 * (1 + erf) + r1)
                * erf
                * (tanh_gelu + r2)
                * tanh_gelu
            )

        self.cuda_code(fn, *make_inputs(dtype, device=GPU_TYPE, cases=SAME_X_CASES))
        self.assertEqual(counters["inductor"]["gelu_add_matched"], 0)

    def test_upcast_of_x_may_have_other_users(self):
        def fn(x, r):
            return (F.gelu(x) + r) * x.float()

        self.cuda_code(
            fn, *make_inputs(torch.bfloat16, device=GPU_TYPE, cases=CASES[:1])
        )
        self.assertEqual(counters["inductor"]["gelu_add_matched"], 1)

    def test_scalar_constants_are_checked(self):
        def fn(x, r):
            def erf_gelu(x, half=0.5, alpha=0.7071067811865476, one=1):
                return x * half * (one + torch.erf(x * alpha))

            def tanh_gelu(x, kappa=0.044715, beta=0.7978845608028654):
                return x * 0.5 * (1 + torch.tanh((x + x * x * x * kappa) * beta))

            return (
                (erf_gelu(x) + r)  # gelu, written by hand: the same graph
                * (tanh_gelu(x * 2) + r)  # likewise
                * (erf_gelu(x * 3, alpha=0.70710678) + r)
                * (erf_gelu(x * 4, half=0.5000001) + r)
                * (erf_gelu(x * 5, one=2) + r)
                * (tanh_gelu(x * 6, kappa=0.0447) + r)
                * (tanh_gelu(x * 7, beta=0.79788456) + r)
            )

        self.cuda_code(
            fn, *make_inputs(torch.float32, device=GPU_TYPE, cases=CASES[:1])
        )
        self.assertEqual(counters["inductor"]["gelu_add_matched"], 2)

    def test_no_match_for_alpha_or_scalar_residual(self):
        def fn(x0, r0, x1, r1):
            return torch.add(F.gelu(x0), r0, alpha=2) * (F.gelu(x1) + 1.5) * r1

        inputs = make_inputs(torch.float32, device=GPU_TYPE, cases=SAME_X_CASES[:2])
        code = self.cuda_code(fn, *inputs)
        self.assertEqual(counters["inductor"]["gelu_add_matched"], 0)
        self.assertEqual(counters["inductor"]["gelu_add_lowered"], 0)
        # nothing fused: the kernels are stock's (whether the matcher rejects the alpha
        # add or never offers it depends on the pattern matcher)
        stock = self.cuda_code(fn, *inputs, enabled=False)
        self.assertEqual(kernel_names(code), kernel_names(stock))
        self.assertNotIn("gelu_add", " ".join(kernel_names(code)))

    def test_mixed_dtypes(self):
        def fn(x0, r0, x1, r1):
            # bf16 gelu promoted to an fp32 add; fp32 gelu of an upcast bf16 x
            return (F.gelu(x0) + r0.float()) * (
                F.gelu(x1.float(), approximate="tanh") + r1
            )

        x0, r0, x1, r1 = make_inputs(
            torch.bfloat16, device=GPU_TYPE, cases=SAME_X_CASES[:2]
        )
        self.cuda_code(fn, x0, r0, x1, r1.float())
        self.assertEqual(counters["inductor"]["gelu_add_matched"], 2)

    def test_autocast_linear(self):
        # gelu(F.linear(x, w, b)) + r under bf16 autocast with fp32 parameters: x is mm + bias
        def fn(x, w, b, r):
            with torch.autocast(GPU_TYPE, dtype=torch.bfloat16):
                return F.gelu(F.linear(x, w, b), approximate="tanh") + r

        generator = torch.Generator().manual_seed(0)
        inputs = [
            torch.randn(s, generator=generator).to(GPU_TYPE)
            for s in ((256, 512), (1024, 512), (1024,), (256, 1024))
        ]
        code = "\n".join(self.cuda_code(fn, *inputs))
        self.assertEqual(counters["inductor"]["gelu_add_matched"], 1)
        self.assertEqual(
            len(re.findall(r"triton_poi_fused_\w*gelu_add_\d+\.run\(", code)), 1
        )
        # the matmul stays stock's (cuBLAS here: an extern call)
        stock = "\n".join(self.cuda_code(fn, *inputs, enabled=False))
        extern_calls = re.compile(r"extern_kernels\.\w+\(.*")
        self.assertEqual(extern_calls.findall(code), extern_calls.findall(stock))
        self.assertTrue(extern_calls.findall(code))


@requires_cuda_and_triton
class GeluAddPointwiseTests(GeluAddTestCase):
    """gelu(x) + r as one pointwise kernel."""

    @parametrize("approximate", APPROXIMATIONS)
    def test_pointwise_bf16(self, approximate):
        fn = lambda x, r: F.gelu(x, approximate=approximate) + r  # noqa: E731
        x, r = make_inputs(
            torch.bfloat16, device=GPU_TYPE, cases=(((64, 1000), (64, 1000)),)
        )
        code = self.cuda_code(fn, x, r)
        self.assertEqual(
            kernel_names(code), ["triton_poi_fused_gelu_add_0"], "\n".join(code)
        )
        self.assertEqual(counters["inductor"]["gelu_add_matched"], 1)

    @parametrize("approximate", APPROXIMATIONS)
    def test_pointwise_fp32(self, approximate):
        fn = lambda x, r: r + F.gelu(x, approximate=approximate)  # noqa: E731
        x, r = make_inputs(
            torch.float32, device=GPU_TYPE, cases=(((64, 1000), (64, 1000)),)
        )
        code = self.cuda_code(fn, x, r)
        self.assertEqual(
            kernel_names(code), ["triton_poi_fused_gelu_add_0"], "\n".join(code)
        )
        self.assertEqual(counters["inductor"]["gelu_add_matched"], 1)

    def test_broadcast_residual(self):
        fn = lambda x, r: F.gelu(x) + r  # noqa: E731
        x, r = make_inputs(
            torch.float16, device=GPU_TYPE, cases=(((64, 1000), (1000,)),)
        )
        code = self.cuda_code(fn, x, r)
        self.assertEqual(
            kernel_names(code), ["triton_poi_fused_gelu_add_0"], "\n".join(code)
        )
        self.assertEqual(counters["inductor"]["gelu_add_matched"], 1)


@unittest.skipIf(not HAS_CPU, "requires C++ compiler")
class GeluAddCPUTests(GeluAddTestCase):
    """Values and gradients on Inductor's CPU backend (C++ kernels)."""

    @parametrize("approximate", APPROXIMATIONS)
    def test_fp32_values(self, approximate):
        fn = gelu_add_three_ways(approximate)
        inputs = make_inputs(torch.float32)
        outs, code = self.compile_and_run(fn, *inputs)
        self.assertEqual(counters["inductor"]["gelu_add_matched"], 3)
        self.assertTrue(
            all("gelu_add" in n for n in kernel_names(code)), kernel_names(code)
        )
        for out, expected, reference in zip(
            outs, fn(*inputs), fp64_reference(fn, inputs, torch.float32)
        ):
            self.assertMatchesEager(out, expected, torch.float32)
            self.assertMatchesReference(out, reference, torch.float32)

    def test_low_precision_values(self):
        fn = gelu_add_three_ways("none")
        inputs = make_inputs(torch.bfloat16, cases=CASES[:1] * 3)
        outs, code = self.compile_and_run(fn, *inputs)
        self.assertEqual(counters["inductor"]["gelu_add_matched"], 3)
        stock, _ = self.compile_and_run(fn, *inputs, enabled=False)
        for out, stock_out, reference in zip(
            outs, stock, fp64_reference(fn, inputs, torch.bfloat16)
        ):
            # Inductor's numerics
            self.assertMatchesEager(out, stock_out, torch.bfloat16)
            self.assertMatchesReference(out, reference, torch.bfloat16)

    def test_eager_rounding_not_applied_on_cpp_backend(self):
        # C++ kernels cannot keep gelu's rounding to bf16 (see _kernels_round_intermediates)
        fn = gelu_add_three_ways("none")
        inputs = make_inputs(torch.bfloat16, cases=CASES[:1] * 3)
        with inductor_config.patch(emulate_precision_casts=True):
            outs, code = self.compile_and_run(fn, *inputs)
        self.assertEqual(counters["inductor"]["gelu_add_matched"], 0)
        self.assertEqual(counters["inductor"]["gelu_add_rejected"], 3)
        for out, reference in zip(outs, fp64_reference(fn, inputs, torch.bfloat16)):
            self.assertMatchesReference(out, reference, torch.bfloat16)

    def test_alpha_result_is_right(self):
        fn = lambda x, r: torch.add(F.gelu(x), r, alpha=2)  # noqa: E731
        inputs = make_inputs(torch.float32, cases=CASES[1:2])
        out, _ = self.compile_and_run(fn, *inputs)
        self.assertEqual(counters["inductor"]["gelu_add_matched"], 0)
        self.assertMatchesEager(out, fn(*inputs), torch.float32)

    def test_lowering_error_falls_back_to_stock(self):
        fn = gelu_add_three_ways("tanh")
        inputs = make_inputs(torch.float32)
        with (
            mock.patch.object(
                gelu_add_pass, "lower_gelu_add", side_effect=RuntimeError("injected")
            ),
            self.assertLogs(gelu_add_pass.log, logging.WARNING) as logs,
        ):
            outs, code = self.compile_and_run(fn, *inputs)
        self.assertEqual(len(logs.records), 3)  # one per match
        self.assertIn("gelu_add: lowering failed", logs.output[0])
        self.assertEqual(counters["inductor"]["gelu_add_fallback"], 3)
        self.assertEqual(counters["inductor"]["gelu_add_lowered"], 0)
        self.assertFalse(
            any("gelu_add" in n for n in kernel_names(code)), kernel_names(code)
        )
        for out, expected in zip(outs, fn(*inputs)):
            self.assertMatchesEager(out, expected, torch.float32)

    def test_check_error_leaves_match_to_stock(self):
        fn = gelu_add_three_ways("none")
        inputs = make_inputs(torch.float32)
        with mock.patch.object(
            gelu_add_pass, "spec_of_match", side_effect=RuntimeError("injected")
        ):
            outs, _ = self.compile_and_run(fn, *inputs)
        self.assertEqual(counters["inductor"]["gelu_add_matched"], 0)
        self.assertEqual(counters["inductor"]["gelu_add_check_error"], 3)
        for out, expected in zip(outs, fn(*inputs)):
            self.assertMatchesEager(out, expected, torch.float32)

    def test_dynamic_shapes_values(self):
        fn = gelu_add_three_ways("none")
        inputs = make_inputs(torch.float32)
        outs, code = self.compile_and_run(fn, *inputs, dynamic=True)
        self.assertEqual(counters["inductor"]["gelu_add_matched"], 3)
        self.assertTrue(
            all("gelu_add" in n for n in kernel_names(code)), kernel_names(code)
        )
        for out, expected in zip(outs, fn(*inputs)):
            self.assertMatchesEager(out, expected, torch.float32)

    @parametrize("approximate", APPROXIMATIONS)
    def test_training_gradients(self, approximate):
        fn = gelu_add_three_ways(approximate)
        inputs = make_inputs(torch.float32, requires_grad=True)
        eager_inputs = [t.detach().clone().requires_grad_() for t in inputs]
        outs, _ = self.compile_and_run(fn, *inputs)
        self.assertEqual(counters["inductor"]["gelu_add_matched"], 3)  # forward graph
        grad_outs = [torch.randn_like(o) for o in outs]
        torch.autograd.backward(outs, grad_outs)
        torch.autograd.backward(fn(*eager_inputs), grad_outs)
        for tensor, eager_tensor in zip(inputs, eager_inputs):
            torch.testing.assert_close(
                tensor.grad, eager_tensor.grad, atol=1e-5, rtol=1e-5
            )


class GeluAddGPUTests(GeluAddTestCase):
    """Values and gradients on the CUDA GPU against eager and an fp64 reference."""

    @requires_cuda_and_triton
    @parametrize("dtype", DTYPES, name_fn=dtype_name)
    @parametrize("approximate", APPROXIMATIONS)
    def test_values(self, approximate, dtype):
        fn = gelu_add_three_ways(approximate)
        inputs = make_inputs(dtype, device=GPU_TYPE)
        outs, code = self.compile_and_run(fn, *inputs)
        self.assertEqual(counters["inductor"]["gelu_add_matched"], 3)
        self.assertTrue(
            all("gelu_add" in n for n in kernel_names(code)), kernel_names(code)
        )
        stock, _ = self.compile_and_run(fn, *inputs, enabled=False)
        for out, stock_out, reference in zip(
            outs, stock, fp64_reference(fn, inputs, dtype)
        ):
            self.assertMatchesEager(out, stock_out, dtype)  # Inductor's numerics
            self.assertMatchesReference(out, reference, dtype)
        counters.clear()
        with inductor_config.patch(emulate_precision_casts=True):
            outs, _ = self.compile_and_run(fn, *inputs)
        self.assertEqual(counters["inductor"]["gelu_add_matched"], 3)
        for out, expected, reference in zip(
            outs, fn(*inputs), fp64_reference(fn, inputs, dtype)
        ):
            self.assertMatchesEager(out, expected, dtype)
            self.assertMatchesReference(out, reference, dtype)

    @requires_cuda_and_triton
    @parametrize("dtype", (torch.bfloat16, torch.float16), name_fn=dtype_name)
    def test_stock_does_not_round_like_eager(self, dtype):
        # the discrimination of assertMatchesEager: stock's fused kernel fails it
        fn = gelu_add_three_ways("none")
        inputs = make_inputs(dtype, device=GPU_TYPE)
        outs, _ = self.compile_and_run(fn, *inputs, enabled=False)
        with self.assertRaises(AssertionError):
            self.assertMatchesEager(outs[0], fn(*inputs)[0], dtype)

    @requires_cuda_and_triton
    @parametrize("dtype", DTYPES, name_fn=dtype_name)
    @parametrize("approximate", APPROXIMATIONS)
    def test_training_gradients(self, approximate, dtype):
        fn = gelu_add_three_ways(approximate)
        inputs = make_inputs(dtype, device=GPU_TYPE, requires_grad=True)
        eager_inputs = [t.detach().clone().requires_grad_() for t in inputs]
        outs, _ = self.compile_and_run(fn, *inputs)
        self.assertGreaterEqual(counters["inductor"]["gelu_add_matched"], 3)
        grad_outs = [torch.randn_like(o) for o in outs]
        torch.autograd.backward(outs, grad_outs)
        expected = fn(*eager_inputs)
        torch.autograd.backward(expected, grad_outs)
        for out, e in zip(outs, expected):
            # one rounding where eager rounds twice: within a rounding of eager
            atol, rtol = (
                (1e-6, 1e-6) if dtype == torch.float32 else REFERENCE_TOLERANCES[dtype]
            )
            torch.testing.assert_close(out.detach(), e.detach(), atol=atol, rtol=rtol)
        for tensor, eager_tensor in zip(inputs, eager_inputs):
            # Inductor computes gelu's backward in fp32 and rounds once: within a rounding of eager
            atol, rtol = (
                (1e-5, 1e-5) if dtype == torch.float32 else REFERENCE_TOLERANCES[dtype]
            )
            torch.testing.assert_close(
                tensor.grad, eager_tensor.grad, atol=atol, rtol=rtol
            )

    @requires_cuda_and_triton
    def test_autocast_linear(self):
        # gelu(F.linear(x, w, b)) + r under bf16 autocast, fp32 parameters
        generator = torch.Generator().manual_seed(0)
        x, w, b, r = (
            torch.randn(s, generator=generator).to(GPU_TYPE)
            for s in ((256, 512), (1024, 512), (1024,), (256, 1024))
        )

        def fn(x, w, b, r):
            with torch.autocast(GPU_TYPE, dtype=torch.bfloat16):
                return F.gelu(F.linear(x, w, b), approximate="tanh") + r

        out, code = self.compile_and_run(fn, x, w, b, r)
        self.assertEqual(counters["inductor"]["gelu_add_matched"], 1)
        self.assertTrue(
            any("gelu_add" in n for n in kernel_names(code)), kernel_names(code)
        )
        # the matmul's own rounding (stock: bias added after a bf16 mm) is not this pass's
        self.assertMatchesReference(out, fn(x, w, b, r), torch.bfloat16)


instantiate_parametrized_tests(GeluAddPatternTests)
instantiate_parametrized_tests(GeluAddPointwiseTests)
instantiate_parametrized_tests(GeluAddCPUTests)
instantiate_parametrized_tests(GeluAddGPUTests)

if __name__ == "__main__":
    run_tests()
