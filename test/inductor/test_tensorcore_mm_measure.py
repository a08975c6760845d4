# Owner(s): ["module: inductor"]
"""``config.tensorcore_mm_measure``: a plan the cost model is not sure of is timed on the
device, the template's kernel against the 16-bit GEMM plus the casts it saves, once per
shape and cached on disk. Off by default: default mode times nothing.

The plans as plain Python for the H200's properties; the choice of the H200's plans with
mocked timings on any CUDA GPU with sm_80.
"""

from __future__ import annotations

import dataclasses
from unittest import mock

from torch._inductor import config as inductor_config
from torch._inductor.kernel import mm_tensorcore, mm_tensorcore_plan as planner
from torch._inductor.runtime.benchmarking import benchmarker
from torch._inductor.test_case import run_tests, TestCase
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
)


try:
    from .test_tensorcore_mm import (
        BF16,
        comparable,
        DEVICE_SPECS,
        gpu_randn,
        H200,
        linear,
        linear_problem,
        plans_as_h200,
        TensorCoreMMTestCase,
    )
except ImportError:
    from test_tensorcore_mm import (
        BF16,
        comparable,
        DEVICE_SPECS,
        gpu_randn,
        H200,
        linear,
        linear_problem,
        plans_as_h200,
        TensorCoreMMTestCase,
    )


class TestMeasuredPlan(TestCase):
    def test_uncertain_wins_are_measured(self):
        # decode streams the fp32 weight once: a large predicted win is taken as is
        decode = planner.plan(linear_problem(16, 4096, 4096), H200)
        self.assertEqual(
            (decode.path, decode.measure),
            (planner.Path.TEMPLATE, False),
            decode.describe(),
        )
        # a smaller predicted win, the weight still streamed once: timed on the device
        for mnk in [(64, 14336, 4096), (256, 4096, 4096)]:
            plan = planner.plan(linear_problem(*mnk), H200)
            self.assertTrue(plan.measure, plan.describe())
            self.assertIsNotNone(plan.config)
        # tiles that re-read the operands: stock, whatever is predicted, nothing timed
        for mnk in [(1024, 1024, 1024), (1576, 4096, 1024)]:
            plan = planner.plan(linear_problem(*mnk), H200)
            self.assertEqual(
                (plan.path, plan.reason, plan.measure),
                (planner.Path.STOCK, planner.REREAD, False),
                plan.describe(),
            )
        # predicted slower: stock, nothing to time
        big = planner.plan(linear_problem(4096, 4096, 4096), H200)
        self.assertEqual(
            (big.path, big.measure), (planner.Path.STOCK, False), big.describe()
        )

    def test_every_win_is_measured_off_the_calibrated_architecture(self):
        # the rates were measured on sm_90: decode's large predicted win is taken as is
        # there, and timed first on the same part of a newer architecture
        h100 = DEVICE_SPECS["h100"]
        for cc, measure in ((90, False), (100, True)):
            dev = planner.device_model(dataclasses.replace(h100, cc=cc))
            decode = planner.plan(linear_problem(16, 4096, 4096), dev)
            self.assertEqual(
                (decode.path, decode.measure),
                (planner.Path.TEMPLATE, measure),
                decode.describe(),
            )
            # where stock is predicted faster nothing is timed, on any architecture
            big = planner.plan(linear_problem(4096, 4096, 4096), dev)
            self.assertEqual(
                (big.path, big.measure), (planner.Path.STOCK, False), big.describe()
            )


class TestTensorCoreMMDefaultMode(TensorCoreMMTestCase):
    @plans_as_h200
    def test_default_mode_times_nothing(self):
        # a plan the model is not sure of goes by the prediction: nothing is timed on the
        # device, by this lowering or by autotuning, unless tensorcore_mm_measure asks
        self.assertTrue(planner.plan(linear_problem(256, 4096, 4096), H200).measure)
        timed = []

        def timings(*args):
            timed.append(args)
            return 1e-6, 50e-6

        def benchmark(*args, **kwargs):
            timed.append(args)
            return 1.0

        inputs = gpu_randn((256, 4096), (4096, 4096), (4096,))
        with (
            mock.patch.object(mm_tensorcore, "_timings", timings),
            mock.patch.object(benchmarker, "benchmark_gpu", benchmark),
            mock.patch.object(benchmarker, "benchmark", benchmark),
            mock.patch("torch.cuda.is_initialized", return_value=True),
        ):
            self.assertTemplate(self.cuda_code(linear(), *inputs), casts=1)
            self.assertEqual(timed, [])
            with inductor_config.patch(tensorcore_mm_measure=True):
                self.cuda_code(linear(), *inputs)
            self.assertEqual(len(timed), 1)


class TestTensorCoreMMMeasured(TensorCoreMMTestCase):
    config = {"tensorcore_mm_measure": True}

    @plans_as_h200
    @parametrize("winner", ["stock", "template"])
    def test_measured_choice(self, winner):
        # an uncertain plan times the template's kernel against the 16-bit GEMM plus the
        # casts it saves; stock's win gives stock's own lowering, the template's the template
        timed = []

        def timings(choice, kernel_inputs, layout, op, dtype):
            timed.append((op, dtype))
            # stock's win by more than any GPU's casts could save (H100: 2x was not)
            gemm = 20e-6
            return (gemm / 2 if winner == "template" else gemm * 10), gemm

        inputs = gpu_randn((256, 4096), (4096, 4096), (4096,))
        with (
            mock.patch.object(mm_tensorcore, "_timings", timings),
            mock.patch("torch.cuda.is_initialized", return_value=True),
        ):
            code = self.cuda_code(linear(), *inputs)
        self.assertEqual(timed, [("addmm", BF16)])
        if winner == "stock":
            self.assertStock(code, "tensorcore_mm_stock:measured")
            stock = self.cuda_code(linear(), *inputs, enabled=False)
            self.assertEqual(comparable(code), comparable(stock))
        else:
            self.assertTemplate(code, casts=1)  # x cast apart: the tiles re-read it
        with inductor_config.patch(tensorcore_mm_measure=False):
            self.cuda_code(linear(), *inputs)
        # the prediction's choice
        self.assertEqual(self.counts["tensorcore_mm_template"], 1)
        self.assertEqual(len(timed), 1)

    @plans_as_h200
    def test_measured_timings_are_cached(self):
        # the second compile of the same shape times nothing
        measured = []

        def measure(*args):
            measured.append(args[3])  # the input layouts timed
            return 1e-6, 50e-6

        inputs = gpu_randn((256, 4096), (4096, 4096), (4096,))
        with (
            mock.patch.object(mm_tensorcore, "_measure", measure),
            mock.patch("torch.cuda.is_initialized", return_value=True),
        ):
            for _ in range(2):
                self.assertTemplate(self.cuda_code(linear(), *inputs), casts=1)
        self.assertEqual(len(measured), 1)
        # bias (expanded), x, and F.linear's transposed weight
        self.assertEqual(
            measured[0],
            [
                ([256, 4096], [0, 1]),
                ([256, 4096], [4096, 1]),
                ([4096, 4096], [1, 4096]),
            ],
        )


instantiate_parametrized_tests(TestMeasuredPlan)
instantiate_parametrized_tests(TestTensorCoreMMMeasured)

if __name__ == "__main__":
    run_tests()
