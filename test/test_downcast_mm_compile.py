"""downcast_mm's template kernels compiled for the device's architecture (project-only:
ptxas, no GPU needed): what the plan chose fits the device's shared memory and the plan's
own estimate (else a launch fails on the GPU), with no spills and tensor-core
instructions in the PTX. Under ``--gpu-free-profile`` each profile compiles its own plans
for its own architecture (sm_90 on the H200, sm_80 on the A100, sm_86 on the A10G).
"""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch._inductor import config
from torch._inductor.kernel import mm_downcast_plan as plan
from torch._inductor.utils import fresh_cache, get_code, is_big_gpu

from test_tensorcore_mm_sm90 import compile_for
from test_tensorcore_mm import constexpr, kernel_source, template_kernels

# (M, N, K): decode, 65-128 rows in 128-row tiles, 129-256 rows swapped (pairs of 64-row
# weight tiles, 128-row ones, 64-row ones in waves)
CASES = [(16, 4096, 4096), (100, 5120, 4096), (200, 4096, 4096), (256, 14336, 4096),
         (200, 11008, 4096), (200, 8192, 4096), (200, 18944, 3584)]


def linear(x, w, b):
    with torch.autocast("cuda", torch.bfloat16):
        return F.linear(x, w, b)


def config_of(src: str) -> plan.TileConfig:
    blocks = (constexpr(src, f"BLOCK_{d}") for d in "MNK")
    warps, stages = (int(re.search(rf"{k}=(\d+)", src).group(1))
                     for k in ("num_warps", "num_stages"))
    return plan.TileConfig(*blocks, warps, stages)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a (faked) CUDA device")
@pytest.mark.parametrize("m,n,k", CASES)
def test_plan_compiles_for_the_device(m, n, k):
    if not is_big_gpu():
        pytest.skip("the mm template needs a big GPU")
    props = torch.cuda.get_device_properties(0)
    # a fresh cache: the code cached under another profile is that device's
    with fresh_cache(), config.patch(downcast_mm_template=True, prologue_fusion_downcast=True,
                                     prologue_fusion=True, shape_padding=False):
        code = get_code(torch.compile(linear), torch.randn(m, k, device="cuda"),
                        torch.randn(n, k, device="cuda"), torch.randn(n, device="cuda"))
    (name,) = template_kernels(code)
    src = kernel_source(code, name)
    cfg = config_of(src)
    report = compile_for(name, src, cc=props.major * 10 + props.minor)
    weight_is_a = m > plan.MAX_ROWS
    estimate = cfg.smem_bytes(4, 2) if weight_is_a else cfg.smem_bytes(2, 4)
    assert report["shared"] <= min(estimate, props.shared_memory_per_block_optin), (cfg, report)
    assert report["spill_bytes"] == 0, (cfg, report)
    assert report["mma"], "no tensor-core instruction in the PTX"
