"""``torch-overlay demo``: a transformer MLP block, stock Inductor against overlays.

Summarizes the generated code of both (GPU-free through the harness): the kernels
before and after, and what each overlay did (its counters); ``--diff`` prints the
whole code as a unified diff too. On a GPU it also runs both, checks them against an
fp64 reference and prints the speed ratio.
"""
from __future__ import annotations

import collections
import difflib
import re

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


def compiled_code(model, x, names, force) -> tuple[str, str, dict[str, int]]:
    """Stock's code, the overlays' code and the inductor counters of their compile."""
    from torch._dynamo.utils import counters

    torch_overlay.disable()
    stock = kernels_of(model, x)
    enabled = torch_overlay.enable(names, force=force)
    try:
        counters.clear()
        overlay = kernels_of(model, x)
        counted = dict(counters["inductor"])
    finally:
        torch_overlay.disable()
    print(f"overlays: {', '.join(enabled) or 'none'}")
    return stock, overlay, counted


def kernels(code: str) -> collections.Counter:
    """The Triton kernels ``code`` defines and the extern kernels it calls, with counts."""
    found = collections.Counter(re.findall(r"async_compile\.triton\('(\w+)'", code))
    found.update(f"extern_kernels.{k}" for k in re.findall(r"extern_kernels\.(\w+)\(", code))
    return found


def by_overlay(counted: dict[str, int]) -> dict[str, dict[str, int]]:
    """Each overlay's counters: the keys named for it or for one of its parts (the
    longest such name wins: ``tensorcore_mm_gelu_add_...`` is gelu_add's)."""
    owner = {o.name: o.name for o in torch_overlay.OVERLAYS}
    owner.update({part: o.name for o in torch_overlay.OVERLAYS for part in o.parts})
    out: dict[str, dict[str, int]] = {o.name: {} for o in torch_overlay.OVERLAYS}
    for key, value in sorted(counted.items()):
        prefixes = [p for p in owner if key.startswith(p)]
        if prefixes and value:
            out[owner[max(prefixes, key=len)]][key] = value
    return out


def summary(stock: str, overlay: str, counted: dict[str, int]) -> str:
    lines = []
    for label, code in (("stock inductor", stock), ("torch_overlay", overlay)):
        found = kernels(code)
        triton = sum(1 for k in found if not k.startswith("extern_kernels."))
        lines.append(f"kernels, {label}: {triton} Triton, "
                     f"{sum(v for k, v in found.items() if k.startswith('extern_kernels.'))} extern")
        lines += [f"  {k}" + (f" x{v}" if v > 1 else "") for k, v in found.items()]
    lines.append("what each overlay did (torch._dynamo.utils.counters['inductor']):")
    for name, keys in by_overlay(counted).items():
        did = ", ".join(f"{k}={v}" for k, v in keys.items()) or "nothing in this block"
        lines.append(f"  {name}: {did}")
    return "\n".join(lines)


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


def run_demo(names: list[str] | None, force: bool, diff: bool = False) -> int:
    torch.manual_seed(0)
    # inference: the GPU-free harness cannot trace autograd on a faked GPU
    model, x = MLPBlock().requires_grad_(False), torch.randn(TOKENS, HIDDEN)
    print(f"MLP block: x[{TOKENS}, {HIDDEN}] + fc2(gelu(fc1(x))), ffn {FFN}, "
          "bf16 autocast, fp32 parameters")
    gpu = "h200"
    print("GPU: " + (torch.cuda.get_device_name() if torch.cuda.is_available()
                     else f"none; code generated for the {gpu} profile by the GPU-free harness"))
    stock, overlay, counted = compiled_code(model, x, names, force)
    lines = list(difflib.unified_diff(stock.splitlines(keepends=True),
                                      overlay.splitlines(keepends=True),
                                      fromfile="stock inductor", tofile="torch_overlay"))
    if diff:
        print("".join(lines) if lines else "(the overlays leave this block's code unchanged)")
    print(summary(stock, overlay, counted))
    print(f"generated code: {len(lines)} lines of unified diff" + ("" if diff else " (--diff prints it)"))
    if has_real_gpu(gpu) or torch.cuda.is_available():
        run_on_gpu(model, x, names, force)
    return 0
