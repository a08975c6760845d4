# Owner(s): ["module: inductor"]
"""Prologue fusion into the bmm template (``config.bmm_prologue_fusion``).

The mm template loads its operands through ``load_input``, so a pointwise producer of
an operand (a cast, a scale) fuses into it as a prologue; the bmm template loads them
with plain ``tl.load``, so the same producer stays a kernel of its own and its output
makes a round trip through memory. With the flag, the template heuristics ask the bmm
template (bmm and baddbmm) for its ``load_input`` loads; off, its code is as before.

Set up as test_max_autotune.py's TestPrologueFusion (one Triton config, no fusion
benchmarking), so the fusion decision is the scheduler's heuristics' alone; the codegen
checks use ``get_code`` (nothing runs), the values need a GPU.
"""

import torch
from torch._inductor import config
from torch._inductor.test_case import run_tests, TestCase
from torch._inductor.utils import get_code, is_big_gpu, run_and_get_code
from torch.testing import FileCheck
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
)
from torch.testing._internal.inductor_utils import (
    get_func_call,
    get_kernel_launch,
    GPU_TYPE,
    HAS_GPU,
)
from torch.testing._internal.triton_utils import requires_gpu


def shape(sizes):
    return "x".join(map(str, sizes))


def upcast_a(a, b):
    return torch.bmm(a.to(b.dtype), b)


def scaled_a(a, b):
    return torch.bmm(a * 2.0, b)


def upcast_baddbmm(a, b, c):
    return torch.baddbmm(c, a.to(b.dtype), b)


def weight_downcast(x, w):
    # a batch of fp32 weights read once each at decode (experts): cast by the template
    return torch.bmm(x, w.to(x.dtype))


@instantiate_parametrized_tests
class TestBmmPrologue(TestCase):
    def setUp(self):
        super().setUp()
        if not is_big_gpu():
            self.skipTest("max-autotune's GEMM templates need a big GPU")
        patch = config.patch(
            {
                "max_autotune": True,
                "prologue_fusion": True,
                "bmm_prologue_fusion": True,
                "benchmark_epilogue_fusion": False,
                "shape_padding": False,
                "max_autotune_gemm_backends": "TRITON",
                "test_configs.max_mm_configs": 1,
            }
        )
        patch.__enter__()
        self.addCleanup(patch.__exit__, None, None, None)

    def check_kernels(self, code, num_kernels):
        FileCheck().check(get_func_call()).check_count(
            get_kernel_launch(), num_kernels, exactly=True
        ).run(code)

    def check_prologue(self, code, cast):
        # the producer runs on each loaded tile in the template's k loop, before tl.dot
        FileCheck().check("def triton_tem").check("for k_idx").check(cast).check(
            "tl.dot"
        ).run(code)

    def inputs(self, B, M, K, N, a_dtype=torch.float16, b_dtype=torch.float32):
        a = torch.randn(B, M, K, device=GPU_TYPE, dtype=a_dtype)
        b = torch.randn(B, K, N, device=GPU_TYPE, dtype=b_dtype) / K**0.5
        return a, b

    @parametrize(
        "sizes", ((4, 64, 128, 256), (3, 37, 120, 250), (2, 1, 64, 96)), name_fn=shape
    )
    def test_upcast_fuses(self, sizes):
        code = get_code(torch.compile(upcast_a), *self.inputs(*sizes))[0]
        self.check_kernels(code, 1)
        self.check_prologue(code, ".to(tl.float32)")

    def test_scale_fuses(self):
        a, b = self.inputs(2, 32, 64, 128, torch.float32)
        code = get_code(torch.compile(scaled_a), a, b)[0]
        self.check_kernels(code, 1)
        self.check_prologue(code, "2.0")

    def test_baddbmm(self):
        a, b = self.inputs(3, 64, 128, 256)
        c = torch.randn(3, 64, 256, device=GPU_TYPE)
        code = get_code(torch.compile(upcast_baddbmm), a, b, c)[0]
        self.check_kernels(code, 1)
        self.check_prologue(code, ".to(tl.float32)")

    @config.patch(prologue_fusion_downcast=True)
    @parametrize("M", (1, 16, 128))
    def test_weight_downcast_at_decode(self, M):
        # prologue_fusion_downcast's rule holds for the bmm template as for mm
        x = torch.randn(4, M, 256, device=GPU_TYPE, dtype=torch.bfloat16)
        w = torch.randn(4, 256, 512, device=GPU_TYPE) / 16
        code = get_code(torch.compile(weight_downcast), x, w)[0]
        self.check_kernels(code, 1)
        self.check_prologue(code, ".to(tl.bfloat16)")

    @config.patch(prologue_fusion_downcast=True)
    def test_weight_downcast_refused_past_one_tile(self):
        x = torch.randn(4, 256, 256, device=GPU_TYPE, dtype=torch.bfloat16)
        w = torch.randn(4, 256, 512, device=GPU_TYPE) / 16
        code = get_code(torch.compile(weight_downcast), x, w)[0]
        self.check_kernels(code, 2)

    @config.patch(bmm_prologue_fusion=False)
    def test_flag_off_keeps_the_producer_apart(self):
        code = get_code(torch.compile(upcast_a), *self.inputs(4, 64, 128, 256))[0]
        self.check_kernels(code, 2)
        FileCheck().check("def triton_tem").check("A += BLOCK_K * stride_ak").run(code)

    @requires_gpu
    @parametrize("fn", (upcast_a, scaled_a), name_fn=lambda fn: fn.__name__)
    @parametrize("sizes", ((4, 64, 128, 256), (3, 37, 120, 250)), name_fn=shape)
    def test_values(self, fn, sizes):
        a, b = self.inputs(*sizes, torch.float16 if fn is upcast_a else torch.float32)
        out, code = run_and_get_code(torch.compile(fn), a, b)
        self.check_kernels(code[0], 1)
        ref = fn(a.double(), b.double())
        self.assertEqual(out, ref.to(out.dtype), atol=1e-2, rtol=1e-2)

    @requires_gpu
    @config.patch(prologue_fusion_downcast=True)
    def test_values_weight_downcast(self):
        x = torch.randn(4, 16, 120, device=GPU_TYPE, dtype=torch.bfloat16)
        w = torch.randn(4, 120, 250, device=GPU_TYPE) / 11
        out, code = run_and_get_code(torch.compile(weight_downcast), x, w)
        self.check_kernels(code[0], 1)
        # the kernel rounds the fp32 weight to bf16 as the cast kernel does
        ref = torch.bmm(x.double(), w.to(x.dtype).double())
        self.assertEqual(out, ref.to(out.dtype), atol=0.05, rtol=0.05)


if __name__ == "__main__":
    if HAS_GPU and is_big_gpu():
        run_tests()
