"""tensorcore_mm under tensor parallelism (project-only): DTensor's column- and row-wise
linears over a faked two-rank process group, compiled for the H200 without a GPU.

Each rank's shard of the weights is an fp32 parameter cast under autocast, as on one GPU:
the local matmuls take the template, and the collectives stay as they are.
"""
import contextlib
from unittest import mock

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.test_case import run_tests, TestCase
from torch._inductor.utils import get_code
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import (ColwiseParallel, parallelize_module,
                                               RowwiseParallel)
from torch.testing._internal.common_utils import instantiate_parametrized_tests, parametrize
from torch.testing._internal.distributed.fake_pg import FakeStore


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(1024, 4096)
        self.down = torch.nn.Linear(4096, 1024)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


@contextlib.contextmanager
def shardable_fake_cuda():
    """DTensor makes each shard contiguous, which asks the CUDA driver for the faked
    device: a clone does the same without it."""
    contiguous = torch.Tensor.contiguous

    def _contiguous(self, memory_format=torch.contiguous_format):
        if self.device.type != "cuda" or self.is_contiguous(memory_format=memory_format):
            return contiguous(self, memory_format=memory_format)
        return torch.ops.aten.clone.default(self, memory_format=memory_format)
    with mock.patch.object(torch.Tensor, "contiguous", _contiguous):
        yield


class TestTensorParallel(TestCase):
    def setUp(self):
        super().setUp()
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)

    def tearDown(self):
        dist.destroy_process_group()
        super().tearDown()

    @parametrize("overlay", [False, True])
    def test_sharded_mlp(self, overlay):
        with shardable_fake_cuda():
            mesh = init_device_mesh("cuda", (2,))
            model = MLP().requires_grad_(False).to("cuda")
            parallelize_module(model, mesh, {"up": ColwiseParallel(),
                                             "down": RowwiseParallel()})
            self.assertEqual(model.up.weight.to_local().shape, (2048, 1024))

        def step(x):
            with torch.autocast("cuda", torch.bfloat16):
                return model(x)
        counters.clear()
        torch._dynamo.reset()
        with inductor_config.patch(fx_graph_cache=False, shape_padding=False,
                                   autocast_matmul_meta=overlay, tensorcore_mm_autocast=overlay):
            # get_code's stand-in for the compiled module returns None, which DTensor's
            # output wrapper cannot take: that is after the code is generated
            with contextlib.suppress(TypeError):
                get_code(torch.compile(step), torch.randn(4, 1024, device="cuda"))
        counts = counters["inductor"]
        self.assertGreater(counts["extern_calls"], 0, dict(counts))  # the graph was lowered
        # the two local matmuls, each rank's shard of the weights read as fp32
        self.assertEqual(counts["tensorcore_mm_template"], 2 if overlay else 0, dict(counts))


instantiate_parametrized_tests(TestTensorParallel)

if __name__ == "__main__":
    run_tests()
