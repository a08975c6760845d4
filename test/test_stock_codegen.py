# Owner(s): ["module: inductor"]
"""Goldens of stock Inductor, all overlays off: the baseline every feature diffs against."""
import torch
import torch.nn.functional as F
from torch._inductor.test_case import run_tests, TestCase

from torch_overlay.testing import get_code
from torch_overlay.testing.golden import normalize


def gelu_add(x, r):
    return F.gelu(x) + r


def autocast_linear(x, w, b):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return F.linear(x, w, b)


class TestStockCodegen(TestCase):
    def test_gelu_add(self):
        code = get_code(torch.compile(gelu_add), torch.randn(1024, 1024), torch.randn(1024, 1024))
        self.assertExpected(normalize(code))

    def test_autocast_linear(self):
        # decode-sized F.linear, fp32 x and w under bf16 autocast
        code = get_code(torch.compile(autocast_linear), torch.randn(16, 4096),
                        torch.randn(4096, 4096), torch.randn(4096))
        self.assertExpected(normalize(code))


if __name__ == "__main__":
    run_tests()
