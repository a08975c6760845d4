# Owner(s): ["module: inductor"]
"""``config.tensorcore_mm_autocast`` with a symbolic M: a kernel per range of M, each
planned for its range and picked at run time by Inductor's size-hint multi-kernel, with
no guard on M; where the hint lies above every range, one plan for M's whole range, or
stock.

As test_tensorcore_mm.py: the plans as plain Python for the H200's properties, the
generated CUDA code for the H200's plans and values, on any CUDA GPU with sm_80.
"""

from __future__ import annotations

import re

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._guards import TracingContext
from torch._inductor import config as inductor_config
from torch._inductor.codegen.multi_kernel import SizeHintMultiKernelCall
from torch._inductor.compile_fx import compile_fx
from torch._inductor.kernel import mm_tensorcore_plan as planner
from torch._inductor.test_case import run_tests, TestCase
from torch._inductor.utils import fresh_cache, get_code
from torch.testing import FileCheck
from torch.testing._internal.inductor_utils import GPU_TYPE


try:
    from .test_tensorcore_mm import (
        BF16,
        cast_kernels,
        constexpr,
        gpu_randn,
        H200,
        kernel_source,
        linear,
        linear_problem,
        no_caches,
        plans_as_a10g,
        plans_as_h200,
        requires_cuda_sm80,
        template_kernels,
        tensorcore,
        TensorCoreMMTestCase,
        tolerate_dynamic_outputs,
    )
except ImportError:
    from test_tensorcore_mm import (
        BF16,
        cast_kernels,
        constexpr,
        gpu_randn,
        H200,
        kernel_source,
        linear,
        linear_problem,
        no_caches,
        plans_as_a10g,
        plans_as_h200,
        requires_cuda_sm80,
        template_kernels,
        tensorcore,
        TensorCoreMMTestCase,
        tolerate_dynamic_outputs,
    )


class TestDynamicMPlan(TestCase):
    """The plan for a symbolic M, from shapes alone: no compile."""

    def test_dynamic_m_plan_holds_over_the_range(self):
        p = linear_problem(16, 4096, 4096)
        bounded = planner.plan_dynamic_m(p, H200, 64)
        self.assertEqual(bounded.path, planner.Path.TEMPLATE, bounded.describe())
        hinted = planner.plan(p, H200)
        # not M=16's tile
        self.assertGreater(bounded.config.BLOCK_M, hinted.config.BLOCK_M)
        unbounded = planner.plan_dynamic_m(p, H200, 8192)
        self.assertEqual(unbounded.path, planner.Path.STOCK, unbounded.describe())

    def test_dynamic_m_splits(self):
        # an unbounded M from 2: each split below which one config wins throughout
        p = linear_problem(16, 4096, 4096)
        splits = planner.dynamic_m_splits(p, H200, 2, 8192)
        self.assertEqual([s for s, _ in splits], [16, 64])  # not 256: tiles re-read x
        self.assertEqual(splits[0][1].config.num_warps, 2)  # a 16-row tile's
        for split, q in splits:
            self.assertEqual(q.path, planner.Path.TEMPLATE)
            self.assertLessEqual(q.config.BLOCK_M, split)
            at_split = planner.at_m(p, split)
            self.assertLess(
                planner.predict(at_split, H200, q.fused_a, q.fused_b, q.config),
                planner.predict(at_split, H200),
            )
        # below m_max
        self.assertEqual(planner.dynamic_m_splits(p, H200, 2, 64)[-1][0], 16)
        self.assertEqual(
            planner.dynamic_m_splits(
                p, H200, 2, 8192, planner.Force(path=planner.Path.STOCK)
            ),
            [],
        )
        self.assertEqual(
            [s for s, _ in planner.dynamic_m_splits(p, H200, 17, 8192)], [64]
        )

    def test_dynamic_m_kernels(self):
        # a decode hint: a kernel up to each split and above them, on the same operands;
        # x cast apart, so that the kernel of a prefill-sized M stays near stock
        p = linear_problem(4, 4096, 4096)
        kernels = planner.dynamic_m_kernels(p, H200, 2, 8192)
        self.assertEqual([bound for bound, _ in kernels], [16, 64, 256, 8192])
        self.assertEqual(kernels[0][1].config.num_warps, 2)  # a 16-row tile's
        self.assertEqual({(q.fused_a, q.fused_b) for _, q in kernels}, {(False, True)})
        self.assertEqual({q.path for _, q in kernels}, {planner.Path.TEMPLATE})
        blocks = [q.config.BLOCK_M for _, q in kernels]
        self.assertEqual(blocks, sorted(blocks))
        # the kernels share the call's arguments: a split-K workspace in all or none
        tall = planner.dynamic_m_kernels(linear_problem(4, 512, 2048), H200, 2, 8192)
        self.assertGreater(len(tall), 1)
        self.assertEqual(len({q.config.SPLIT_K > 1 for _, q in tall}), 1, tall)
        # a hint above every split: one plan for the range (plan_dynamic_m), no kernels
        self.assertEqual(
            planner.dynamic_m_kernels(linear_problem(512, 4096, 4096), H200, 2, 8192),
            [],
        )
        self.assertEqual(
            planner.dynamic_m_kernels(
                p, H200, 2, 8192, planner.Force(path=planner.Path.STOCK)
            ),
            [],
        )

    def test_dispatch_picks_each_ranges_kernel(self):
        # the size-hint multi-kernel runs the kernel of the hint nearest M in log2, over
        # the shapes of the inputs and the output, the first of equally near ones
        def picked(m, hints):
            shapes = ((4096,), (m, 4096), (4096, 4096), (m, 4096))
            dists = [
                SizeHintMultiKernelCall._dist_heuristic(
                    None, shapes, ((4096,), (h, 4096), (4096, 4096), (h, 4096))
                )
                for h in hints
            ]
            return dists.index(min(dists))

        for bounds in ([16, 64, 8192], [16, 64, 256, 8192], [64, 256, 8192], [16, 64]):
            hints = planner.dispatch_hints(bounds)
            self.assertEqual(hints, sorted(hints))
            for m in [*range(1, 1100), 8191, 8192, 20000]:
                want = next(
                    (i for i, b in enumerate(bounds) if m <= b), len(bounds) - 1
                )
                self.assertEqual(picked(m, hints), want, (bounds, hints, m))


