#!/usr/bin/env python3
"""Calibrate the tensorcore_mm cost model on a CUDA GPU: what tools/bench.py does not measure.

    python tools/check_tensorcore_mm.py                        variants (about 2 min on an H100)
    python tools/check_tensorcore_mm.py --parts limits,freezing   the parts named
    python tools/check_tensorcore_mm.py --out DIR              also write DIR/check_tensorcore_mm.log

Speed against stock is tools/bench.py's (per operator and per model), values are the
tests' (test/inductor/test_tensorcore_mm.py on the GPU, the criterion of
torch_overlay/testing/numerics.py). This tool forces the template's plans
(``config.tensorcore_mm_force_*``, see ``forced``) and says
what to change in that cost model when its predictions miss. Parts:

- variants: F.linear under bf16 autocast (fp32 x and w), the template forced onto
  alternative operand sets and tile configs at a few shapes, against stock and the cost
  model's prediction, with the term that bounds it;
- epilogue: gelu(F.linear(x, w, b)) + r in bf16 (overlay gelu_add) through the template,
  forced configs, the same columns (the 16-bit rate eff_16bit);
- limits: what bounds the targets the template misses. The time of a pure read of the
  fp32 weight (a Triton streaming read, torch.sum, the cast); the best decode kernel of
  each class Triton offers (pointer loads as the template's, TMA descriptor loads, TMA
  with automatic warp specialization); at M=1024, template configs' time against their
  cold compile;
- freezing: Inductor's freezing (issue 17): stock, stock + freezing, the overlay and the
  overlay + freezing side by side (do_bench medians of 3 interleaved rounds, and CUDA-graph
  replay) on fp32 nn.Linear, a batched weight and the Llama-3-8B decode step of
  tools/bench_models.py, under bf16 autocast and no_grad, the overlay + freezing's values
  against eager and fp64;
- freezing-variants: forced decode kernels on the frozen bf16 weight against frozen stock,
  in CUDA-graph replay: the cost model's 16-bit rates.

A failure in one case is reported and the run goes on; the exit status is 1 when a
value check failed, else 0. Caches: Inductor's FX graph cache and AOTAutograd's cache
are off (forced variants must not be served another's code); Triton's kernel cache
stays on, so a second run's compile times are warm ones.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import itertools
import math
import pathlib
import statistics
import sys
import time
import traceback
from typing import Any, Callable

sys.path.insert(1, str(pathlib.Path(__file__).resolve().parent))  # run from anywhere

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import bench  # noqa: E402
import torch_overlay  # noqa: E402
from bench import graph_ms, median_ms  # noqa: E402
from torch_overlay.testing.numerics import compare, references, verdict  # noqa: E402

BF16 = torch.bfloat16
DEV = "cuda"
PARTS = ("variants", "epilogue", "limits", "freezing", "freezing-variants")
START = time.perf_counter()
FAILURES: list[str] = []
LOG_LINES: list[str] = []
SUMMARY: list[str] = []  # printed again at the end, where a truncated output still shows it


def log(*parts: Any, summary: bool = False) -> None:
    line = " ".join(str(p) for p in parts)
    print(line, flush=True)
    LOG_LINES.append(line)
    if summary:
        SUMMARY.append(line)


def elapsed() -> float:
    return time.perf_counter() - START


@contextlib.contextmanager
def guarded(label: str):
    """Report a failure of one case and go on."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - one case must not end the run
        FAILURES.append(f"{label}: {type(e).__name__}: {e}")
        log(f"  FAIL {label}: {type(e).__name__}: {str(e)[:400]}")
        log("    " + traceback.format_exc().strip().splitlines()[-3].strip())


def overlay_counts() -> dict[str, int]:
    from torch._dynamo.utils import counters

    return {k: v for k, v in counters["inductor"].items() if k.startswith("tensorcore_mm")}


def path_taken(counts: dict[str, int]) -> str:
    if counts.get("tensorcore_mm_template"):
        return f"template x{counts['tensorcore_mm_template']}"
    reasons = [k.split("_", 2)[-1] for k in counts]
    return "stock (" + ", ".join(reasons) + ")" if reasons else "stock"


def compile_fn(fn: Callable, mode: str, fresh: bool = True,
               overlays: tuple[str, ...] = ("tensorcore_mm",)) -> Callable:
    """torch.compile with static shapes in a fresh Dynamo state: mode 'stock' or
    'overlay' (``overlays`` on). ``fresh`` False keeps functions compiled before valid
    (a reset would make them recompile, under whatever overlay state is current then)."""
    from torch._dynamo.utils import counters

    if fresh:
        torch._dynamo.reset()
    counters.clear()
    torch_overlay.disable()
    if mode == "overlay":
        torch_overlay.enable(list(overlays))
        # the entries exist once the overlay is on
        return torch.compile(fn, dynamic=False, options=dict(_FORCE) or None)
    return torch.compile(fn, dynamic=False)


