"""tensorcore_mm on the Ampere and Ada parts upstream CI runs (A100, A10G, L4), no GPU
needed (project-only): each part's own plans, generated through the GPU-free harness from
its profile and compiled by Triton for its arch, fit its shared memory (99 KB a block on
A10G and L4; a launch fails above it), do not spill and run tensor-core instructions.
"""
from __future__ import annotations

import pathlib
import sys

import torch

from torch._inductor import config as inductor_config
from torch._inductor.test_case import run_tests
from torch.testing._internal.common_utils import instantiate_parametrized_tests, parametrize
from torch_overlay.testing import get_code, get_profile

# the exported test module, as pytest imports it (test/inductor has no __init__.py)
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "inductor"))
from test_tensorcore_mm import (  # noqa: E402
    TensorCoreMMTestCase, kernel_source, linear, template_kernels, tensorcore,
)
from test_tensorcore_mm_sm90 import compile_for, config_of  # noqa: E402

# decode (one 16-row tile, split K), a 64-row tile casting x too, two swapped row tiles
SHAPES = [(16, 4096, 4096), (64, 4096, 4096), (256, 4096, 4096)]


class TestTensorCoreMMSm8x(TensorCoreMMTestCase):
    @parametrize("gpu", ["a100", "a10g", "l4"])
    def test_template_fits_the_part(self, gpu):
        part = get_profile(gpu)
        for m, n, k in SHAPES:
            with tensorcore(True), inductor_config.patch(tensorcore_mm_force_path="template"):
                torch._dynamo.reset()
                code = get_code(lambda *t: torch.compile(linear())(*t), torch.randn(m, k),
                                torch.randn(n, k), torch.randn(n), gpu=gpu, force_fake=True)
            (name,) = template_kernels(code)
            src = kernel_source(code, name)
            self.assertIn(f"multi_processor_count={part.multi_processor_count}", src)
            report = compile_for(name, src, part.cc)
            case = (gpu, m, str(config_of(src)), report)
            self.assertLessEqual(report["shared"], part.shared_memory_per_block_optin, case)
            self.assertEqual(report["spill_bytes"], 0, case)
            self.assertTrue(report["mma"], case)


instantiate_parametrized_tests(TestTensorCoreMMSm8x)

if __name__ == "__main__":
    run_tests()
