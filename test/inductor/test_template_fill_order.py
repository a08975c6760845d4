# Owner(s): ["module: inductor"]
"""A template's layout constraint on a flexible input (``config.template_layout_fill_order``).

With ATEN among max-autotune's backends, a template that reads a buffer of flexible
layout records the strides it was rendered for in ``V.graph.buffer_layout_constraints``
instead of freezing the buffer; if finalize freezes the buffer otherwise, the scheduler
takes the extern choice. Finalize's ``decide_layout`` freezes a computed buffer in the
order its reads fill it, and pads it as outside any node's lowering, so a pointwise of a
transposed weight (``w.t().to(bf16)``, what autocast makes of ``x @ w.t()``) gets
transposed strides; with the flag, the constraint records those, and a Triton choice
that timed fastest is kept.

Timings are set by the test (the Triton choice fastest), so nothing is benchmarked and
the choice is the scheduler's alone; the codegen checks use ``get_code``, the values need
a GPU.
"""

from unittest import mock

import torch
from torch._inductor import config
from torch._inductor.select_algorithm import AlgorithmSelectorCache, ExternKernelCaller
from torch._inductor.test_case import run_tests, TestCase
from torch._inductor.utils import get_code, is_big_gpu, run_and_get_code
from torch.testing import FileCheck
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
)
from torch.testing._internal.inductor_utils import GPU_TYPE, HAS_GPU
from torch.testing._internal.triton_utils import requires_gpu


def transposed_cast(x, w):
    return x @ w.t().to(x.dtype)


def transposed_cast_bmm(x, w):
    return x @ w.transpose(1, 2).to(x.dtype)


def contiguous_cast(x, w):
    # a cast read in its own order: contiguous strides were right already
    return x @ w.to(x.dtype)


def triton_fastest(
    self, name, input_nodes, layout, input_gen_fns, inputs_key, choices, *args, **kwargs
):
    return {c: 2.0 if isinstance(c, ExternKernelCaller) else 1.0 for c in choices}


@instantiate_parametrized_tests
class TestTemplateFillOrder(TestCase):
    def setUp(self):
        super().setUp()
        if not is_big_gpu():
            self.skipTest("max-autotune's GEMM templates need a big GPU")
        patch = config.patch(
            {
                "max_autotune": True,
                "max_autotune_gemm_backends": "ATEN,TRITON",
                "template_layout_fill_order": True,
                # the cast stays a kernel of its own: no fusion is benchmarked
                "prologue_fusion": False,
                "shape_padding": False,
                "test_configs.max_mm_configs": 1,
            }
        )
        patch.__enter__()
        self.addCleanup(patch.__exit__, None, None, None)
        timings = mock.patch.object(
            AlgorithmSelectorCache, "do_autotuning", triton_fastest
        )
        timings.__enter__()
        self.addCleanup(timings.__exit__, None, None, None)

    def inputs(self, w_shape, M=16):
        *batch, N, K = w_shape
        x = torch.randn(*batch, M, K, device=GPU_TYPE, dtype=torch.bfloat16)
        w = torch.randn(*batch, N, K, device=GPU_TYPE) / K**0.5
        return x, w

    def compile(self, fn, *args):
        with self.assertNoLogs("torch._inductor.scheduler", "WARNING"):
            return get_code(torch.compile(fn), *args)[0]

    @parametrize("K,N", ((256, 512), (120, 250)))
    def test_transposed_cast_keeps_template(self, K, N):
        code = self.compile(transposed_cast, *self.inputs((N, K)))
        FileCheck().check("def triton_tem").check_not("extern_kernels.mm").run(code)

    @parametrize("K,N", ((256, 512), (120, 250)))
    def test_bmm(self, K, N):
        # 120 x 250 elements per batch: finalize pads the batch stride to 30016
        code = self.compile(transposed_cast_bmm, *self.inputs((4, N, K)))
        FileCheck().check("def triton_tem").check_not("extern_kernels.bmm").run(code)

    def test_contiguous_cast(self):
        x = torch.randn(16, 256, device=GPU_TYPE, dtype=torch.bfloat16)
        w = torch.randn(256, 512, device=GPU_TYPE) / 16
        code = self.compile(contiguous_cast, x, w)
        FileCheck().check("def triton_tem").check_not("extern_kernels.mm").run(code)

    @config.patch(template_layout_fill_order=False)
    def test_flag_off_takes_aten(self):
        with self.assertLogs("torch._inductor.scheduler", "WARNING") as logs:
            code = get_code(torch.compile(transposed_cast), *self.inputs((512, 256)))[0]
        self.assertIn("Layout conflict detected", logs.output[0])
        FileCheck().check("extern_kernels.mm").check_not("def triton_tem").run(code)

    @requires_gpu
    @parametrize(
        "fn", (transposed_cast, transposed_cast_bmm), name_fn=lambda f: f.__name__
    )
    def test_values(self, fn):
        x, w = self.inputs(
            (4, 250, 120) if fn is transposed_cast_bmm else (250, 120), 37
        )
        out, code = run_and_get_code(torch.compile(fn), x, w)
        FileCheck().check("def triton_tem").run(code[0])
        ref = fn(x.double(), w.to(x.dtype).double())
        self.assertEqual(out, ref.to(out.dtype), atol=1e-2, rtol=1e-2)


if __name__ == "__main__":
    if HAS_GPU and is_big_gpu():
        run_tests()