_FORCE: dict[str, Any] = {}


@contextlib.contextmanager
def forced(path=None, fused=None, config=None):
    """The plan (path, operands cast in the kernel, tile config) forced on the overlay
    compiles ``compile_fn`` makes inside, through tensorcore_mm's config entries."""
    _FORCE.update(tensorcore_mm_force_path=path, tensorcore_mm_force_fused=fused,
                  tensorcore_mm_force_config=config and dataclasses.asdict(config))
    try:
        yield
    finally:
        _FORCE.clear()


@contextlib.contextmanager
def no_caches():
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    with (inductor_config.patch(fx_graph_cache=False, fx_graph_remote_cache=False),
          functorch_config.patch(enable_autograd_cache=False)):
        yield


class PlanRecorder:
    """The cost model's plans, as the lowering asks for them."""

    def __init__(self) -> None:
        h = cost_model()
        self.h, self.plans = h, []
        self._original = h.plan

    def __enter__(self):
        def recording(p, dev, *args, **kwargs):
            result = self._original(p, dev, *args, **kwargs)
            self.plans.append((p, dev, result))
            return result

        self.h.plan = recording
        return self

    def __exit__(self, *exc):
        self.h.plan = self._original


def autocast(dtype):
    return torch.autocast(DEV, dtype=dtype)


def linear_fn():
    def fn(x, w, b):
        with autocast(BF16):
            return F.linear(x, w, b)

    return fn


def linear_inputs(m: int, n: int, k: int, generator=None) -> list[torch.Tensor]:
    """x [m, k], w [n, k] scaled by 1/sqrt(k) (outputs of order one), bias [n]: fp32."""
    return [torch.randn(m, k, device=DEV, generator=generator),
            torch.randn(n, k, device=DEV, generator=generator) / math.sqrt(k),
            torch.randn(n, device=DEV, generator=generator)]


def gelu_linear_fn(x, w, b, r):
    return F.gelu(F.linear(x, w, b)) + r


def gelu_linear_inputs(m: int, n: int, k: int) -> list[torch.Tensor]:
    g = torch.Generator(device=DEV).manual_seed(1)
    return [t.to(BF16) for t in (*linear_inputs(m, n, k, g)[:2],
                                 0.1 * torch.randn(n, device=DEV, generator=g),
                                 torch.randn(m, n, device=DEV, generator=g))]


# ----------------------------------------------------------- variants and epilogue

def linear_variants() -> list[tuple]:
    """(shape, label, forced plan): the template's alternatives for F.linear under bf16
    autocast ('default': its config as the cost model picks it), with what they measured
    before."""
    T = cost_model().TileConfig
    both, default = ("template", (True, True)), ("template", None, None)
    return [
        ((16, 4096, 4096), "default", default),
        ((16, 4096, 4096), "x pre-cast", ("template", (False, True), None)),
        # measured on the H200 before (BN16 28.6, BN64 29.5, BK64 s8 28.2, swap 28.0 us,
        # default 28.0): now split-K with 2-3 programs an SM streaming the weight
        ((16, 4096, 4096), "BN32 split2 s3", (*both, T(16, 32, 128, 8, 4, 3, False, 2))),
        ((16, 4096, 4096), "BN32 split4 s3", (*both, T(16, 32, 128, 8, 4, 3, False, 4))),
        ((1, 4096, 4096), "default", default),
        # stock max-autotune's fused reduction took 22.2 us here (BENCHMARKS.md): more
        # programs an SM, or wider K steps, to stream the weight faster
        ((1, 4096, 4096), "BN32 split2 s3", (*both, T(16, 32, 128, 8, 4, 3, False, 2))),
        ((1, 4096, 4096), "BN64 split4 s3", (*both, T(16, 64, 128, 8, 4, 3, False, 4))),
        ((1, 4096, 4096), "BN16 s4", (*both, T(16, 16, 128, 8, 4, 4))),
        ((1, 4096, 4096), "BN32 w8", (*both, T(16, 32, 128, 8, 8, 6))),
        ((1, 4096, 4096), "BN32 BK256 s3", (*both, T(16, 32, 256, 8, 4, 3))),
        ((1, 4096, 4096), "BN32 BK64 s8", (*both, T(16, 32, 64, 8, 4, 8))),
        ((16, 11008, 4096), "default", default),
        ((16, 11008, 4096), "BN64 s4", (*both, T(16, 64, 128, 8, 4, 4))),
        ((16, 11008, 4096), "BN32 s3", (*both, T(16, 32, 128, 8, 4, 3))),
        ((16, 11008, 4096), "BN32", (*both, T(16, 32, 128, 8, 4, 6))),
        ((16, 1024, 4096), "default", default),
        ((16, 1024, 4096), "no split", (*both, T(16, 16, 128, 8, 4, 6))),
        ((16, 1024, 4096), "BN32 split4", (*both, T(16, 32, 128, 8, 4, 6, False, 4))),
        ((16, 4096, 4096), "BN64 split2", (*both, T(16, 64, 128, 8, 4, 5, False, 2))),
        # measured before: both fused 64x64 42.3, x pre-cast 64x64 36.6 (now the default),
        # 128x32 w4 40.4, 64x128 w8 57.7, 128x64 w8 61.7 us
        ((128, 4096, 4096), "default", default),
        ((128, 4096, 4096), "both fused", (*both, T(64, 64, 64, 8, 4, 6))),
        ((128, 4096, 4096), "x pre-cast 128x32", ("template", (False, True), T(128, 32, 64, 8, 4, 5))),
        ((128, 4096, 4096), "x pre-cast split2", ("template", (False, True), T(64, 64, 64, 8, 4, 4, False, 2))),
        ((128, 4096, 4096), "128x128 split4", (*both, T(128, 128, 64, 8, 8, 3, False, 4))),
        # measured before: w fused swap 91.9 (stock 87.1), no swap 129.6, both fused 147.1
        ((1024, 4096, 4096), "w fused, swap 256", ("template", (False, True), T(256, 128, 64, 8, 8, 3, True))),
        ((2048, 4096, 4096), "w fused, swap 256", ("template", (False, True), T(256, 128, 64, 8, 8, 3, True))),
    ]


