# Owner(s): ["module: inductor"]
"""gelu(F.linear(x, w, b)) + r as the epilogue of the tensorcore_mm template: with
``config.gelu_add_fusion`` and ``config.tensorcore_mm_autocast``, the template's cost
model counts the gelu-add that is a matmul's only reader, and fuses it.

The structure in the CUDA code Inductor generates (``get_code``, nothing run); values and
gradients on the CUDA GPU against eager and an fp64 reference.
"""

from __future__ import annotations

import re

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.test_case import run_tests
from torch.testing import FileCheck
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
)
from torch.testing._internal.inductor_utils import GPU_TYPE


try:
    from .test_gelu_add import APPROXIMATIONS, GeluAddTestCase, kernel_names
    from .test_tensorcore_mm import plans_as_h200, requires_cuda_sm80
except ImportError:
    from test_gelu_add import APPROXIMATIONS, GeluAddTestCase, kernel_names
    from test_tensorcore_mm import plans_as_h200, requires_cuda_sm80


def gelu_linear(approximate: str, autocast: bool = False):
    def fn(x, w, b, r):
        with torch.autocast(GPU_TYPE, dtype=torch.bfloat16, enabled=autocast):
            return F.gelu(F.linear(x, w, b), approximate=approximate) + r

    return fn


def linear_inputs(m, n, k, dtype, device="cpu", lead=(), requires_grad=False, seed=0):
    generator = torch.Generator().manual_seed(seed)
    shapes = ((*lead, m, k), (n, k), (n,), (*lead, m, n))
    scales = (1.0, k**-0.5, 0.1, 1.0)
    return [
        (torch.randn(s, generator=generator) * c)
        .to(device=device, dtype=dtype)
        .requires_grad_(requires_grad)
        for s, c in zip(shapes, scales)
    ]


def template_kernels(code: list[str]) -> list[str]:
    return re.findall(r"(triton_tem_fused_\w+?_\d+)\.run\(", "\n".join(code))


