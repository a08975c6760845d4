# Owner(s): ["module: inductor"]
"""``config.tensorcore_mm_fallback``: a graph whose compile fails after it lowered
tensorcore_mm templates (a kernel the driver cannot load) is compiled again with the
stock lowering, with one warning a cause, instead of failing the compile.
"""

from __future__ import annotations

import contextlib
import logging
from unittest import mock

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.graph import GraphLowering
from torch._inductor.kernel import mm_tensorcore, mm_tensorcore_plan as planner
from torch._inductor.select_algorithm import TritonTemplateCaller
from torch._inductor.test_case import run_tests, TestCase
from torch.fx.experimental.proxy_tensor import make_fx
from torch.testing import FileCheck


try:
    from .test_tensorcore_mm import (
        BF16,
        comparable,
        gpu_randn,
        H200,
        linear,
        requires_cuda_sm80,
        template_kernels,
        TensorCoreMMTestCase,
    )
except ImportError:
    from test_tensorcore_mm import (
        BF16,
        comparable,
        gpu_randn,
        H200,
        linear,
        requires_cuda_sm80,
        template_kernels,
        TensorCoreMMTestCase,
    )

NO_BINARY = "Triton Error [CUDA]: CUDA_ERROR_NO_BINARY_FOR_GPU"


