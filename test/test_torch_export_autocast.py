"""tensorcore_mm and ``torch.export``'s representations of autocast (project-only).

An ``autocast`` region inside ``forward`` reaches Inductor as a ``wrap_with_autocast``
higher-order op (non-strict and strict export) or as the casts it applies (after
``run_decompositions``). Compiled from the exported program, each gets the template with
its casts in registers, as ``torch.compile`` of the module does; stock gets none.
"""
import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.utils import get_code


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(1024, 4096)
        self.down = torch.nn.Linear(4096, 1024)

    def forward(self, x):
        with torch.autocast("cuda", torch.bfloat16):
            return self.down(F.gelu(self.up(x)))


def exported(variant: str) -> torch.export.ExportedProgram:
    model = MLP().requires_grad_(False).to("cuda")
    x = torch.randn(16, 1024, device="cuda")
    ep = torch.export.export(model, (x,), strict=variant == "strict")
    return (ep.run_decompositions() if variant == "decomposed" else ep), x


@pytest.mark.parametrize("variant", ["non_strict", "strict", "decomposed"])
@pytest.mark.parametrize("overlay", [False, True])
def test_exported_autocast_region(variant, overlay):
    ep, x = exported(variant)
    ops = {n.target for n in ep.graph.nodes if n.op == "call_function"}
    hop = torch.ops.higher_order.wrap_with_autocast
    assert (hop in ops) == (variant != "decomposed"), ops
    counters.clear()
    torch._dynamo.reset()
    with inductor_config.patch(
        fx_graph_cache=False, autocast_matmul_meta=overlay, tensorcore_mm_autocast=overlay
    ):
        code = "\n".join(get_code(torch.compile(ep.module()), x))
    counts = counters["inductor"]
    assert counts["tensorcore_mm_template"] == (2 if overlay else 0), dict(counts)
    assert ("triton_tem_" in code) == overlay
