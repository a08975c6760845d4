"""tools/bench.py cast-cache (tools/bench_cast_cache.py) on the CPU: the decode row of a
tiny Llama under CPU autocast, Inductor's CPU backend, a stand-in timer. The cache keeps
the casts of the region its calls run in; errors are taken against fp32 eager."""
from __future__ import annotations

import pathlib
import sys
import unittest
from unittest import mock

import torch
from torch._inductor.test_case import TestCase, run_tests

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))

import bench_cast_cache as cast_cache  # noqa: E402
import bench_zoo as zoo  # noqa: E402

try:
    import transformers  # noqa: F401
    HAS_TRANSFORMERS = True
except ImportError:
    HAS_TRANSFORMERS = False


@unittest.skipUnless(HAS_TRANSFORMERS, "transformers is not installed")
class TestCastCacheBench(TestCase):
    def test_decode_row(self):
        from torch._dynamo.utils import counters

        spec = zoo.SPECS["llama3-8b"]
        model = zoo.build(spec, "cpu", tiny=True)
        bf16 = zoo.build(spec, "cpu", tiny=True).to(torch.bfloat16)
        counters.clear()
        timer = mock.Mock(side_effect=lambda call, iters=1, warmup=1: (call(), 1.0)[1])
        with mock.patch.object(zoo, "kernel_us", timer), \
                mock.patch.object(zoo, "wall_us", timer):
            row = cast_cache.decode_row(spec, model, bf16, batch=2)
        self.assertEqual(set(row["sides"]), set(cast_cache.SIDES))
        for side, res in row["sides"].items():
            self.assertEqual(len(res["kernel_us"]), 2, side)  # both orders
            self.assertLess(res["err"], 0.1, side)
        # the cache side's compiled graph kept the casts: held inside its region
        self.assertGreater(row["sides"]["cache"]["held_mib"], 0)
        self.assertGreater(counters["inductor"]["param_cast_cache_hit"], 0)
        self.assertEqual(row["sides"]["cache"]["err"], row["sides"]["stock"]["err"])


if __name__ == "__main__":
    run_tests()