@contextlib.contextmanager
def no_template_binary():
    """Loading a template kernel fails as on a driver with no binary for it; yields the
    names of the kernels refused."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    make_launchers = CachingAutotuner._make_launchers
    refused = []

    def refuse(self):
        name = self.fn.__name__
        if name.startswith(("triton_tensorcore", "triton_tem_")):
            refused.append(name)
            raise RuntimeError(NO_BINARY)
        return make_launchers(self)

    with mock.patch.object(CachingAutotuner, "_make_launchers", refuse):
        yield refused


@contextlib.contextmanager
def no_template_module():
    """The output module of a graph with a template kernel fails to load, as with the
    driver above (get_code generates the module without loading it)."""
    codegen = GraphLowering.codegen
    failed = []

    def load(self, *args, **kwargs):
        wrapper, kernels = codegen(self, *args, **kwargs)
        if "triton_tem_" in wrapper.value:
            failed.append(wrapper.value)
            raise RuntimeError(NO_BINARY)
        return wrapper, kernels

    with mock.patch.object(GraphLowering, "codegen", load):
        yield failed


@requires_cuda_sm80
class TestTensorCoreMMCompileFailure(TensorCoreMMTestCase):
    def setUp(self):
        super().setUp()
        for patch in (
            mock.patch.object(planner, "device_model", return_value=H200),
            mock.patch.object(mm_tensorcore, "_failed_compiles", set()),
        ):
            patch.start()
            self.addCleanup(patch.stop)

    def test_lowering_compiles_nothing(self):
        # a single choice is compiled with the output module's kernels, in parallel
        with mock.patch.object(TritonTemplateCaller, "precompile") as precompile:
            code = self.cuda_code(
                linear(), *gpu_randn((16, 4096), (4096, 4096), (4096,))
            )
        self.assertTemplate(code)
        precompile.assert_not_called()

    def test_graph_failing_to_load_compiles_again_as_stock(self):
        inputs = gpu_randn((16, 4096), (4096, 4096), (4096,))
        with (
            no_template_module() as failed,
            self.assertLogs(mm_tensorcore.log, logging.WARNING) as logs,
        ):
            code = self.cuda_code(linear(), *inputs, strict=False)
            self.assertEqual(len(failed), 1)
            self.assertStock(code, "tensorcore_mm_fallback:compile_error")
            self.assertEqual(self.counts["tensorcore_mm_fallback:compile_error"], 1)
            # the same cause again, in another graph: stock again, no second warning
            self.cuda_code(
                linear(), *gpu_randn((16, 2048), (4096, 2048), (4096,)), strict=False
            )
            self.assertEqual(len(failed), 2)
        self.assertEqual(len(logs.records), 1)
        first = "1 template(s), the first addmm of (B, M, N, K) (1, 16, 4096, 4096)"
        FileCheck().check(first).check(NO_BINARY).run(logs.output[0])
        FileCheck().check_not("triton_tem_").check("extern_kernels.addmm(").run(
            "\n".join(code)
        )
        stock = self.cuda_code(linear(), *inputs, enabled=False)
        self.assertEqual(comparable(code), comparable(stock))

    def test_graph_failing_without_a_template_raises(self):
        # not the template's failure: the error, once
        calls = []

        def broken(self, *args, **kwargs):
            calls.append(1)
            raise RuntimeError("not a template")

        # compute-bound: stock's lowering
        inputs = gpu_randn((4096, 4096), (4096, 4096))
        with (
            mock.patch.object(GraphLowering, "codegen", broken),
            self.assertRaisesRegex(Exception, "not a template"),
        ):
            self.cuda_code(linear(), *inputs, strict=False)
        self.assertEqual(len(calls), 1)

    def test_off_the_failure_is_the_compiles(self):
        with (
            inductor_config.patch(tensorcore_mm_fallback=False),
            no_template_module(),
            self.assertRaisesRegex(Exception, "CUDA_ERROR_NO_BINARY_FOR_GPU"),
        ):
            self.cuda_code(linear(), *gpu_randn((16, 4096), (4096, 4096)), strict=False)

    def test_strict_fallbacks_raise(self):
        # TORCHINDUCTOR_STRICT_FALLBACKS, as in these tests: the error, not the retry
        with (
            no_template_module(),
            self.assertRaisesRegex(Exception, "CUDA_ERROR_NO_BINARY"),
        ):
            self.cuda_code(linear(), *gpu_randn((16, 4096), (4096, 4096)))

    def test_kernel_failing_to_load_runs_stock(self):
        # on the device: the driver refuses every template kernel's binary
        x, w, b = gpu_randn((16, 4096), (4096, 4096), (4096,))
        with (
            no_template_binary() as refused,
            self.assertLogs(mm_tensorcore.log, logging.WARNING) as logs,
            mock.patch.dict("os.environ", {"TORCHINDUCTOR_STRICT_FALLBACKS": "0"}),
        ):
            out, code = self.compile_and_run(linear(), x, w, b)
        self.assertTrue(refused)
        self.assertEqual(len(logs.records), 1)
        self.assertIn("CUDA_ERROR_NO_BINARY_FOR_GPU", logs.output[0])
        # the module whose template failed to load, then the stock one that ran
        self.assertEqual(len(code), 2)
        self.assertEqual(len(template_kernels(code[:1])), 1)
        self.assertStock(code[1:], "tensorcore_mm_fallback:compile_error")
        self.assertLikeEager(out, linear(), [x, w, b], F.linear, BF16)


class TestStockFallback(TestCase):
    """compile_with_stock_fallback alone: no GPU, no Inductor compile."""

    def setUp(self):
        super().setUp()
        counters.clear()

    def test_retry_compiles_the_graph_its_passes_had_not_rewritten(self):
        def fn(x, w, b):
            return torch.addmm(b, x, w.t()).relu()

        gm = make_fx(fn)(torch.randn(4, 8), torch.randn(3, 8), torch.randn(3))
        original = [(n.op, str(n.target)) for n in gm.graph.nodes]
        seen = []

        def compile_graph(g, example_inputs):
            seen.append(
                (
                    [(n.op, str(n.target)) for n in g.graph.nodes],
                    inductor_config.tensorcore_mm_autocast,
                )
            )
            # a pass rewrites the graph, a template is lowered, then ...
            if len(seen) == 1:
                relu = next(
                    n for n in g.graph.nodes if n.target is torch.ops.aten.relu.default
                )
                relu.replace_all_uses_with(relu.args[0])
                g.graph.erase_node(relu)
                mm_tensorcore._TEMPLATES.get().append(
                    "addmm of (B, M, N, K) (1, 4, 3, 8)"
                )
                raise RuntimeError(NO_BINARY)
            return "compiled"

        with (
            inductor_config.patch(tensorcore_mm_autocast=True),
            mock.patch.dict("os.environ", {"TORCHINDUCTOR_STRICT_FALLBACKS": "0"}),
            mock.patch.object(mm_tensorcore, "_failed_compiles", set()),
            self.assertLogs(mm_tensorcore.log, logging.WARNING),
        ):
            self.assertEqual(
                mm_tensorcore.compile_with_stock_fallback(compile_graph, gm, []),
                "compiled",
            )
        self.assertEqual(seen, [(original, True), (original, False)])
        self.assertEqual(
            counters["inductor"]["tensorcore_mm_fallback:compile_error"], 1
        )


if __name__ == "__main__":
    run_tests()