def epilogue_variants() -> list[tuple]:
    """gelu(F.linear(x, w, b)) + r in bf16: the cost model's choice and forced configs.
    H200, 2026-11-21 (stock 0.168 ms at 8192x4096x1024, 0.220 at 4096^3, 0.446 at
    2048x16384x4096): the best 0.189 (128x128x64 w8 s4), 0.235 (128x256x64 w8 s3) and
    0.475 ms; a persistent variant with the tile and K loops flattened (epilogue
    overlapped with the next tile's loads) took 0.186, 0.233 and 0.445 ms: not kept."""
    T = cost_model().TileConfig
    sweep = [T(128, 128, 64, 8, 8, 4), T(128, 128, 64, 8, 8, 3), T(128, 128, 64, 8, 8, 2),
             T(128, 128, 32, 8, 8, 4), T(128, 128, 32, 8, 8, 3), T(128, 256, 32, 8, 8, 3),
             T(128, 128, 64, 8, 4, 3), T(64, 256, 64, 8, 8, 3), T(128, 256, 64, 8, 8, 3),
             T(128, 64, 64, 8, 4, 4)]
    return [(shape, label, forced) for shape in ((8192, 4096, 1024), (4096, 4096, 4096),
                                                 (2048, 16384, 4096))
            for label, forced in [("cost model's choice", None)] + [
                (f"forced {c}", ("template", (False, False), c)) for c in sweep]]


@functools.cache
def cost_model():
    """The cost model's module, torch._inductor.kernel.mm_tensorcore_plan: it imports
    once the overlay has been enabled (and stays after ``disable``)."""
    torch_overlay.enable(["tensorcore_mm"])
    try:
        from torch._inductor.kernel import mm_tensorcore_plan
    finally:
        torch_overlay.disable()
    return mm_tensorcore_plan


