# Owner(s): ["module: inductor"]
"""The GPU-free CUDA codegen harness: profiles, refusals, parity with a real GPU."""
import unittest

import torch
import torch.nn.functional as F
from torch._inductor.test_case import run_tests, TestCase
from torch.testing import FileCheck
from torch.testing._internal.common_utils import instantiate_parametrized_tests, parametrize

from torch_overlay.testing import GPU_PROFILES, get_code, get_profile, has_real_gpu
from torch_overlay.testing.fake_cuda import index_as_aten
from torch_overlay.testing.golden import normalize

HAS_CUDA = torch.cuda.is_available()


def gelu_add(x, r):
    return F.gelu(x) + r


def autocast_linear(x, w, b):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return F.linear(x, w, b)


@instantiate_parametrized_tests
class TestHarness(TestCase):
    @parametrize("gpu", sorted(GPU_PROFILES))
    def test_profile_reaches_codegen(self, gpu):
        profile = get_profile(gpu)
        (code,) = get_code(torch.compile(gelu_add), torch.randn(33, 65), torch.randn(33, 65),
                           gpu=gpu, force_fake=True)
        FileCheck().check("empty_strided_cuda").check(
            f"multi_processor_count={profile.multi_processor_count}, cc={profile.cc}, "
            f"major={profile.major}").check("@triton.jit").check(
            "def triton_poi_fused_add_gelu_0").check("libdevice.erf").run(code)

    @parametrize("gpu", sorted(GPU_PROFILES))
    def test_autocast_linear_lowers_to_casts_and_cublas(self, gpu):
        (code,) = get_code(torch.compile(autocast_linear), torch.randn(16, 64),
                           torch.randn(32, 64), torch.randn(32), gpu=gpu, force_fake=True)
        # stock: one cast kernel per fp32 operand, then cuBLAS on the bf16 copies
        FileCheck().check_count("triton_poi_fused__to_copy_", 3, exactly=False).check(
            "extern_kernels.addmm").run(code)
        self.assertIn("'*bf16'", code)

    def test_strides_and_dtype_are_kept(self):
        x = torch.randn(64, 32).t()  # column-major
        (code,) = get_code(torch.compile(lambda t: t.to(torch.float16) * 2), x, force_fake=True)
        # torch 2.14 appends the assert's kind: assert_size_stride(..., (1, 32), 'input')
        FileCheck().check("'*fp16'").check("assert_size_stride(arg0_1, (32, 64), (1, 32)").run(code)

    def test_dynamic_shapes(self):
        # dynamic=True and mark_dynamic: sizes symbolic in the kernel
        (code,) = get_code(torch.compile(gelu_add, dynamic=True), torch.randn(33, 65),
                           torch.randn(33, 65), force_fake=True)
        FileCheck().check("def triton_poi_fused_add_gelu_0").check("def call(").run(code)
        self.assertRegex(code, r"s\d+ = arg\d+_1")

        def marked(x, r):
            torch._dynamo.mark_dynamic(x, 0)
            torch._dynamo.mark_dynamic(r, 0)
            return torch.compile(gelu_add)(x, r)

        torch._dynamo.reset()
        (code,) = get_code(marked, torch.randn(33, 65), torch.randn(33, 65), force_fake=True)
        FileCheck().check("def triton_poi_fused_add_gelu_0").check("def call(").run(code)
        self.assertRegex(code, r"s\d+ = arg\d+_1")

    def test_requires_grad_is_refused_clearly(self):
        w = torch.randn(8, 8, requires_grad=True)
        with self.assertRaisesRegex(NotImplementedError, "backward codegen needs a real GPU"):
            get_code(torch.compile(lambda a: a * 2), w, force_fake=True)

    def test_benchmarking_on_the_faked_gpu_is_refused_clearly(self):
        # shape padding of odd-sized matmuls times both variants on the device
        with self.assertRaisesRegex(Exception, "shape_padding=False"):
            get_code(torch.compile(autocast_linear), torch.randn(17, 33), torch.randn(65, 33),
                     torch.randn(65), force_fake=True)
        with torch._inductor.config.patch(shape_padding=False):
            (code,) = get_code(torch.compile(autocast_linear), torch.randn(17, 33),
                               torch.randn(65, 33), torch.randn(65), force_fake=True)
        self.assertIn("extern_kernels.addmm", code)

    def test_unknown_profile(self):
        with self.assertRaisesRegex(ValueError,
                                    "unknown GPU profile 'v100'.*a100, a10g, h100, h200, l4"):
            get_code(torch.compile(gelu_add), torch.randn(4), torch.randn(4), gpu="v100")

    def test_fake_device_does_not_leak(self):
        get_code(torch.compile(gelu_add), torch.randn(4), torch.randn(4), force_fake=True)
        self.assertEqual(torch.cuda.is_available(), HAS_CUDA)
        if not HAS_CUDA:
            with self.assertRaises((RuntimeError, AssertionError)):
                torch.empty(1, device="cuda")

    def test_index_as_aten_matches_indexing(self):
        """fake_cuda_tensor_methods' indexing of a CUDA tensor, checked on the CPU."""
        t = torch.randn(3, 4, 5, 6)
        idx = torch.tensor([2, 0])
        for index in [(slice(None), slice(None, 1)), (Ellipsis, slice(None, 3)), 0, (0, 1),
                      (None, Ellipsis, None), (slice(1, None), None, 2), (Ellipsis, 1), idx,
                      (slice(None), idx, slice(1, 3)), (1, slice(None), idx),
                      (slice(None, None, 2), -1), (slice(-2, None),), (idx, slice(None), idx)]:
            with self.subTest(index=index):
                self.assertEqual(index_as_aten(t, index), t[index], atol=0, rtol=0)

    @unittest.skipUnless(HAS_CUDA and has_real_gpu("h200"), "needs a real H200")
    def test_h200_profile_matches_device(self):
        props = torch.cuda.get_device_properties()
        profile = get_profile("h200")
        for field in ("name", "major", "minor", "multi_processor_count", "L2_cache_size",
                      "regs_per_multiprocessor", "max_threads_per_multi_processor",
                      "max_threads_per_block", "warp_size", "shared_memory_per_block",
                      "shared_memory_per_block_optin", "shared_memory_per_multiprocessor"):
            self.assertEqual(getattr(profile, field), getattr(props, field), field)

    @unittest.skipUnless(HAS_CUDA and has_real_gpu("h200"), "needs a real H200")
    def test_fake_and_real_codegen_are_identical(self):
        for fn, args in (
            (gelu_add, (torch.randn(1024, 1024), torch.randn(1024, 1024))),
            (autocast_linear, (torch.randn(16, 64), torch.randn(32, 64), torch.randn(32))),
        ):
            real = get_code(torch.compile(fn), *args)
            fake = get_code(torch.compile(fn), *args, force_fake=True)
            # byte-identical up to what the goldens normalise (backend_hash, paths)
            self.assertEqual(normalize(real), normalize(fake))


if __name__ == "__main__":
    run_tests()