@requires_cuda_sm80
class GeluAddEpilogueTests(GeluAddTestCase):
    """gelu(F.linear(x, w, b)) + r as the tensorcore_mm template's epilogue, in the
    generated CUDA code.

    The template fuses it wherever its cost model predicts a win over cuBLAS plus
    the pointwise kernel; on the H200 that is nowhere among the bf16 benchmark
    shapes, so the one-kernel form is asserted with the plan forced.
    """

    FEATURES = ["tensorcore_mm", "gelu_add"]

    def code_with(self, fn, *inputs, force=None):
        forced = (
            {}
            if force is None
            else dict(
                tensorcore_mm_force_path="template", tensorcore_mm_force_fused=force
            )
        )
        with inductor_config.patch(shape_padding=False, **forced):
            return self.cuda_code(fn, *inputs, names=self.FEATURES)

    def assertOneKernel(self, code):
        joined = "\n".join(code)
        self.assertEqual(len(template_kernels(code)), 1, joined)
        self.assertEqual(
            kernel_names(code), [], "no pointwise kernel after the template"
        )
        self.assertNotIn("extern_kernels.", joined)
        self.assertEqual(counters["inductor"]["tensorcore_mm_template_gelu_add"], 1)
        # bias, rounding to bf16 (the matmul's output as eager stores it), gelu and the
        # residual in fp32: in this order, in the template's epilogue
        src = joined[joined.index("def triton_tem_fused") :]
        FileCheck().check("acc + ").check(".to(tl.bfloat16)").check("0.5").check(
            "tl.store"
        ).run(src)

    @parametrize("approximate", APPROXIMATIONS)
    def test_gemm_epilogue_bf16(self, approximate):
        inputs = linear_inputs(512, 768, 320, torch.bfloat16, device=GPU_TYPE)
        code = self.code_with(gelu_linear(approximate), *inputs, force=(False, False))
        self.assertOneKernel(code)

    def test_autocast_fp32_parameters(self):
        # the weight cast in the kernel too: the template reads fp32 w
        code = self.code_with(
            gelu_linear("tanh", autocast=True),
            *linear_inputs(512, 768, 320, torch.float32, device=GPU_TYPE),
            force=(False, True),
        )
        self.assertEqual(len(template_kernels(code)), 1)
        # x's cast is a kernel of its own (re-read by every column tile); nothing follows
        self.assertTrue(
            all("_to_copy" in name for name in kernel_names(code)), kernel_names(code)
        )
        self.assertEqual(counters["inductor"]["tensorcore_mm_template_gelu_add"], 1)

    def test_3d_input_keeps_stock(self):
        # F.linear of [B, S, K]: a view between the matmul and the gelu-add, through
        # which Inductor's scheduler does not fuse a template's epilogue: not taken
        code = self.code_with(
            gelu_linear("none"),
            *linear_inputs(64, 256, 128, torch.bfloat16, device=GPU_TYPE, lead=(4,)),
            force=(False, False),
        )
        self.assertEqual(template_kernels(code), [])
        pointwise = re.findall(
            r"triton_poi_fused_\w*gelu_add_\w*\d+\.run\(", "\n".join(code)
        )
        self.assertEqual(len(pointwise), 1)
        self.assertEqual(counters["inductor"]["tensorcore_mm_fallback:not_autocast"], 1)

    @plans_as_h200
    def test_cost_model_keeps_cublas_plus_one_kernel(self):
        # H200, 8192x4096x1024 bf16: the template with the fused epilogue at best 0.189 ms
        # (erf; tanh 0.226), cuBLAS + the pointwise kernel 0.148-0.170
        code = self.code_with(
            gelu_linear("none"),
            *linear_inputs(8192, 4096, 1024, torch.bfloat16, device=GPU_TYPE),
        )
        self.assertEqual(template_kernels(code), [])
        pointwise = re.findall(
            r"triton_poi_fused_\w*gelu_add_\d+\.run\(", "\n".join(code)
        )
        self.assertEqual(len(pointwise), 1)
        self.assertIn("extern_kernels.addmm", "\n".join(code))
        self.assertEqual(counters["inductor"]["tensorcore_mm_stock:cost_model"], 1)

    def test_other_reader_keeps_stock(self):
        # the matmul's output has another reader: the template would write it as well
        def fn(x, w, b, r):
            y = F.linear(x, w, b)
            return (F.gelu(y) + r) * y

        inputs = linear_inputs(512, 768, 320, torch.bfloat16, device=GPU_TYPE)
        code = self.code_with(fn, *inputs, force=(False, False))
        self.assertEqual(template_kernels(code), [])
        self.assertEqual(counters["inductor"]["tensorcore_mm_template_gelu_add"], 0)

    def test_without_gelu_add_a_16bit_matmul_is_stock(self):
        self.FEATURES = ["tensorcore_mm"]
        code = self.code_with(
            gelu_linear("none"),
            *linear_inputs(512, 768, 320, torch.bfloat16, device=GPU_TYPE),
            force=(False, False),
        )
        self.assertEqual(template_kernels(code), [])
        self.assertEqual(counters["inductor"]["tensorcore_mm_fallback:not_autocast"], 1)

    @parametrize("approximate", APPROXIMATIONS)
    @parametrize("variant", ["bf16", "autocast"])
    def test_gpu_values_and_gradients(self, variant, approximate):
        dtype = torch.bfloat16 if variant == "bf16" else torch.float32
        fn = gelu_linear(approximate, autocast=variant == "autocast")
        for requires_grad in (False, True):
            inputs = linear_inputs(
                300, 520, 264, dtype, device=GPU_TYPE, requires_grad=requires_grad
            )
            eager_inputs = [
                t.detach().clone().requires_grad_(requires_grad) for t in inputs
            ]
            # pad_mm would pad this odd matmul (when its benchmark says so): then a
            # slice, not the gelu-add, reads the matmul, and stock keeps it
            fused = (False, False) if variant == "bf16" else None
            with inductor_config.patch(
                shape_padding=False,
                tensorcore_mm_force_path="template",
                tensorcore_mm_force_fused=fused,
            ):
                out, code = self.compile_and_run(fn, *inputs, names=self.FEATURES)
            expected = fn(*eager_inputs)
            reference_inputs = [
                t.detach().double().requires_grad_(requires_grad) for t in inputs
            ]
            reference = fn(*reference_inputs)
            if not requires_grad:  # training keeps the matmul's output for the backward
                self.assertEqual(
                    len(template_kernels(code)), 1, dict(counters["inductor"])
                )
                self.assertEqual(kernel_names(code), [])
            # eager within one bf16 step of |gelu| + |r| (two half steps): the kernel
            # rounds once where eager rounds gelu's output too, and the matmul sums in
            # another order
            scale = (
                ((expected - eager_inputs[3]).abs() + eager_inputs[3].abs())
                .detach()
                .double()
            )
            steps = (out.detach().double() - expected.detach().double()).abs() / (
                scale * 2.0**-8
            )
            self.assertLessEqual(steps.max().item(), 2.0)
            # and no further from fp64 than eager (autocast rounds the inputs: eager's own
            # error is the yardstick)
            ref = reference.detach()
            error = (out.detach().double() - ref).norm() / ref.norm()
            eager_error = (expected.detach().double() - ref).norm() / ref.norm()
            self.assertLessEqual(error.item(), 1.02 * eager_error.item() + 1e-7)
            if requires_grad:
                grad = torch.randn_like(out)
                out.backward(grad)
                expected.backward(grad)
                # the backward runs 16-bit matmuls: their rounding (and summation order)
                # moves a gradient by a bf16 step relative to its size, not to each element
                grads64 = torch.autograd.grad(
                    reference, reference_inputs, grad.double()
                )
                for t, e, g64 in zip(inputs, eager_inputs, grads64):
                    difference = (
                        t.grad.double() - e.grad.double()
                    ).norm() / e.grad.double().norm()
                    self.assertLessEqual(difference.item(), 2.0**-6)
                    error = (t.grad.double() - g64).norm() / g64.norm()
                    eager_error = (e.grad.double() - g64).norm() / g64.norm()
                    self.assertLessEqual(error.item(), 1.1 * eager_error.item() + 1e-6)


instantiate_parametrized_tests(GeluAddEpilogueTests)

if __name__ == "__main__":
    run_tests()