@plans_as_h200
class TestTensorCoreMMDynamicCodegen(TensorCoreMMTestCase):
    """Generated code for the H200's plans (nothing run)."""

    def dynamic_m_code(self, m_max, m=16, enabled=True):
        """The code for x of ``m`` rows, M marked dynamic up to ``m_max`` (None: unbounded),
        and the guards on sizes the compile left in the shape environment."""
        guards = []

        def backend(gm, example_inputs):
            compiled = compile_fx(gm, example_inputs)
            shape_env = TracingContext.get().fake_mode.shape_env
            guards.extend(str(g.expr) for g in shape_env.guards)
            return compiled

        def fn(x, w, b):
            if m_max is None:
                torch._dynamo.mark_dynamic(x, 0)
            else:
                torch._dynamo.mark_dynamic(x, 0, min=2, max=m_max)
            return torch.compile(linear(), backend=backend)(x, w, b)

        torch._dynamo.reset()
        counters.clear()
        with tensorcore(enabled), no_caches(), tolerate_dynamic_outputs():
            code = get_code(fn, *gpu_randn((m, 4096), (4096, 4096), (4096,)))
        return [c for c in code if c], guards

    def assertDispatch(self, code, hints, casts=0):
        """One template kernel per hint, run through a size-hint multi-kernel keyed by
        the hint in M's place; ``casts``: x cast apart."""
        src = "\n".join(code)
        names = re.findall(r"\): (triton_tem_fused_\w+?_\d+),\n", src)
        self.assertEqual(len(names), len(hints), src)
        self.assertEqual(
            template_kernels(code), []
        )  # none run but through the dispatch
        self.assertEqual(len(cast_kernels(code)), casts, "cast kernels")
        self.assertEqual(self.counts["tensorcore_mm_template"], 1)
        self.assertEqual(self.counts["tensorcore_mm_dynamic_m_dispatch"], 1)
        for name in names:
            # M symbolic, N and K static: each kernel masks any M
            self.assertRegex(kernel_source(code, name), r"\n    M = ks0\n")
        check = FileCheck().check("= async_compile.size_hint_multi_kernel(")
        for hint, name in zip(hints, names):
            check.check(f"({hint}, 4096), (4096, 4096), ({hint}, 4096)): {name},")
        check.check(".run(").run(src)

    def test_dynamic_m_bounded(self):
        # M symbolic up to 64: a 16-row kernel up to 16, one for 17 to 64
        code, _ = self.dynamic_m_code(64)
        self.assertDispatch(code, planner.dispatch_hints([16, 64]))

    def test_dynamic_m_decode_bound(self):
        # M symbolic up to 16: the 16-row tile serves the whole range, one kernel and no
        # dispatch, so the compile builds no kernel for rows the model never runs
        code, _ = self.dynamic_m_code(16)
        self.assertEqual(self.counts["tensorcore_mm_dynamic_m_dispatch"], 0)
        self.assertEqual(self.counts["tensorcore_mm_template"], 1)
        (kernel,) = template_kernels(code)
        self.assertEqual(constexpr(kernel_source(code, kernel), "BLOCK_M"), 16)
        self.assertRegex(kernel_source(code, kernel), r"\n    M = ks0\n")
        self.assertNotIn("size_hint_multi_kernel", "\n".join(code))

    def test_dynamic_m_unbounded(self):
        # a decode batch: a kernel up to 16, 64, 256 and one for any larger M, x cast
        # apart so that a prefill-sized M's kernel stays near stock
        code, _ = self.dynamic_m_code(None)
        self.assertDispatch(code, planner.dispatch_hints([16, 64, 256, 8192]), casts=1)

    def test_dynamic_m_given_wide_range(self):
        # a range the user gave holds whole, however wide: no guard narrows it
        code, _ = self.dynamic_m_code(1 << 16)
        self.assertDispatch(code, planner.dispatch_hints([16, 64, 256, 8192]), casts=1)

    def test_dynamic_m_with_multi_kernel_hints(self):
        # a hint of config.multi_kernel_hints gets the kernel predicted fastest at it
        with inductor_config.patch(multi_kernel_hints=[48]):
            code, _ = self.dynamic_m_code(None)
        src = "\n".join(code)
        names = re.findall(r"\(48, 4096\)\): (triton_tem_fused_\w+?_\d+),\n", src)
        self.assertEqual(len(names), 1, src)
        self.assertEqual(constexpr(kernel_source(code, names[0]), "BLOCK_M"), 64)
        self.assertEqual(len(re.findall(r"\): triton_tem_fused_\w+?_\d+,\n", src)), 5)

    def test_symbolic_n_and_k_keep_stock(self):
        # tiles sized by the hints of N and K would run every other N and K, and a
        # size-hint multi-kernel would key each of them by M's hint
        def fn(x, w, b):
            for t in (x, w):
                torch._dynamo.mark_dynamic(t, 0)
                torch._dynamo.mark_dynamic(t, 1)
            torch._dynamo.mark_dynamic(b, 0)
            return torch.compile(linear())(x, w, b)

        torch._dynamo.reset()
        counters.clear()
        with tensorcore(), no_caches(), tolerate_dynamic_outputs():
            code = get_code(fn, *gpu_randn((4, 4096), (4096, 4096), (4096,)))
        self.assertStock([c for c in code if c], "tensorcore_mm_fallback:symbolic_nk")

    def test_no_guard_on_m(self):
        # the lowering leaves the guards on sizes as stock leaves them, bounded or not
        for m_max in (None, 64, 1 << 16):
            stock = self.dynamic_m_code(m_max, enabled=False)[1]
            code, guards = self.dynamic_m_code(m_max)
            self.assertEqual(self.counts["tensorcore_mm_dynamic_m_dispatch"], 1)
            self.assertEqual(sorted(guards), sorted(stock), m_max)

    def test_dynamic_m_prefill_hint_keeps_stock(self):
        # a prefill-sized hint: no range of kernels, and one plan for every M is stock
        code, guards = self.dynamic_m_code(None, m=512)
        self.assertStock(code, "tensorcore_mm_stock:reread")
        self.assertEqual(self.counts["tensorcore_mm_dynamic_m_dispatch"], 0)
        self.assertEqual(
            sorted(guards), sorted(self.dynamic_m_code(None, 512, False)[1])
        )


