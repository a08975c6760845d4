"""tensorcore_mm's configs compiled for sm_90 (project-only: ptxas on an H100/H200's
architecture, no GPU needed): shared memory within TileConfig.smem_bytes's estimate
(else a launch fails on the GPU), no spills, tensor-core instructions in the PTX.
"""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import tempfile
import unittest

import torch
from torch._inductor import config as inductor_config
from torch._inductor.kernel import mm_tensorcore_plan as planner
from torch._inductor.test_case import run_tests

# the exported test module, as pytest imports it (test/inductor has no __init__.py)
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "inductor"))
from test_tensorcore_mm import (  # noqa: E402
    TensorCoreMMTestCase, gpu_randn, kernel_source, linear, template_kernels,
)

# the plans compiled are the device's own (the plugin's faked H200 here)
IS_H200 = torch.cuda.is_available() and torch.cuda.get_device_name() == "NVIDIA H200"
requires_h200 = unittest.skipUnless(IS_H200, "compiles an H200's plans for sm_90")


def config_of(src: str) -> planner.TileConfig:
    def get(name):
        return re.search(rf"{name} : tl.constexpr = (\w+)", src).group(1)

    stages = int(re.search(r"num_stages=(\d+)", src).group(1))
    warps = int(re.search(r"num_warps=(\d+)", src).group(1))
    return planner.TileConfig(int(get("BLOCK_M")), int(get("BLOCK_N")), int(get("BLOCK_K")),
                                 int(get("GROUP_M")), warps, stages, get("SWAP_AB") == "True",
                                 int(get("SPLIT_K")))


def compile_for(name: str, src: str, cc: int = 90) -> dict:
    """Compile a generated template kernel with Triton for sm_``cc``; no GPU needed."""
    import importlib.util

    import triton
    from torch._inductor.runtime.hints import DeviceProperties
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas
    from triton.compiler import ASTSource

    triton_meta = eval(re.search(r"triton_meta=(\{.*?\}),\n", src, re.S).group(1),
                       {"DeviceProperties": DeviceProperties})
    warps, stages = (int(re.search(rf"{k}=(\d+)", src).group(1))
                     for k in ("num_warps", "num_stages"))
    with tempfile.TemporaryDirectory() as d:
        path = pathlib.Path(d) / f"{name}.py"
        path.write_text("import triton\nimport triton.language as tl\n"
                        + src[src.index("@triton.jit"):])
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        compiled = triton.compile(
            ASTSource(fn=getattr(module, name), signature=triton_meta["signature"],
                      attrs=triton_meta["configs"][0]),
            target=GPUTarget("cuda", cc, 32),
            options={"num_warps": warps, "num_stages": stages},
        )
        ptx = compiled.asm["ptx"]
        # the ptxas Triton itself uses for the arch (its newest, where the bundled ptxas
        # is older than the PTX it emits)
        ptxas = get_ptxas(cc).path
        (pathlib.Path(d) / "k.ptx").write_text(ptx)
        arch = f"sm_{cc}a" if cc == 90 else f"sm_{cc}"
        info = subprocess.run([str(ptxas), "-v", f"--gpu-name={arch}", str(pathlib.Path(d) / "k.ptx"),
                               "-o", str(pathlib.Path(d) / "k.cubin")],
                              capture_output=True, text=True, check=True).stderr
    return dict(shared=compiled.metadata.shared,
                spill_bytes=int(re.search(r"(\d+) bytes spill stores", info).group(1)),
                mma=ptx.count("wgmma.mma_async") + ptx.count("mma.sync"))


@requires_h200
class TestTensorCoreMMSm90(TensorCoreMMTestCase):
    def test_template_compiles_for_sm90(self):
        # shared memory within the estimate (else a launch fails on the GPU), no spills
        # (16, 1024) splits K; (256, 4096) is the swapped tile's deepest pipeline
        cases = [(16, 4096), (128, 4096), (256, 4096), (16, 1024), (1024, 4096)]
        for m, n in cases:
            # M=1024 keeps the stock path by default (tiles re-read the operands); its
            # tile is max-autotune's
            force = "template" if m == 1024 else None
            with inductor_config.patch(tensorcore_mm_force_path=force):
                code = self.cuda_code(linear(), *gpu_randn((m, 4096), (n, 4096), (n,)))
            name = template_kernels(code)[0]
            src = kernel_source(code, name)
            report = compile_for(name, src)
            cfg = config_of(src)
            self.assertEqual(cfg.SPLIT_K > 1, n == 1024, cfg)
            self.assertEqual(cfg.BLOCK_M == 256, m == 1024, cfg)  # 256x128x64 s3 swap
            self.assertEqual(cfg.SWAP_AB, m >= 256, cfg)
            if m == 256:
                self.assertEqual((cfg.BLOCK_N, cfg.num_stages), (64, 6), cfg)
            est = cfg.smem_bytes(2 if m >= 128 else 4, 4)  # x cast in the kernel below M=128
            self.assertLessEqual(report["shared"], est, (m, cfg, report))
            self.assertEqual(report["spill_bytes"], 0, (m, cfg, report))
            self.assertTrue(report["mma"], "no tensor-core instruction in the PTX")

    def test_few_rows_compile_for_sm90(self):
        # tiles under 16 rows: CUDA-core products, no spills, shared memory in the estimate
        for m, n, k in [(2, 4096, 4096), (4, 1024, 4096), (3, 1024, 1024), (4, 1024, 14336)]:
            code = self.cuda_code(linear(), *gpu_randn((m, k), (n, k), (n,)))
            name = template_kernels(code)[0]
            src = kernel_source(code, name)
            cfg = config_of(src)
            self.assertLess(cfg.BLOCK_M, 16, (m, n, k, cfg))
            report = compile_for(name, src)
            self.assertLessEqual(report["shared"], cfg.smem_bytes(4, 4), (m, cfg, report))
            self.assertEqual(report["spill_bytes"], 0, (m, n, k, cfg, report))
            self.assertEqual(report["mma"], 0, "tensor-core instructions in the PTX")


if __name__ == "__main__":
    run_tests()