def part_variants(title: str, plans: list[tuple], budget_s: float, epilogue: bool = False) -> None:
    """Each plan forced, measured against stock and the cost model's prediction."""
    h = cost_model()
    fn, make_inputs = ((gelu_linear_fn, gelu_linear_inputs) if epilogue
                       else (linear_fn(), lambda m, n, k: linear_inputs(m, n, k)))
    overlays = ("tensorcore_mm", "gelu_add") if epilogue else ("tensorcore_mm",)
    log(f"\n== {title}: forced plans vs the cost model's predictions, do_bench medians ==")
    log(f"{'M,N,K':>18} {'variant':40} {'ms':>7} {'pred':>7} {'cfg':28} note", summary=True)
    stock_ms: dict = {}
    for shape, label, plan_forced in plans:
        if elapsed() > budget_s:
            log(f"  {title} skipped from {shape} {label} on: time budget {budget_s:.0f} s")
            break
        with guarded(f"variant {shape} {label}"):
            inputs = make_inputs(*shape)
            if shape not in stock_ms:
                with no_caches():
                    stock = compile_fn(fn, "stock")
                    stock(*inputs)
                    stock_ms[shape] = median_ms(lambda: stock(*inputs))
            with (no_caches(), forced(*plan_forced) if plan_forced else contextlib.nullcontext(),
                  PlanRecorder() as rec):
                compiled = compile_fn(fn, "overlay", overlays=overlays)
                compiled(*inputs)
                ms = median_ms(lambda: compiled(*inputs))
            torch_overlay.disable()
            plan = rec.plans[-1][2] if rec.plans else None
            pred = next((q.seconds * 1e3 for q in plan.predictions
                         if (q.fused_a, q.fused_b) == (plan.fused_a, plan.fused_b)
                         and q.label != "stock"), math.nan) if plan else math.nan
            note = path_taken(overlay_counts())
            if plan is not None and plan.config is not None:
                terms = h._template_terms(rec.plans[-1][0], rec.plans[-1][1], plan.fused_a,
                                          plan.fused_b, plan.config)
                bound = max(("compute", "dram", "l2"), key=lambda t: terms[t])
                # what the measured time says of the bound term's efficiency
                rest = ms * 1e-3 - terms["casts"] - terms["overhead"]
                note += f"; {bound}-bound, measured/predicted {bound} term {rest / terms[bound]:.2f}"
            note += f"; stock {stock_ms[shape]:.4f} ms -> x{stock_ms[shape] / ms:.2f}"
            log(f"{str(shape):>18} {label:40} {ms:7.4f} {pred:7.4f} "
                f"{str(plan.config if plan else ''):28} {note}", summary=True)
    log("\nReading: a template variant whose 'measured/predicted' is well below 1 beats the model:\n"
        "  compute-bound -> raise eff_cast_reg (fused w, swap) / eff_cast_smem (both fused) /\n"
        "  eff_16bit (no operand cast in the kernel); dram-bound -> raise stream; l2-bound ->\n"
        "  raise l2_bw (DeviceModel defaults, the same for every GPU); a variant\n"
        "  faster than 'default' -> change select_configs.")


# -------------------------------------------------------------------------- limits

try:
    import triton
    import triton.language as tl
except ImportError:  # --help needs none of these kernels
    triton = None

if triton is not None:
    @triton.jit
    def _stream_read_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr, ITERS: tl.constexpr):
        # each program sums ITERS contiguous blocks: the weight is read once, nothing else
        pid = tl.program_id(0).to(tl.int64)
        acc = tl.zeros([BLOCK], tl.float32)
        for i in range(ITERS):
            offs = (pid * ITERS + i) * BLOCK + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + offs, eviction_policy="evict_first")
        tl.store(out_ptr + pid, tl.sum(acc))

    @triton.jit
    def _decode_ptr_kernel(x_ptr, w_ptr, out_ptr, N, K, BM: tl.constexpr, BN: tl.constexpr,
                           BK: tl.constexpr, STAGES: tl.constexpr):
        # the template's design without Inductor around it: fp32 loads, cast in registers
        pid_n = tl.program_id(0)
        rm = tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), tl.float32)
        for k in tl.range(0, K, BK, num_stages=STAGES):
            x = tl.load(x_ptr + rm[:, None] * K + (k + rk)[None, :])
            w = tl.load(w_ptr + rn[None, :] * K + (k + rk)[:, None])
            acc = tl.dot(x.to(tl.bfloat16), w.to(tl.bfloat16), acc)
        tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))

    @triton.jit
    def _decode_tma_kernel(x_desc, w_desc, out_ptr, N, K, BM: tl.constexpr, BN: tl.constexpr,
                           BK: tl.constexpr, STAGES: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
        # the same with TMA loads, and optionally Triton's automatic warp specialization
        pid_n = tl.program_id(0)
        acc = tl.zeros((BM, BN), tl.float32)
        for k in tl.range(0, K, BK, num_stages=STAGES, warp_specialize=WARP_SPECIALIZE):
            x = x_desc.load([0, k])
            w = w_desc.load([pid_n * BN, k])
            acc = tl.dot(x.to(tl.bfloat16), w.to(tl.bfloat16).T, acc)
        rm = tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))


