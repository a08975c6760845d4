# Owner(s): ["module: inductor"]
"""Autocast's cast cache for compiled graphs (``config.autocast_param_cache``): inside an
ambient autocast region a compiled graph keeps the casts of parameters between calls, as
eager autocast does, drops them when the outermost region exits, and never serves a
parameter updated in place. Values and gradients against eager and an fp64 reference.
"""

from __future__ import annotations

import gc
import threading
from unittest import mock

import torch
from torch._dynamo.utils import counters
from torch._inductor import config
from torch._inductor.fx_passes import param_cast_cache
from torch._inductor.graph import GraphLowering
from torch._inductor.ir import MultiOutput
from torch._inductor.test_case import run_tests, TestCase
from torch._inductor.utils import run_and_get_code
from torch.testing import FileCheck
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
)
from torch.testing._internal.inductor_utils import GPU_TYPE, HAS_CPU, HAS_GPU


DEVICES = ("cpu",) + ((GPU_TYPE,) if HAS_GPU else ())
DTYPE = torch.bfloat16
OP = "torch.ops.inductor.cached_casts.default"


def mlp(device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 96), torch.nn.GELU(), torch.nn.Linear(96, 40)
    ).to(device)


def region(device: str):
    return torch.autocast(device, DTYPE)


def cast_reference(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """What autocast computes from the parameters as they are now: 16-bit operands,
    computed in fp64."""
    with torch.no_grad():
        out = x.to(DTYPE).double()
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                w, b = (p.to(DTYPE).double() for p in (layer.weight, layer.bias))
                out = torch.nn.functional.linear(out.to(DTYPE).double(), w, b)
            else:
                out = layer(out)
        return out


def hits() -> int:
    return counters["inductor"]["param_cast_cache_hit"]


def misses() -> int:
    return counters["inductor"]["param_cast_cache_miss"]


class ParamCastCacheTest(TestCase):
    def setUp(self):
        super().setUp()
        patch = config.patch(
            autocast_param_cache=True, autocast_param_cache_budget=2**30
        )
        patch.__enter__()
        self.addCleanup(patch.__exit__, None, None, None)
        counters.clear()
        param_cast_cache.clear_cache()

    def assert_close_to(self, out, model, x):
        ref = cast_reference(model, x)
        torch.testing.assert_close(out.double(), ref, atol=2e-2, rtol=2e-2)

    @parametrize("device", DEVICES)
    def test_casts_kept_in_a_region(self, device):
        model, x = mlp(device), torch.randn(5, 64, device=device)
        f = torch.compile(model)
        with torch.no_grad(), region(device):
            out, (code,) = run_and_get_code(f, x)
            for _ in range(3):
                again = f(x)
            eager = model(x)
        # one call gathers the four casts (two weights, two biases)
        FileCheck().check_count(OP, 1, exactly=True).check("torch.bfloat16").run(code)
        self.assertEqual((misses(), hits()), (1, 3))
        self.assertEqual(out, again)
        self.assertEqual(out, eager, atol=2e-2, rtol=2e-2)
        self.assert_close_to(out, model, x)

    @parametrize("device", DEVICES)
    def test_dropped_when_the_outermost_region_exits(self, device):
        model, x = mlp(device), torch.randn(5, 64, device=device)
        f = torch.compile(model)
        with torch.no_grad(), region(device):
            f(x)
            with region(device):  # an inner region's exit keeps them
                f(x)
            self.assertGreater(counters["inductor"]["param_cast_cache_bytes"], 0)
        self.assertEqual(counters["inductor"]["param_cast_cache_bytes"], 0)
        with torch.no_grad(), region(device):
            f(x)
        self.assertEqual((misses(), hits()), (2, 1))

    @parametrize("device", DEVICES)
    def test_in_place_update_in_a_region(self, device):
        model, x = mlp(device), torch.randn(5, 64, device=device)
        f = torch.compile(model)
        with torch.no_grad(), region(device):
            before = f(x)
            model[0].weight.mul_(-2.0)  # as an optimizer step or a weight sync would
            after = f(x)
        self.assertEqual(misses(), 2)
        self.assertNotEqual(before, after)
        self.assert_close_to(after, model, x)

    def test_storage_swapped_in_a_region(self):
        model, x = mlp("cpu"), torch.randn(5, 64)
        f = torch.compile(model)
        with torch.no_grad(), region("cpu"):
            f(x)
            model[2].weight.data = torch.randn_like(model[2].weight)
            out = f(x)
        self.assertEqual(misses(), 2)
        self.assert_close_to(out, model, x)

    def test_data_mutation_is_not_seen_as_in_eager(self):
        # ``.data`` bypasses the version counter: eager's cache and this one both keep
        # the cast they hold until the region exits
        model, x = mlp("cpu"), torch.randn(5, 64)
        f = torch.compile(model)
        with torch.no_grad(), region("cpu"):
            stale = f(x)
            model(x)
            model[0].weight.data.mul_(-2.0)
            self.assertEqual(f(x), stale)
            self.assertEqual(model(x), stale, atol=2e-2, rtol=2e-2)
        with torch.no_grad(), region("cpu"):
            self.assert_close_to(f(x), model, x)

    def test_autocast_inside_the_function_recasts(self):
        model, x = mlp("cpu"), torch.randn(5, 64)

        def step(x):
            with region("cpu"):
                return model(x)

        with torch.no_grad():
            out, (code,) = run_and_get_code(torch.compile(step), x)
        FileCheck().check_not(OP).run(code)
        self.assert_close_to(out, model, x)

    @config.patch(autocast_param_cache=False)
    def test_off_by_its_flag(self):
        model, x = mlp("cpu"), torch.randn(5, 64)
        with torch.no_grad(), region("cpu"):
            _, (code,) = run_and_get_code(torch.compile(model), x)
        FileCheck().check_not(OP).run(code)

    def test_budget(self):
        model, x = mlp("cpu"), torch.randn(5, 64)
        # room for the first weight's cast (64 * 96 * 2 bytes) and its bias, no more
        with config.patch(autocast_param_cache_budget=64 * 96 * 2 + 96 * 2):
            with torch.no_grad(), region("cpu"):
                out, (code,) = run_and_get_code(torch.compile(model), x)
        kept = code.split(OP)[1].split("]")[0]
        self.assertEqual(kept.count("arg"), 2, kept)
        self.assertGreater(counters["inductor"]["param_cast_cache_over_budget"], 0)
        self.assert_close_to(out, model, x)

    def test_training_step_and_optimizer_between_regions(self):
        model, x = mlp("cpu"), torch.randn(5, 64)
        ref_model = mlp("cpu")
        f = torch.compile(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        ref_opt = torch.optim.SGD(ref_model.parameters(), lr=0.5)
        for _ in range(2):
            for m, o, fn in ((model, opt, f), (ref_model, ref_opt, ref_model)):
                with region("cpu"):
                    loss = fn(x).float().square().mean()
                loss.backward()
                o.step()
                o.zero_grad()
        with torch.no_grad(), region("cpu"):
            out = f(x)
        for p, q in zip(model.parameters(), ref_model.parameters()):
            self.assertEqual(p, q, atol=1e-2, rtol=1e-2)
        self.assert_close_to(out, model, x)

    def test_gradient_accumulation_in_one_region(self):
        model, ref_model = mlp("cpu"), mlp("cpu")
        f = torch.compile(model)
        xs = [torch.randn(5, 64) for _ in range(3)]
        with region("cpu"):
            for x in xs:
                f(x).float().square().mean().backward()
                ref_model(x).float().square().mean().backward()
        self.assertEqual((misses(), hits()), (1, 2))
        for p, q in zip(model.parameters(), ref_model.parameters()):
            self.assertEqual(p.grad, q.grad, atol=1e-2, rtol=1e-2)

    def test_graphs_share_the_casts_of_a_parameter(self):
        model = mlp("cpu")
        one, many = torch.compile(model), torch.compile(model, dynamic=False)
        with torch.no_grad(), region("cpu"):
            one(torch.randn(1, 64))
            held = counters["inductor"]["param_cast_cache_bytes"]
            many(torch.randn(7, 64))
            self.assertEqual(counters["inductor"]["param_cast_cache_bytes"], held)
        cast_bytes = sum(p.numel() * DTYPE.itemsize for p in model.parameters())
        self.assertEqual(held, cast_bytes)

    def test_dynamic_batch(self):
        model = mlp("cpu")
        f = torch.compile(model, dynamic=True)
        with torch.no_grad(), region("cpu"):
            for batch in (3, 8, 1):
                x = torch.randn(batch, 64)
                self.assert_close_to(f(x), model, x)
        self.assertEqual((misses(), hits()), (1, 2))

    def test_no_kernel_reuses_a_cast(self):
        # a cast is kept between calls: Inductor must not hand its memory on, nor write
        # a kernel's output over it in place, once the graph has read it
        model, x = mlp("cpu"), torch.randn(1, 64)
        seen = []
        codegen = GraphLowering.codegen

        def record(graph, *args, **kwargs):
            casts = [
                b.get_name()
                for b in graph.buffers
                if isinstance(b, MultiOutput)
                and "cached_casts" in str(getattr(b.inputs[0], "op_overload", ""))
            ]
            seen.append((casts, set(graph.never_reuse_buffers)))
            return codegen(graph, *args, **kwargs)

        with mock.patch.object(GraphLowering, "codegen", record):
            with torch.no_grad(), region("cpu"):
                torch.compile(model)(x)
        ((casts, never_reused),) = seen
        self.assertEqual(len(casts), 4)
        self.assertLessEqual(set(casts), never_reused)

    def test_casts_are_never_written_over(self):
        # one row: a bias-sized output next to a dead bias cast, which a kernel could
        # otherwise write in place
        model, x = mlp("cpu"), torch.randn(1, 64)
        f = torch.compile(model)
        with torch.no_grad(), region("cpu"):
            f(x)
            kept = [k.cast.clone() for k in param_cast_cache._store.casts.values()]
            f(x)
            now = [k.cast for k in param_cast_cache._store.casts.values()]
        self.assertEqual(len(kept), 4)
        for a, b in zip(kept, now):
            self.assertEqual(a, b, atol=0, rtol=0)

    def test_freed_parameters_drop_their_casts(self):
        model, x = mlp("cpu"), torch.randn(5, 64)
        f = torch.compile(model)
        with torch.no_grad(), region("cpu"):
            f(x)
            self.assertEqual(len(param_cast_cache._store.casts), 4)
            del model, f
            torch._dynamo.reset()
            gc.collect()
            self.assertEqual(len(param_cast_cache._store.casts), 0)

    def test_per_thread(self):
        model, x = mlp("cpu"), torch.randn(5, 64)
        f = torch.compile(model)
        with torch.no_grad(), region("cpu"):
            f(x)
            seen = []

            def other():
                with torch.no_grad(), region("cpu"):
                    f(x)
                    seen.append(len(param_cast_cache._store.casts))

            t = threading.Thread(target=other)
            t.start()
            t.join()
            self.assertEqual(len(param_cast_cache._store.casts), 4)
        self.assertEqual(seen, [4])
        self.assertEqual(misses(), 2)

    @config.patch({"triton.cudagraphs": True})
    def test_not_under_cuda_graphs(self):
        model, x = mlp("cpu"), torch.randn(5, 64)
        with torch.no_grad(), region("cpu"):
            _, (code,) = run_and_get_code(torch.compile(model), x)
        FileCheck().check_not(OP).run(code)


instantiate_parametrized_tests(ParamCastCacheTest)


if __name__ == "__main__":
    if HAS_CPU:
        run_tests()
