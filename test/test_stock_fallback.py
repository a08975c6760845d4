"""The tensorcore_mm safety net (torch_overlay/_fallback.py, ``config.tensorcore_mm_fallback``),
project-only: a graph whose compile fails after it lowered tensorcore_mm kernels (a
kernel the driver cannot load) is compiled again with the stock lowering, with one
warning a cause, instead of failing the compile. Not in the exported series: upstream's
select_algorithm drops failing choices. Faults are injected: the output module or the
template kernels fail to load.
"""
from __future__ import annotations

import contextlib
import logging
import pathlib
import sys
from unittest import mock

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.graph import GraphLowering
from torch._inductor.kernel import mm_tensorcore_plan as planner
from torch._inductor.select_algorithm import TritonTemplateCaller
from torch._inductor.test_case import run_tests, TestCase
from torch.fx.experimental.proxy_tensor import make_fx
from torch.testing import FileCheck

from torch_overlay import _fallback

# the exported test modules, as pytest imports them (test/inductor has no __init__.py)
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "inductor"))
from test_tensorcore_mm import (  # noqa: E402
    BF16, H200, TensorCoreMMTestCase, comparable, gpu_randn, linear, requires_cuda_sm80,
    template_kernels,
)
from test_tensorcore_mm_autotune import NO_BINARY, no_template_binary  # noqa: E402


@contextlib.contextmanager
def no_template_module():
    """The output module of a graph with a template kernel fails to load, as on a driver
    without the binary (get_code generates the module without loading it)."""
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
            mock.patch.object(_fallback, "_failed_compiles", set()),
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
            self.assertLogs(_fallback.log, logging.WARNING) as logs,
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
        FileCheck().check("a graph that lowered 1 tensorcore_mm_template").check(
            NO_BINARY).run(logs.output[0])
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
            self.assertLogs(_fallback.log, logging.WARNING) as logs,
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
        stack = contextlib.ExitStack()
        self.addCleanup(stack.close)
        stack.enter_context(inductor_config.patch(tensorcore_mm_autocast=True))
        stack.enter_context(
            mock.patch.dict("os.environ", {"TORCHINDUCTOR_STRICT_FALLBACKS": "0"}))
        stack.enter_context(mock.patch.object(_fallback, "_failed_compiles", set()))

    @staticmethod
    def graph():
        def fn(x, w, b):
            return torch.addmm(b, x, w.t()).relu()

        return make_fx(fn)(torch.randn(4, 8), torch.randn(3, 8), torch.randn(3))

    def failing_once(self, counted, seen):
        """A compile whose first call rewrites the graph as a pass would, counts
        ``counted`` as the lowering would, then fails to load."""

        def compile_graph(g, example_inputs):
            seen.append(([(n.op, str(n.target)) for n in g.graph.nodes],
                         inductor_config.tensorcore_mm_autocast))
            if len(seen) > 1:
                return "compiled"
            relu = next(n for n in g.graph.nodes if n.target is torch.ops.aten.relu.default)
            relu.replace_all_uses_with(relu.args[0])
            g.graph.erase_node(relu)
            counters["inductor"].update(counted)
            raise RuntimeError(NO_BINARY)

        return compile_graph

    def test_retry_compiles_the_graph_its_passes_had_not_rewritten(self):
        gm = self.graph()
        original = [(n.op, str(n.target)) for n in gm.graph.nodes]
        seen = []
        compile_graph = self.failing_once(
            {"tensorcore_mm_template": 1, "tensorcore_mm_fallback:not_autocast": 2}, seen)
        with self.assertLogs(_fallback.log, logging.WARNING) as logs:
            self.assertEqual(_fallback.compile_with_stock_fallback(compile_graph, gm, []),
                             "compiled")
        self.assertEqual(seen, [(original, True), (original, False)])
        # the retry's counters: the failed compile's are dropped, the failure counted
        self.assertEqual(dict(counters["inductor"]),
                         {"tensorcore_mm_fallback:compile_error": 1})
        FileCheck().check("a graph that lowered 1 tensorcore_mm_template").check(
            NO_BINARY).run(logs.output[0])

    def test_one_warning_a_cause(self):
        # a driver without the binary fails every graph alike: the later ones at debug
        for counted, level in (({"tensorcore_mm_gemv": 1}, logging.WARNING),
                               ({"tensorcore_mm_template": 2}, logging.DEBUG)):
            with self.assertLogs(_fallback.log, logging.DEBUG) as logs:
                _fallback.compile_with_stock_fallback(
                    self.failing_once(counted, []), self.graph(), [])
            self.assertEqual([r.levelno for r in logs.records], [level])
        self.assertEqual(counters["inductor"]["tensorcore_mm_fallback:compile_error"], 2)

    def test_failure_without_a_lowered_kernel_raises(self):
        # the stock lowering's own failure: the error, no retry
        seen = []
        with self.assertRaisesRegex(RuntimeError, "NO_BINARY"):
            _fallback.compile_with_stock_fallback(
                self.failing_once({"tensorcore_mm_fallback:cost_model": 1}, seen),
                self.graph(), [])
        self.assertEqual(len(seen), 1)

    def test_strict_fallbacks_raise(self):
        seen = []
        with mock.patch.dict("os.environ", {"TORCHINDUCTOR_STRICT_FALLBACKS": "1"}), \
                self.assertRaisesRegex(RuntimeError, "NO_BINARY"):
            _fallback.compile_with_stock_fallback(
                self.failing_once({"tensorcore_mm_template": 1}, seen), self.graph(), [])
        self.assertEqual(len(seen), 1)

    def test_graph_without_a_matmul_compiles_as_it_is(self):
        gm = make_fx(lambda x: x.relu())(torch.randn(4))
        with mock.patch.object(torch.fx.Graph, "graph_copy") as copy:
            self.assertEqual(
                _fallback.compile_with_stock_fallback(lambda g, inputs: "compiled", gm, []),
                "compiled")
        copy.assert_not_called()


if __name__ == "__main__":
    run_tests()