def part_limits() -> None:
    """What bounds issue 5's decode and M=1024 targets (see the docstring)."""
    from torch._inductor.utils import fresh_cache
    from triton.tools.tensor_descriptor import TensorDescriptor

    h = cost_model()
    log("\n== limits: pure reads, decode kernel classes, M=1024 compile (do_bench medians) ==")
    fn = linear_fn()

    def cold(mode, inputs, plan_forced=None):
        """(median ms, seconds of the first call) of ``fn`` compiled in ``mode``, with fresh
        Inductor and Triton caches as tools/bench.py: the first call is a cold compile."""
        with (no_caches(), fresh_cache(),
              forced(*plan_forced) if plan_forced else contextlib.nullcontext()):
            compiled = compile_fn(fn, mode)
            start = time.perf_counter()
            compiled(*inputs)
            torch.cuda.synchronize()
            seconds = time.perf_counter() - start
        ms = median_ms(lambda: compiled(*inputs))
        torch_overlay.disable()
        return ms, seconds

    for n in (4096, 11008):
        with guarded(f"limits read {n}"):
            w = torch.randn(n, 4096, device=DEV)
            mb = w.numel() * 4 / 1e6
            best = (math.inf, "")
            for block, iters, warps in itertools.product((1024, 2048, 4096, 8192), (1, 2, 4, 8, 16),
                                                         (4, 8, 16)):
                if w.numel() % (block * iters):
                    continue
                grid = w.numel() // (block * iters)
                out = torch.empty(grid, device=DEV)
                ms = median_ms(lambda: _stream_read_kernel[(grid,)](
                    w, out, BLOCK=block, ITERS=iters, num_warps=warps))
                best = min(best, (ms, f"BLOCK {block} ITERS {iters} w{warps}"))
            log(f"read {n}x4096 fp32 ({mb:.0f} MB): triton {best[0]:.4f} ms "
                f"({mb / 1e3 / best[0]:.2f} TB/s, {best[1]}), torch.sum {median_ms(w.sum):.4f}, "
                f"to(bf16) {median_ms(lambda: w.to(BF16)):.4f}", summary=True)
    for m, n, k in [(16, 4096, 4096), (16, 11008, 4096)]:
        with guarded(f"limits decode {(m, n, k)}"):
            inputs = linear_inputs(m, n, k)
            x, w = inputs[0], inputs[1]
            stock_ms, _ = cold("stock", inputs)
            overlay_ms, _ = cold("overlay", inputs)
            want = F.linear(x.to(BF16), w.to(BF16)).float()
            out = torch.empty(m, n, device=DEV, dtype=BF16)
            # device-side TMA descriptors need scratch memory
            triton.set_allocator(
                lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=DEV))
            best: dict[str, tuple[float, str]] = {}
            configs = list(itertools.product((16, 32, 64), (64, 128), (3, 4, 6), (4, 8)))
            for bn, bk, stages, warps in configs:
                launches = {"pointer": lambda: _decode_ptr_kernel[(n // bn,)](
                    x, w, out, n, k, BM=m, BN=bn, BK=bk, STAGES=stages, num_warps=warps)}
                xd = TensorDescriptor.from_tensor(x, [m, bk])
                wd = TensorDescriptor.from_tensor(w, [bn, bk])
                for ws in (False, True):
                    launches["tma + warp spec." if ws else "tma"] = (
                        lambda ws=ws: _decode_tma_kernel[(n // bn,)](
                            xd, wd, out, n, k, BM=m, BN=bn, BK=bk, STAGES=stages,
                            WARP_SPECIALIZE=ws, num_warps=warps))
                for kind, launch in launches.items():
                    try:
                        launch()
                    except Exception as e:  # noqa: BLE001 - a config that does not compile
                        log(f"  {kind} BN{bn} BK{bk} s{stages} w{warps}: {type(e).__name__}")
                        continue
                    if not torch.allclose(out.float(), want, atol=2e-2, rtol=2e-2):
                        FAILURES.append(f"limits {kind} {(m, n, k)} BN{bn} BK{bk}: wrong values")
                        continue
                    ms = median_ms(launch)
                    best[kind] = min(best.get(kind, (math.inf, "")),
                                     (ms, f"BN{bn} BK{bk} s{stages} w{warps}"))
            text = ", ".join(f"{kind} {ms:.4f} ({stock_ms / ms:.2f}x, {cfg})"
                             for kind, (ms, cfg) in best.items())
            log(f"decode {m}x{n}x{k}: stock {stock_ms:.4f}, overlay {overlay_ms:.4f} "
                f"({stock_ms / overlay_ms:.2f}x); best of {len(configs)} configs: {text}",
                summary=True)
    T = h.TileConfig
    inputs = linear_inputs(1024, 4096, 4096)
    with guarded("limits compile 1024"):
        stock_ms, stock_s = cold("stock", inputs)
        log(f"M=1024: stock {stock_ms:.4f} ms, cold compile {stock_s:.2f} s", summary=True)
        ms, s = cold("overlay", inputs)
        log(f"M=1024: overlay (plan) {ms:.4f} ms ({stock_ms / ms:.2f}x), "
            f"{s:.2f} s ({s / stock_s:.2f}x)", summary=True)
        for c in (T(256, 128, 64, 8, 8, 3, SWAP_AB=True), T(256, 128, 32, 8, 8, 4, SWAP_AB=True),
                  T(256, 64, 64, 8, 8, 4, SWAP_AB=True), T(256, 64, 64, 8, 8, 3, SWAP_AB=True),
                  T(128, 128, 64, 8, 8, 4, SWAP_AB=True), T(256, 64, 32, 8, 8, 5, SWAP_AB=True)):
            ms, s = cold("overlay", inputs, ("template", (False, True), c))
            log(f"M=1024: forced {c} {ms:.4f} ms ({stock_ms / ms:.2f}x), "
                f"{s:.2f} s ({s / stock_s:.2f}x)", summary=True)


# ------------------------------------------------------------------------ freezing

FREEZING_SHAPES = [(1, 14336, 4096), (16, 14336, 4096), (64, 14336, 4096), (256, 14336, 4096),
                   (1024, 14336, 4096), (1, 4096, 4096), (16, 4096, 4096), (4, 14336, 4096),
                   (1, 4096, 14336), (16, 4096, 14336)]
FREEZING_MODES = ("stock", "stock+freezing", "overlay", "overlay+freezing")
_FN_IDS = itertools.count()


def code_paths(code: list[str]) -> str:
    """What the matmuls became: gemv reductions, templates, extern (cuBLAS) calls."""
    import re

    src = "\n".join(code)
    calls = re.findall(r"extern_kernels\.(\w+)\(", src)
    tem = len(set(re.findall(r"(triton_tem_fused_\w+?_\d+)\.run\(", src)))
    red = len([k for k in set(re.findall(r"(triton_red_fused_\w+?_\d+)\.run\(", src))
               if "mm" in k])
    parts = [f"{n}x{c}" for c, n in sorted({c: calls.count(c) for c in calls}.items())]
    return " ".join(parts + ([f"tem x{tem}"] if tem else []) + ([f"red-mm x{red}"] if red else []))


def _fresh_fn(body: Callable) -> Callable:
    """``body`` behind a code object of its own: Dynamo caches compiles per code object,
    so each mode's compile stays valid while the next mode compiles (no reset between)."""
    ns: dict[str, Any] = {"body": body}
    name = f"fn_{next(_FN_IDS)}"
    exec(f"def {name}(*args):\n    return body(*args)\n", ns)  # noqa: S102
    return ns[name]


def _frozen_compile(body: Callable, args: list, mode: str, plan_forced=None):
    """(compiled, code paths, output, counts) of ``body`` compiled in ``mode`` (one of
    FREEZING_MODES) under torch.no_grad(), its first call the compile."""
    import torch._inductor.config as inductor_config

    freezing = "+freezing" in mode
    with forced(*plan_forced) if plan_forced else contextlib.nullcontext():
        compiled = compile_fn(_fresh_fn(body), mode.split("+")[0], fresh=False)
    with torch.no_grad(), no_caches(), inductor_config.patch(freezing=freezing):
        out, code = _run_and_get_code_no_reset(compiled, *args)
        counts = overlay_counts()
        compiled(*args)
    torch_overlay.disable()
    return compiled, code_paths(code), out, counts


def _run_and_get_code_no_reset(fn: Callable, *args: Any):
    """``torch._inductor.utils.run_and_get_code`` without its ``torch._dynamo.reset()``:
    that reset drops every function compiled before, which then recompiles at its next
    call under the config of that moment (freezing off, overlays off) and is timed as
    stock non-frozen code: modes timed side by side after such a reset all read ~stock."""
    from unittest import mock

    from torch._inductor.graph import GraphLowering

    codes: list[str] = []
    with mock.patch.object(GraphLowering, "save_output_code", codes.append):
        out = fn(*args)
    return out, codes


def _time_rounds(compiled: dict, args: list, rounds: int = 3) -> dict:
    """mode -> (median over rounds of do_bench medians, min, max, CUDA-graph ms), the
    modes interleaved round by round (the weight read rate moves between calls)."""
    times: dict[str, list[float]] = {m: [] for m in compiled}
    with torch.no_grad():
        for _ in range(rounds):
            for mode, fn in compiled.items():
                times[mode].append(median_ms(lambda: fn(*args)))
        out = {}
        for mode, fn in compiled.items():
            out[mode] = (statistics.median(times[mode]), min(times[mode]), max(times[mode]),
                         graph_ms(lambda: fn(*args)))
    return out


def _freezing_row(label: str, body: Callable, args: list, check: Callable) -> None:
    """The four modes of ``body`` compiled side by side, timed, the overlay + freezing's
    output checked by ``check`` (output -> (ok, text))."""
    torch._dynamo.reset()
    compiled, info = {}, {}
    for mode in FREEZING_MODES:
        fn, paths, out, counts = _frozen_compile(body, args, mode)
        compiled[mode], info[mode] = fn, (paths, out, counts)
    t = _time_rounds(compiled, args)
    torch._dynamo.reset()
    ok, text = check(info["overlay+freezing"][1])
    if not ok:
        FAILURES.append(f"freezing {label} values: {text}")
    sf, of = t["stock+freezing"], t["overlay+freezing"]
    times = " ".join(f"{t[m][0]:8.4f}/{t[m][3]:7.4f}" for m in FREEZING_MODES)
    log(f"{label:24} {times}  {sf[0] / of[0]:5.2f}x {sf[3] / of[3]:5.2f}x  {text}", summary=True)
    log("   spread (min-max do_bench): " + "; ".join(
        f"{mode} {t[mode][1]:.4f}-{t[mode][2]:.4f}" for mode in FREEZING_MODES))
    log("   paths: " + "; ".join(f"{mode}: {info[mode][0]} {info[mode][2]}"
                                 for mode in FREEZING_MODES))


def _compared(fn, inputs) -> Callable:
    """``check`` of _freezing_row: numerics.compare against eager autocast and fp64."""
    def run(*args):
        with autocast(BF16):
            return fn(*args)

    def check(out):
        c = compare(out, references(run, fn, inputs, BF16), BF16)
        return verdict(c), (f"err {c['err']:.2e} (eager {c['eager_err']:.2e}) ulps {c['ulps']:.2f} "
                            f"mism {c['mismatch']:.4f} {'ok' if verdict(c) else 'FAIL'}")
    return check


def frozen_linear_case(m: int, n: int, k: int):
    """(an fp32 nn.Linear without grad, x of M rows, its bf16-autocast call): what freezing folds."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(k, n).to(DEV).requires_grad_(False)
    x = torch.randn(m, k, device=DEV)

    def body(x):
        with autocast(BF16):
            return lin(x)

    return lin, x, body


def part_freezing(budget_s: float) -> None:
    """Issue 17: the overlay against Inductor's freezing (fp32 parameters, bf16 autocast,
    inference): stock, stock + freezing, overlay, overlay + freezing side by side."""
    import copy

    import bench_models as bm

    log("\n== freezing: fp32 nn.Linear / Llama decode under bf16 autocast, no_grad; ms as "
        "do_bench median (L2 flushed; median of 3 interleaved rounds) / CUDA-graph replay ==")
    header = " ".join(f"{m:>16}" for m in FREEZING_MODES)
    log(f"{'case':24} {header}  ovl+fz/stock+fz (do_bench, graph)  numerics (overlay+freezing)",
        summary=True)
    for m, n, k in FREEZING_SHAPES:
        if elapsed() > budget_s:
            log(f"  freezing skipped from {(m, n, k)} on: time budget")
            break
        with guarded(f"freezing linear {(m, n, k)}"):
            lin, x, body = frozen_linear_case(m, n, k)
            _freezing_row("linear %dx%dx%d" % (m, n, k), body, [x],
                          _compared(F.linear, [x, lin.weight, lin.bias]))
            del lin
    with guarded("freezing bmm"):
        # a batched weight (a parameter of [B, N, K]) under freezing
        g = torch.Generator(device=DEV).manual_seed(0)
        wb = torch.nn.Parameter(torch.randn(8, 1024, 4096, device=DEV, generator=g) / 64,
                                requires_grad=False)
        xb = torch.randn(8, 16, 4096, device=DEV, generator=g)

        def bmm_t(x, w):
            return torch.bmm(x, w.transpose(1, 2))

        def bbody(x):
            with autocast(BF16):
                return bmm_t(x, wb)

        _freezing_row("bmm 8x16x1024x4096", bbody, [xb], _compared(bmm_t, [xb, wb]))
    # the decode step of `tools/bench.py --models` (Llama-3-8B, 2 layers, KV cache)
    configs, sizes = bm.MODEL_SETS["full"]
    cfg = next(c for c in configs if c.arch == "llama")
    model = bm.build(cfg, DEV).requires_grad_(False)
    ref_model = copy.deepcopy(model).double()  # autocast leaves fp64 alone
    decode = bench.model_inputs(cfg, sizes, DEV)
    for batch in sizes.decode_batches:
        if elapsed() > budget_s:
            break
        with guarded(f"freezing llama B={batch}"):
            tok, pos = decode[f"decode B={batch}"]  # each call writes the same cache entry
            with torch.no_grad():
                eager = model(tok, pos).double()
                ref = ref_model(tok, pos)

            def check(out, eager=eager, ref=ref):
                def rel(v):
                    return ((v.double() - ref).norm() / ref.norm()).item()
                return rel(out) <= 1.05 * rel(eager) + 1e-6, (
                    f"rel err vs fp64 {rel(out):.2e} (eager {rel(eager):.2e}), "
                    f"max |ovl+fz - eager| {(out.double() - eager).abs().max().item():.2e}")

            _freezing_row(f"{cfg.name} decode B={batch}", model, [tok, pos], check)
    del model, ref_model


def part_freezing_variants(budget_s: float) -> None:
    """The decode kernels on a frozen bf16 weight, forced, against frozen stock (CUDA-graph
    replays, so launch overhead does not hide the weight read): what the cost model's
    16-bit rates (stream16, stream_gemv16, stream_cublas16) are."""
    T = cost_model().TileConfig
    log("\n== freezing variants: forced decode kernels on the frozen bf16 weight; "
        "CUDA-graph ms (do_bench median) ==")
    thin = [T(16, 64, 128, 8, 4, 3), T(16, 64, 128, 8, 4, 6), T(16, 32, 128, 8, 4, 6),
            T(16, 16, 128, 8, 4, 6), T(16, 16, 256, 8, 4, 4)]
    for m, n, k in [(1, 14336, 4096), (16, 14336, 4096), (16, 4096, 4096), (16, 4096, 14336)]:
        if elapsed() > budget_s:
            break
        lin, x, body = frozen_linear_case(m, n, k)
        with guarded(f"freezing variants {(m, n, k)}"):
            mb = n * k * 2 / 1e6
            rows = {"stock+freezing": None, "overlay+freezing": None}
            if m == 1:
                rows["gemv"] = ("gemv",)
            for fused in ((True, False), (False, False)):
                for cfg in thin:
                    rows[f"x{'fp32' if fused[0] else 'bf16'} {cfg}"] = ("template", fused, cfg)
            torch._dynamo.reset()
            compiled, paths = {}, {}
            for label, forced in rows.items():
                if elapsed() > budget_s:
                    break
                mode = "stock+freezing" if label == "stock+freezing" else "overlay+freezing"
                try:
                    compiled[label], paths[label], _, _ = _frozen_compile(body, [x], mode, forced)
                except Exception as e:  # noqa: BLE001 - a config that does not compile
                    log(f"  {label}: {type(e).__name__}: {str(e)[:100]}")
            t = _time_rounds(compiled, [x], rounds=2)
            torch._dynamo.reset()
            stock = t["stock+freezing"]
            log(f"{m}x{n}x{k}: frozen stock graph {stock[3]:.4f} ms ({mb / 1e3 / stock[3]:.2f} TB/s "
                f"of the bf16 weight), do_bench {stock[0]:.4f}", summary=True)
            for label, v in t.items():
                if label == "stock+freezing":
                    continue
                log(f"  {label:34} graph {v[3]:.4f} ({mb / 1e3 / v[3]:.2f} TB/s, "
                    f"{stock[3] / v[3]:.2f}x)  do_bench {v[0]:.4f} ({stock[0] / v[0]:.2f}x) "
                    f"[{paths[label]}]", summary=True)
        del lin


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="variants",
                        help=f"comma-separated, of {', '.join(PARTS)} (default: variants)")
    parser.add_argument("--budget-s", type=float, default=300.0,
                        help="seconds: no variant or freezing case starts after it "
                             "(freezing-variants: after 0.4 of it)")
    parser.add_argument("--out", type=pathlib.Path, default=None)
    args = parser.parse_args(argv)
    parts = args.parts.split(",")
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown part {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    if not bench.gpu_available():
        log("no CUDA GPU: nothing to measure here (the GPU-free checks are "
            "test/inductor/test_tensorcore_mm.py)")
        return 2
    name = torch.cuda.get_device_name()
    log(f"{name}, torch {torch.__version__}, triton {triton.__version__}")
    torch_overlay.load_overlays()
    import warnings

    warnings.filterwarnings("ignore", category=UserWarning)
    if "variants" in parts:
        part_variants("variants", linear_variants(), args.budget_s)
    if "epilogue" in parts:
        part_variants("epilogue", epilogue_variants(), args.budget_s, epilogue=True)
    if "limits" in parts:
        part_limits()
    if "freezing-variants" in parts:  # first: 0.4 of the budget
        part_freezing_variants(elapsed() + 0.4 * args.budget_s)
    if "freezing" in parts:
        part_freezing(args.budget_s)
    log("\n==== details ====")
    for line in SUMMARY:
        print(line)
    log(f"\n==== summary ({name}, torch {torch.__version__}, {elapsed():.0f} s) ====")
    log(f"{len(FAILURES)} failure(s)")
    for f in FAILURES:
        log("  " + f[:300])
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "check_tensorcore_mm.log").write_text("\n".join(LOG_LINES) + "\n")
    return 1 if [f for f in FAILURES if not f.startswith("variant")] else 0


if __name__ == "__main__":
    sys.exit(main())
