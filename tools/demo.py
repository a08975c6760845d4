"""The demo of tools/apply.py: a transformer MLP block, stock Inductor against overlays.

Shows the generated Triton code of both as a unified diff (GPU-free through the
harness); on a GPU it also runs both, checks them against an fp64 reference and
prints the speed ratio.
"""
from __future__ import annotations

import difflib

import torch
import torch.nn.functional as F

import torch_overlay
from torch_overlay.testing import get_code, has_real_gpu
from torch_overlay.testing.golden import normalize

TOKENS, HIDDEN, FFN = 64, 1024, 4096


class MLPBlock(torch.nn.Module):
    """x + fc2(gelu(fc1(x))), fp32 parameters, run under bf16 autocast."""

    def __init__(self, hidden: int = HIDDEN, ffn: int = FFN) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(hidden, ffn)
        self.fc2 = torch.nn.Linear(ffn, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return x + self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


def kernels_of(model: torch.nn.Module, x: torch.Tensor) -> str:
    torch._dynamo.reset()
    with torch.no_grad():
        return normalize(get_code(lambda m, inp: torch.compile(m)(inp), model, x))


def compiled_code(model, x, names, force) -> tuple[str, str]:
    torch_overlay.disable()
    stock = kernels_of(model, x)
    enabled = torch_overlay.enable(names, force=force)
    try:
        overlay = kernels_of(model, x)
    finally:
        torch_overlay.disable()
    print(f"overlays: {', '.join(enabled) or 'none'}")
    return stock, overlay


def run_on_gpu(model, x, names, force) -> None:
    import triton.testing

    model, x = model.cuda(), x.cuda()
    with torch.no_grad():
        ref = model.double()(x.double()).float()
        model.float()
        results = {}
        for label in ("stock", "overlay"):
            torch._dynamo.reset()
            torch_overlay.disable()
            if label == "overlay":
                torch_overlay.enable(names, force=force)
            fn = torch.compile(model)
            out = fn(x).float()
            ms = triton.testing.do_bench(lambda: fn(x))
            err = ((out - ref).abs().max() / ref.abs().max()).item()
            results[label] = ms
            print(f"{label:8s} {ms * 1e3:8.1f} us   max rel error vs fp64 {err:.2e}")
        torch_overlay.disable()
    print(f"speed-up overlay / stock: {results['stock'] / results['overlay']:.2f}x")


def run_demo(names: list[str] | None, force: bool) -> int:
    torch.manual_seed(0)
    # inference: the GPU-free harness cannot trace autograd on a faked GPU
    model, x = MLPBlock().requires_grad_(False), torch.randn(TOKENS, HIDDEN)
    print(f"MLP block: x[{TOKENS}, {HIDDEN}] + fc2(gelu(fc1(x))), ffn {FFN}, "
          "bf16 autocast, fp32 parameters")
    gpu = "h200"
    print("GPU: " + (torch.cuda.get_device_name() if torch.cuda.is_available()
                     else f"none; code generated for the {gpu} profile by the GPU-free harness"))
    stock, overlay = compiled_code(model, x, names, force)
    diff = list(difflib.unified_diff(stock.splitlines(keepends=True),
                                     overlay.splitlines(keepends=True),
                                     fromfile="stock inductor", tofile="torch_overlay"))
    print("".join(diff) if diff else "(the overlays leave this block's code unchanged)")
    if has_real_gpu(gpu) or torch.cuda.is_available():
        run_on_gpu(model, x, names, force)
    return 0