class TestTensorCoreMMDynamicGPU(TensorCoreMMTestCase):
    """Values on a CUDA GPU as M varies within its bound; for the A10G's plans, the
    compiles."""

    def check_values(self, compiled, fn, w, b, ms, **bounds):
        """``compiled(x, w, b)`` against eager for an x of each row count in ``ms``, its M
        marked dynamic (within ``bounds``: mark_dynamic's min and max)."""
        for m in ms:
            x = torch.randn(m, w.shape[1], device=GPU_TYPE)
            torch._dynamo.mark_dynamic(x, 0, **bounds)
            self.assertLikeEager(compiled(x, w, b), fn, [x, w, b], F.linear, BF16)

    @plans_as_a10g
    def test_dynamic_m_unbounded(self):
        # M across every range in one graph: each run's kernel picked at run time
        fn = linear()
        w, b = gpu_randn((4096, 4096), (4096,))
        torch._dynamo.reset()
        with tensorcore(True), no_caches():
            self.check_values(torch.compile(fn), fn, w, b, (4, 9, 16, 17, 300, 2))
        self.assertEqual(counters["stats"]["unique_graphs"], 1)
        self.assertEqual(self.counts["tensorcore_mm_template"], 1)

    @requires_cuda_sm80
    def test_dynamic_m_dispatch_from_the_cache(self):
        # a warm cache brings the kernels back with their dispatch: M past a range's end
        # runs in the same graph
        fn = linear()
        w, b = gpu_randn((4096, 4096), (4096,))
        with fresh_cache(), tensorcore(True):
            for _ in range(2):  # cold, then warm
                torch._dynamo.reset()
                counters.clear()
                self.check_values(torch.compile(fn), fn, w, b, (4, 300))
                self.assertEqual(counters["stats"]["unique_graphs"], 1)
        hits = (
            counters["inductor"]["fxgraph_cache_hit"]
            + counters["aot_autograd"]["autograd_cache_hit"]
        )
        self.assertGreaterEqual(hits, 1, dict(counters))

    @plans_as_a10g
    def test_dynamic_m(self):
        fn = linear()
        w, b = gpu_randn((512, 1024), (512,))
        torch._dynamo.reset()
        with tensorcore(True), no_caches():
            self.check_values(
                torch.compile(fn), fn, w, b, (16, 2, 33, 64), min=2, max=64
            )
        # one compile, symbolic M
        self.assertEqual(self.counts["tensorcore_mm_template"], 1)


if __name__ == "__main__":
    run_tests()
