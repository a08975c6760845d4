"""tensorcore_mm and an empty matmul (project-only): no rows, as an MoE expert that got no
tokens, or no reduction; the stock lowering, chosen without an error."""
import logging

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.test_case import run_tests, TestCase

from torch_overlay.testing import get_code


def linear(x, w, b):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return F.linear(x, w, b)


class TestEmptyMatmul(TestCase):
    def code_and_counts(self, m, k):
        counters.clear()
        torch._dynamo.reset()
        with inductor_config.patch(autocast_matmul_meta=True, tensorcore_mm_autocast=True):
            # no warning: an internal error would log one
            with self.assertNoLogs("torch._inductor.kernel.mm_tensorcore", logging.WARNING):
                code = get_code(torch.compile(linear), torch.randn(m, k), torch.randn(32, k),
                                torch.randn(32), force_fake=True)
        return "\n".join(code), dict(counters["inductor"])

    def test_no_rows_is_stock(self):
        code, counts = self.code_and_counts(0, 64)
        self.assertEqual(counts.get("tensorcore_mm_stock:empty"), 1, counts)
        self.assertFalse([k for k in counts if "internal_error" in k or "template" in k], counts)
        self.assertNotIn("triton_tem_", code)

    def test_no_reduction_is_stock(self):
        _, counts = self.code_and_counts(4, 0)
        self.assertFalse([k for k in counts if "internal_error" in k or "template" in k], counts)

    def test_rows_take_the_template(self):
        # the same matmul with rows: the template (the guard is the sizes', nothing else)
        code, counts = self.code_and_counts(16, 64)
        self.assertNotIn("tensorcore_mm_stock:empty", counts)
        self.assertIn("triton_tem_", code)


if __name__ == "__main__":
    run_tests()
