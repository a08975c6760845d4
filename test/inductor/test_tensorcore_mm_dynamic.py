# Owner(s): ["module: inductor"]
"""``config.tensorcore_mm_autocast`` with a symbolic M: one kernel for every M up to the
bound ``mark_dynamic`` gives, with a config planned for the whole range, or stock; an
unbounded M split by a guard, a decode-shaped kernel up to the split.

As test_tensorcore_mm.py: the plans as plain Python for the H200's properties, the
generated CUDA code for the H200's plans and values, on any CUDA GPU with sm_80.
"""

from __future__ import annotations

import re

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._guards import TracingContext
from torch._inductor.compile_fx import compile_fx
from torch._inductor.kernel import mm_tensorcore, mm_tensorcore_plan as planner
from torch._inductor.test_case import run_tests, TestCase
from torch._inductor.utils import fresh_cache, get_code
from torch.testing._internal.inductor_utils import GPU_TYPE


try:
    from .test_tensorcore_mm import (
        BF16,
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
        self.assertEqual(bounded.path, "template", bounded.describe())
        hinted = planner.plan(p, H200)
        # not M=16's tile
        self.assertGreater(bounded.config.BLOCK_M, hinted.config.BLOCK_M)
        unbounded = planner.plan_dynamic_m(p, H200, 8192)
        self.assertEqual(unbounded.path, "stock", unbounded.describe())

    def test_dynamic_m_splits(self):
        # an unbounded M from 2: each split below which one config wins throughout
        p = linear_problem(16, 4096, 4096)
        splits = planner.dynamic_m_splits(p, H200, 2, 8192)
        self.assertEqual([s for s, _ in splits], [16, 64])  # not 256: tiles re-read x
        self.assertEqual(splits[0][1].config.num_warps, 2)  # a 16-row tile's
        for split, q in splits:
            self.assertEqual(q.path, "template")
            self.assertLessEqual(q.config.BLOCK_M, split)
            at_split = planner.at_m(p, split)
            self.assertLess(
                planner.predict(at_split, H200, q.fused_a, q.fused_b, q.config),
                planner.predict(at_split, H200),
            )
        # below m_max
        self.assertEqual(planner.dynamic_m_splits(p, H200, 2, 64)[-1][0], 16)
        self.assertEqual(
            planner.dynamic_m_splits(p, H200, 2, 8192, planner.Force(path="stock")), []
        )
        self.assertEqual(
            [s for s, _ in planner.dynamic_m_splits(p, H200, 17, 8192)], [64]
        )


@plans_as_h200
class TestTensorCoreMMDynamicCodegen(TensorCoreMMTestCase):
    """Generated code for the H200's plans (nothing run)."""

    def dynamic_m_code(self, m_max, m=16):
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
        with tensorcore(True), no_caches(), tolerate_dynamic_outputs():
            code = get_code(fn, *gpu_randn((m, 4096), (4096, 4096), (4096,)))
        return [c for c in code if c], guards

    def test_dynamic_m_bounded(self):
        # M symbolic up to 64: one kernel, with a config chosen for the whole range, and
        # no guard within the range the user gave
        code, guards = self.dynamic_m_code(64)
        self.assertTemplate(code)
        src = kernel_source(code, template_kernels(code)[0])
        self.assertRegex(src, r"\n    M = ks0\n")  # M symbolic, N and K static
        self.assertRegex(src, r"\n    N = 4096\n")
        self.assertEqual(self.counts["tensorcore_mm_dynamic_m_split"], 0)
        self.assertFalse([g for g in guards if "<= 16" in g], guards)

    def test_dynamic_m_given_wide_range_keeps_stock(self):
        # a range the user gave, however wide: no guard may narrow it (Dynamo would fail
        # the compile), so one plan for M up to the ceiling
        code, guards = self.dynamic_m_code(1 << 16)
        self.assertStock(code, "tensorcore_mm_stock:dynamic_m_range")
        self.assertEqual(self.counts["tensorcore_mm_dynamic_m_split"], 0)

    def test_dynamic_m_unbounded_splits(self):
        # a decode batch: a kernel for M up to 16, and a guard that keeps it there
        code, guards = self.dynamic_m_code(None)
        self.assertTemplate(code)
        self.assertEqual(self.counts["tensorcore_mm_dynamic_m_split"], 1)
        self.assertIn("tensorcore_mm_dynamic_m_split", self.counts)
        self.assertTrue([g for g in guards if re.fullmatch(r"s\d+ <= 16", g)], guards)

    def test_dynamic_m_unbounded_above_the_splits_keeps_stock(self):
        # a prefill-sized hint: stock for M above the largest split, which a guard keeps
        # out of this graph (smaller M compile their own, with the template)
        code, guards = self.dynamic_m_code(None, m=512)
        self.assertStock(code, "tensorcore_mm_stock:reread")
        self.assertEqual(self.counts["tensorcore_mm_dynamic_m_split"], 0)
        self.assertTrue(
            [g for g in guards if re.fullmatch(r"64 < s\d+|s\d+ > 64", g)], guards
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
        # M crosses the split: a second graph for the larger M; values right on both
        fn = linear()
        w, b = gpu_randn((4096, 4096), (4096,))
        torch._dynamo.reset()
        with tensorcore(True), no_caches():
            self.check_values(torch.compile(fn), fn, w, b, (4, 9, 16, 300, 2))
        # M <= 16 once (the template), M > 16 once; M = 2 reuses the first
        self.assertEqual(self.counts["tensorcore_mm_dynamic_m_split"], 1)
        self.assertEqual(self.counts["tensorcore_mm_template"], 1)

    @requires_cuda_sm80
    def test_dynamic_m_split_guard_from_the_cache(self):
        # a warm cache brings the guard back with the kernel: M past the split still
        # compiles a graph of its own
        fn = linear()
        w, b = gpu_randn((4096, 4096), (4096,))
        dev = mm_tensorcore.current_device_model(torch.device(GPU_TYPE))
        splits = planner.dynamic_m_splits(linear_problem(4, 4096, 4096), dev, 2, 8192)
        with fresh_cache(), tensorcore(True):
            for _ in range(2):  # cold, then warm
                torch._dynamo.reset()
                counters.clear()
                self.check_values(torch.compile(fn), fn, w, b, (4, 300))
                self.assertEqual(counters["stats"]["unique_graphs"], 2 if splits else 1)
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
