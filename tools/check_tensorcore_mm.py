#!/usr/bin/env python3
"""Check and tune the tensorcore_mm overlay on a CUDA GPU, in one run (about 5 min on an H200).

    python tools/check_tensorcore_mm.py                  everything below, with a time budget
    python tools/check_tensorcore_mm.py --parts perf     one part: values, training, perf, variants
    python tools/check_tensorcore_mm.py --out DIR        also write DIR/check_tensorcore_mm.json

1. values: random inputs at many shapes (M=1, odd M/N/K, K and N not multiples of 16),
   fp16/bf16, mm/addmm/bmm/baddbmm, transposed and permuted weights, a fused epilogue,
   dynamic M. Each compiled result (a) against an fp64 reference: error no worse than
   eager autocast's; (b) against the correctly rounded value: within 16-bit rounding
   and fp32 summation error (the definition is at torch_overlay/testing/numerics.py's
   ``compare``, which test_tensorcore_mm's GPU tests share). Prints the path taken.
2. training: forward and backward of an MLP with fp32 parameters under autocast,
   outputs and gradients against eager autocast and fp64.
3. perf: F.linear under bf16 autocast, fp32 x and w, on the issue's shapes: eager,
   stock default, stock max-autotune, the overlay (do_bench medians, ms), ratios,
   compile seconds, and the cost model's choice and config per shape; then the
   issue's targets, PASS or FAIL.
   3b. the overlay under max-autotune: its configs and the stock path (one subgraph)
   benchmarked together, at two shapes.
4. variants: the template forced onto alternative operand sets and configs at a few
   shapes, against the cost model's predictions: what to change in
   torch_overlay/_inductor/template_heuristics/tensorcore_mm.py when targets miss.

5. epilogue: gelu(F.linear(x, w, b)) + r through the template, forced configs against
   stock and addmm_act (issue 6, part 3).
7. freezing (only when asked: --parts freezing): issue 17, stock, stock + Inductor
   freezing, the overlay and the overlay + freezing side by side on fp32 nn.Linear and a
   two-layer Llama-style decode step under bf16 autocast (no_grad), with numerics of the
   overlay + freezing against eager and fp64; 'freezing-variants': forced decode kernels
   on the frozen bf16 weight, to calibrate the 16-bit rates of the cost model.
6. limits (only when asked: --parts limits): what bounds the targets the template
   misses. The time of a pure read of the fp32 weight (a Triton streaming read,
   torch.sum, the cast); the best decode kernel of each class Triton offers (pointer
   loads as the template's, TMA descriptor loads, TMA with automatic warp
   specialization); at M=1024, template configs' time against their cold compile.

Order: perf first (its stock max-autotune compiles are what --budget-s trims), then
values, training, 3b and variants (trimmed too). A summary is printed last.

A failure in one case is reported and the run goes on; the exit status is 1 when a
value check failed, else 0 (missed performance targets are reported, not fatal).
Caches: Inductor's FX graph cache and AOTAutograd's cache are off (each compile is
measured and forced variants must not be served another's code); Triton's kernel
cache stays on, so a second run's compile times are warm ones.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import pathlib
import statistics
import sys
import time
import traceback
from typing import Any, Callable

TOOLS = pathlib.Path(__file__).resolve().parent
REPO = TOOLS.parent
sys.path.insert(1, str(REPO))  # run from anywhere, without installing the package

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torch_overlay  # noqa: E402
from torch_overlay.testing import numerics  # noqa: E402
from torch_overlay.testing.numerics import Refs, compare, verdict  # noqa: E402,F401

BF16, FP16 = torch.bfloat16, torch.float16
ULP = {BF16: 2.0**-7, FP16: 2.0**-10}  # one unit in the last place, relative, at worst
PERF_SHAPES = [(1, 4096, 4096), (16, 4096, 4096), (128, 4096, 4096), (1024, 4096, 4096),
               (2048, 4096, 4096), (4096, 4096, 4096), (16, 11008, 4096), (2048, 11008, 4096),
               (8192, 8192, 8192)]
WARMUP_MS, REP_MS = 25, 100
START = time.perf_counter()
FAILURES: list[str] = []
DEV = "cuda"  # --smoke-cpu: "cpu", to try this script's plumbing where there is no GPU
SHRINK = 1  # --smoke-cpu divides the sizes by this


LOG_LINES: list[str] = []
SUMMARY: list[str] = []  # printed again at the end, where a truncated output still shows it
RESULTS: dict[str, tuple[bool, str]] = {}  # target -> (met, numbers): the final summary


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


def compile_fn(fn: Callable, mode: str, dynamic: bool | None = False,
               fresh: bool = True, overlays: tuple[str, ...] = ("tensorcore_mm",)) -> Callable:
    """torch.compile in a fresh Dynamo state: mode 'stock', 'overlay', 'max-autotune'
    (stock) or 'overlay-max-autotune', the overlay modes with ``overlays`` on. Static
    shapes unless ``dynamic`` is None (as tools/bench.py): every shape is measured as
    its own static compile. ``fresh`` False keeps functions compiled before valid (a
    reset would make them recompile, under whatever overlay state is current then)."""
    from torch._dynamo.utils import counters

    if fresh:
        torch._dynamo.reset()
    counters.clear()
    torch_overlay.disable()
    if mode.startswith("overlay"):
        torch_overlay.enable(list(overlays))
    options = {"max_autotune": True} if mode.endswith("max-autotune") else None
    return torch.compile(fn, dynamic=dynamic, options=options)


@contextlib.contextmanager
def no_caches():
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    with (inductor_config.patch(fx_graph_cache=False, fx_graph_remote_cache=False),
          functorch_config.patch(enable_autograd_cache=False)):
        yield


def median_ms(fn: Callable[[], Any]) -> float:
    if DEV == "cpu":
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)
    import triton.testing

    return triton.testing.do_bench(fn, warmup=WARMUP_MS, rep=REP_MS, return_mode="median")


def sync() -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


# -------------------------------------------------------------------------- 1. values

def autocast(dtype):
    return torch.autocast(DEV, dtype=dtype)


def sz(d: int) -> int:
    return max(1, d // SHRINK)


def make_case(kind: str, m: int, n: int, k: int, dtype, batch: int = 3, seed: int = 0):
    """(fn under autocast, fp64 reference fn, inputs) for one case."""
    n, k = sz(n), sz(k)
    g = torch.Generator(device=DEV).manual_seed(seed)

    def rnd(*shape, scale=1.0):
        return torch.randn(*shape, device=DEV, generator=g) * scale

    s = 1.0 / math.sqrt(k)
    if kind == "linear":  # addmm(b, x, w.t()), the weight arrives as a permute
        inputs = [rnd(m, k), rnd(n, k, scale=s), rnd(n)]
        return (lambda x, w, b: F.linear(x, w, b)), (lambda x, w, b: F.linear(x, w, b)), inputs
    if kind == "linear_nobias":  # mm
        inputs = [rnd(m, k), rnd(n, k, scale=s)]
        return (lambda x, w: F.linear(x, w)), (lambda x, w: F.linear(x, w)), inputs
    if kind == "mm_kn":  # weight [K, N], N contiguous
        inputs = [rnd(m, k), rnd(k, n, scale=s)]
        return (lambda x, w: x @ w), (lambda x, w: x @ w), inputs
    if kind == "mm_xt":  # x given as [K, M], M contiguous
        inputs = [rnd(k, m), rnd(k, n, scale=s)]
        return (lambda x, w: x.t() @ w), (lambda x, w: x.t() @ w), inputs
    if kind == "addmm_ab":  # alpha, beta, a full [M, N] input
        inputs = [rnd(m, n), rnd(m, k), rnd(n, k, scale=s)]
        f = lambda c, x, w: torch.addmm(c, x, w.t(), beta=0.5, alpha=2.0)  # noqa: E731
        return f, f, inputs
    if kind == "linear3d":  # [B, S, K] input, viewed as [B*S, K]
        inputs = [rnd(batch, m, k), rnd(n, k, scale=s), rnd(n)]
        return (lambda x, w, b: F.linear(x, w, b)), (lambda x, w, b: F.linear(x, w, b)), inputs
    if kind == "bmm":
        inputs = [rnd(batch, m, k), rnd(batch, n, k, scale=s)]
        f = lambda x, w: torch.bmm(x, w.transpose(1, 2))  # noqa: E731
        return f, f, inputs
    if kind == "baddbmm":
        inputs = [rnd(batch, m, n), rnd(batch, m, k), rnd(batch, n, k, scale=s)]
        f = lambda c, x, w: torch.baddbmm(c, x, w.transpose(1, 2), beta=0.5, alpha=2.0)  # noqa: E731
        return f, f, inputs
    if kind == "relu_epilogue":  # an epilogue fused into the template, exact in 16 bits
        inputs = [rnd(m, k), rnd(n, k, scale=s), rnd(n)]
        f = lambda x, w, b: F.relu(F.linear(x, w, b)) * 2.0  # noqa: E731
        return f, f, inputs
    raise ValueError(kind)


def under_autocast(fn, dtype):
    def run(*args):
        with autocast(dtype):
            return fn(*args)

    return run


def references(fn: Callable, fn64: Callable, inputs: list, dtype) -> Refs:
    """The references of ``compare`` for ``fn`` under autocast to ``dtype``."""
    return numerics.references(under_autocast(fn, dtype), fn64, inputs, dtype)


VALUES_HEADER = (f"{'case':42} {'path':22} {'ulps':>5} {'mism':>6} {'e_off':>6} {'ulps_d':>6} "
                 f"{'mism_d':>6} {'err':>8} {'eager':>8} {'eag_f32':>8}  ok")


def values_row(label: str, path: str, c: dict, ok: bool) -> str:
    return (f"{label:42} {path:22} {c['ulps']:5.2f} {c['mismatch']:6.4f} {c['eager_off']:6.4f} "
            f"{c['ulps_default']:6.1f} {c['mismatch_default']:6.4f} {c['err']:8.2e} "
            f"{c['eager_err']:8.2e} {c['eager_fp32_err']:8.2e}  {'ok' if ok else 'FAIL'}")


def part_values() -> None:
    before = len(FAILURES)
    paths: dict[str, int] = {}
    log("\n== 1. values: compiled (overlay) vs eager autocast vs fp64 ==")
    log("ulps/mism: vs the correctly rounded value (tolerance 1.0: one 16-bit unit plus fp32\n"
        "summation error; mism: neither it, a rounding explained by summation error, nor eager with\n"
        "fp32 reductions; e_off: eager with fp32 reductions unexplained); ulps_d/mism_d: vs eager\n"
        "with torch's defaults (reduced-precision reductions allowed); err: max |x - fp64| / scale")
    log(VALUES_HEADER)
    cases = []
    for dtype in (BF16, FP16):
        for kind, m, n, k in [("linear", 1, 4096, 4096), ("linear", 16, 4096, 4096),
                              ("linear", 37, 1001, 999), ("linear", 128, 4096, 4096),
                              ("linear", 200, 96, 4095), ("linear_nobias", 16, 11008, 4096),
                              ("linear", 16, 1024, 4096), ("linear", 3, 300, 8192),  # split-K
                              ("mm_kn", 16, 1000, 520), ("mm_xt", 33, 256, 130),
                              ("addmm_ab", 7, 72, 200), ("linear3d", 17, 333, 256),
                              ("bmm", 1, 64, 96), ("bmm", 33, 100, 130),
                              ("baddbmm", 16, 48, 64), ("relu_epilogue", 16, 1024, 512),
                              ("linear", 1024, 4096, 4096)]:
            if dtype == BF16 or kind in ("linear", "bmm", "baddbmm") and n != 4096:
                cases.append((kind, m, n, k, dtype))  # fp16: the odd shapes and splits
    checked = 0
    for kind, m, n, k, dtype in cases:
        checked += 1
        label = f"{kind} {m}x{n}x{k} {str(dtype)[6:]}"
        with guarded(label):
            fn, fn64, inputs = make_case(kind, m, n, k, dtype)
            run = under_autocast(fn, dtype)
            refs = references(fn, fn64, inputs, dtype)
            with no_caches():
                out = compile_fn(run, "overlay")(*inputs)
            c = compare(out, refs, dtype)
            ok = verdict(c)
            if not ok:
                FAILURES.append(f"{label}: {c}")
            path = path_taken(overlay_counts())
            paths[path.split(" ")[0]] = paths.get(path.split(" ")[0], 0) + 1
            log(values_row(label, path, c, ok))
    # dynamic M: one compile, several M. Bounded (mark_dynamic max=64): the template,
    # with a config for the range; unbounded: the stock path (a decode-shaped kernel
    # would also run every prefill)
    for dtype, m_max in ((BF16, 64), (FP16, 64), (BF16, None)):
        label = f"dynamic M<={m_max} linear x4096x4096 {str(dtype)[6:]}"
        with guarded(label):
            fn, fn64, inputs = make_case("linear", 16, 4096, 4096, dtype)
            run = under_autocast(fn, dtype)

            def marked(x, *rest, m_max=m_max):
                if m_max is None:
                    torch._dynamo.mark_dynamic(x, 0)
                else:
                    torch._dynamo.mark_dynamic(x, 0, min=2, max=m_max)
                return inner(x, *rest)

            with no_caches():
                inner = compile_fn(run, "overlay", dynamic=None)
                compiled = marked
                for m in (16, 2, 33, 64) if m_max else (16, 2, 33, 128, 256):
                    checked += 1
                    x = torch.randn(m, sz(4096), device=DEV)
                    args = [x, *inputs[1:]]
                    c = compare(compiled(*args), references(fn, fn64, args, dtype), dtype)
                    ok = verdict(c)
                    if not ok:
                        FAILURES.append(f"{label} M={m}: {c}")
                    log(values_row(label + f" M={m}", path_taken(overlay_counts()), c, ok))
    failed = len(FAILURES) - before
    RESULTS["values"] = (failed == 0, f"{checked - failed}/{checked} cases: err vs fp64 "
                         f"<= eager's and within 16-bit rounding of the exact value; "
                         f"paths {paths}")
    log(f"values: {failed} failure(s); paths taken {paths}")


# ------------------------------------------------------------------------ 2. training

def part_training() -> None:
    before = len(FAILURES)
    log("\n== 2. training: forward + backward, MLP with fp32 parameters under autocast ==")
    for dtype in (BF16, FP16):
        for tokens in (16, 200):
            label = f"mlp tokens={tokens} {str(dtype)[6:]}"
            with guarded(label):
                torch.manual_seed(0)
                model = torch.nn.Sequential(torch.nn.Linear(sz(1024), sz(2048)), torch.nn.GELU(),
                                            torch.nn.Linear(sz(2048), sz(1000))).to(DEV)
                x = torch.randn(tokens, sz(1024), device=DEV)

                def step(m, inp, use_autocast=True):
                    inp = inp.clone().requires_grad_(True)
                    ctx = autocast(dtype) if use_autocast else contextlib.nullcontext()
                    with ctx:
                        out = m(inp)
                    out.float().square().mean().backward()
                    grads = [p.grad.clone() for p in m.parameters()] + [inp.grad]
                    m.zero_grad(set_to_none=True)
                    return out, grads

                eager_out, eager_grads = step(model, x)
                ref_out, ref_grads = step(model.double(), x.double(), use_autocast=False)
                model.float()
                with no_caches():
                    out, grads = step(compile_fn(model, "overlay"), x)
                counts = overlay_counts()
                worst = []
                for name, got, want, ref in [("out", out, eager_out, ref_out)] + [
                        (f"grad{i}", g, e, r) for i, (g, e, r) in
                        enumerate(zip(grads, eager_grads, ref_grads))]:
                    err = (got.double() - ref).abs().max().item() / ref.abs().max().item()
                    eager_err = (want.double() - ref).abs().max().item() / ref.abs().max().item()
                    close = (got.double() - want.double()).abs().max().item() / want.abs().max().item()
                    worst.append((name, err, eager_err, close))
                # the backward's reductions reorder sums: compare errors, with slack
                ok = all(err <= 1.5 * eager_err + 1e-5 and close <= 8 * ULP[dtype]
                         for _, err, eager_err, close in worst)
                if not ok:
                    FAILURES.append(f"{label}: {worst}")
                line = ", ".join(f"{n} {e:.1e}/{ee:.1e}" for n, e, ee, _ in worst)
                log(f"{label:24} {path_taken(counts):14} err/eager err: {line}  {'ok' if ok else 'FAIL'}")
    failed = len(FAILURES) - before
    RESULTS["training"] = (failed == 0, f"{4 - failed}/4 MLPs fwd+bwd: err vs fp64 <= 1.5x eager's, "
                           f"within 8 ulps of eager")
    log(f"training: {failed} failure(s)")


# ---------------------------------------------------------------------------- 3. perf

@dataclasses.dataclass
class PerfRow:
    shape: tuple[int, int, int]
    eager: float = math.nan
    stock: float = math.nan
    maxat: float = math.nan
    overlay: float = math.nan
    overlay_graph: float = math.nan  # the overlay replayed as a CUDA graph: no host overhead
    stock_graph: float = math.nan
    ct_stock: float = math.nan
    ct_maxat: float = math.nan
    ct_overlay: float = math.nan
    path: str = ""
    plan: str = ""
    kernel: str = ""  # the template kernel's config as generated


class PlanRecorder:
    """The cost model's plans, as the lowering asks for them."""

    def __init__(self) -> None:
        from torch._inductor.template_heuristics import tensorcore_mm as h

        self.h, self.plans = h, []
        self._original = h.plan

    def __enter__(self):
        def recording(p, dev):
            result = self._original(p, dev)
            self.plans.append((p, dev, result))
            return result

        self.h.plan = recording
        return self

    def __exit__(self, *exc):
        self.h.plan = self._original


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


def timed_compile(fn, mode, inputs, code: bool = False, fresh: bool = True):
    """(compiled, seconds of the first call[, generated code])."""
    from torch._inductor.utils import run_and_get_code

    compiled = compile_fn(fn, mode, fresh=fresh)
    t0 = time.perf_counter()
    if code:
        _, src = run_and_get_code(compiled, *inputs)
    else:
        compiled(*inputs)
    sync()
    seconds = time.perf_counter() - t0
    return (compiled, seconds, src) if code else (compiled, seconds)


def graph_ms(fn: Callable[[], Any]) -> float:
    """``fn`` captured in a CUDA graph and replayed: its GPU time without host overhead
    (a large gap between this and the do_bench median means the host was the bound)."""
    if DEV != "cuda":
        return math.nan
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
            fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return median_ms(graph.replay)
    except Exception as e:  # noqa: BLE001 - a diagnostic only
        log(f"  (no CUDA graph timing: {type(e).__name__}: {str(e)[:100]})")
        return math.nan


def kernel_config(code: list[str]) -> str:
    """The tile config of the template kernel in generated code, or 'no template'."""
    import re

    src = "\n".join(code)
    if "triton_tem_" not in src:
        return "no template"
    get = {k: re.search(rf"{k} : tl.constexpr = (\w+)", src) for k in
           ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "SWAP_AB")}
    vals = {k: v.group(1) if v else "?" for k, v in get.items()}
    warps = re.search(r"num_warps=(\d+)", src)
    stages = re.search(r"num_stages=(\d+)", src)
    return (f"{vals['BLOCK_M']}x{vals['BLOCK_N']}x{vals['BLOCK_K']} w{warps.group(1) if warps else '?'} "
            f"s{stages.group(1) if stages else '?'}{' swap' if vals['SWAP_AB'] == 'True' else ''}"
            f"{' split' + vals['SPLIT_K'] if vals['SPLIT_K'] not in ('1', '?') else ''}")


def measure_ceilings() -> dict:
    if DEV == "cpu":
        return {"copy_TBps": math.nan, "bf16_mm_TFLOPs": math.nan}
    src = torch.randn(1 << 28, device=DEV)
    dst = torch.empty_like(src)
    copy_ms = median_ms(lambda: dst.copy_(src))
    a, b = (torch.randn(8192, 8192, device=DEV, dtype=BF16) for _ in range(2))
    mm_ms = median_ms(lambda: torch.mm(a, b))
    del src, dst, a, b
    return {"copy_TBps": 2 * (1 << 28) * 4 / copy_ms / 1e9, "bf16_mm_TFLOPs": 2 * 8192**3 / mm_ms / 1e9}


def part_perf(rows: list[PerfRow], budget_s: float, with_maxat: bool) -> None:
    log("\n== 3. perf: F.linear under bf16 autocast, fp32 x, w, bias; do_bench medians ==")
    ceilings = measure_ceilings()
    log(f"ceilings: copy {ceilings['copy_TBps']:.2f} TB/s (read + written), "
        f"bf16 cuBLAS 8192^3 {ceilings['bf16_mm_TFLOPs']:.0f} TFLOP/s")
    fn = linear_fn()
    with no_caches():
        compile_fn(lambda x: x + 1, "stock")(torch.ones(8, device=DEV))  # start the workers
        for shape in PERF_SHAPES:
            m, n, k = shape
            row = PerfRow(shape)
            rows.append(row)
            with guarded(f"perf {shape}"):
                g = torch.Generator(device=DEV).manual_seed(0)
                inputs = linear_inputs(m, n, k, generator=g)
                row.eager = median_ms(lambda: fn(*inputs))
                stock, row.ct_stock = timed_compile(fn, "stock", inputs)
                # measured before the overlay compiles: Dynamo caches per code object, so a
                # second compile of fn would shadow this one (same guards, newest first)
                row.stock = min(median_ms(lambda: stock(*inputs)) for _ in range(2))
                row.stock_graph = graph_ms(lambda: stock(*inputs))
                del stock
                with PlanRecorder() as rec:
                    overlay, row.ct_overlay, code = timed_compile(fn, "overlay", inputs, code=True)
                counts = overlay_counts()
                row.path = path_taken(counts)
                row.plan = rec.plans[-1][2].describe() if rec.plans else "(no plan)"
                row.kernel = kernel_config(code)
                row.overlay = min(median_ms(lambda: overlay(*inputs)) for _ in range(2))
                row.overlay_graph = graph_ms(lambda: overlay(*inputs))
                out = overlay(*inputs)
                if overlay_counts() != counts:
                    FAILURES.append(f"perf {shape}: recompiled while measured, {overlay_counts()}")
                c = compare(out, references(lambda x, w, b: F.linear(x, w, b), F.linear, inputs, BF16),
                            BF16)
                if not verdict(c):
                    FAILURES.append(f"perf {shape} values: {c}")
                del overlay
        if with_maxat:
            for row in rows:
                if elapsed() > budget_s:
                    log(f"  max-autotune skipped from {row.shape} on: time budget {budget_s:.0f} s")
                    break
                m, n, k = row.shape
                with guarded(f"max-autotune {row.shape}"):
                    inputs = [torch.randn(m, k, device=DEV), torch.randn(n, k, device=DEV),
                              torch.randn(n, device=DEV)]
                    maxat, row.ct_maxat = timed_compile(fn, "max-autotune", inputs)
                    row.maxat = median_ms(lambda: maxat(*inputs))
                    del maxat
    torch_overlay.disable()
    print_perf(rows, ceilings)


def print_perf(rows: list[PerfRow], ceilings: dict) -> None:
    log(f"\nperf, ms (do_bench medians); ceilings: copy {ceilings['copy_TBps']:.2f} TB/s, "
        f"bf16 cuBLAS {ceilings['bf16_mm_TFLOPs']:.0f} TFLOP/s", summary=True)
    log("(static shapes; stock and overlay: lower of two medians, each its own compile; 'graph': the same\n"
        " replayed as a CUDA graph, GPU time without host overhead; kernel: the template's config)",
        summary=True)
    log(f"{'M,N,K':>18} {'eager':>7} {'stock':>7} {'maxat':>7} {'overlay':>7} {'x stock':>7} "
        f"{'x maxat':>7} {'TB/s':>5} {'TF/s':>5} {'graph s':>7} {'graph o':>7} {'ct stock':>8} "
        f"{'ct maxat':>8} {'ct ovl':>7}  path, kernel", summary=True)
    for r in rows:
        m, n, k = r.shape
        nbytes = (m * k + n * k + n) * 4 + m * n * 2
        log(f"{str(r.shape):>18} {r.eager:7.4f} {r.stock:7.4f} {r.maxat:7.4f} {r.overlay:7.4f} "
            f"{r.stock / r.overlay:7.2f} {r.maxat / r.overlay:7.2f} "
            f"{nbytes / r.overlay / 1e9:5.2f} {2 * m * n * k / r.overlay / 1e9:5.0f} "
            f"{r.stock_graph:7.4f} {r.overlay_graph:7.4f} "
            f"{r.ct_stock:8.2f} {r.ct_maxat:8.2f} {r.ct_overlay:7.2f}  {r.path}, {r.kernel}", summary=True)
    log("cost model per shape:", summary=True)
    for r in rows:
        log(f"  {str(r.shape):>18} {r.plan}", summary=True)
    perf_targets(rows)


def perf_targets(rows: list[PerfRow]) -> None:
    """The issue's performance targets, one entry of RESULTS each (the final summary)."""
    def sp(r):
        return r.stock / r.overlay

    def listing(rs, f):
        return ", ".join(f"{r.shape[0]}x{r.shape[1]}x{r.shape[2]} {f(r):.2f}" for r in rs)

    small = [r for r in rows if r.shape[0] <= 128 and not math.isnan(sp(r))]
    if small:
        med = statistics.median(sp(r) for r in small)
        RESULTS["perf M<=128 median"] = (med >= 2.0, f"median x{med:.2f} >= 2.0 vs stock ({listing(small, sp)})")
        worst = min(small, key=sp)
        RESULTS["perf M<=128 min"] = (sp(worst) >= 1.6, f"min x{sp(worst):.2f} >= 1.6 at {worst.shape}")
    for r in rows:
        if r.shape[0] == 1024:
            RESULTS["perf M=1024"] = (sp(r) >= 1.15, f"x{sp(r):.2f} >= 1.15 at {r.shape} ({r.path})")
    big = [r for r in rows if r.shape[0] >= 2048 and not math.isnan(sp(r))]
    if big:
        worst = min(big, key=sp)
        RESULTS["perf M>=2048"] = (sp(worst) >= 0.98, f"min x{sp(worst):.2f} >= 0.98 ({listing(big, sp)})")
    maxat = [r for r in rows if not math.isnan(r.maxat) and not math.isnan(r.overlay)]
    if maxat:
        def vm(r):
            return r.maxat / r.overlay
        worst = min(maxat, key=vm)
        RESULTS["perf vs max-autotune"] = (
            vm(worst) >= 1.0, f"min x{vm(worst):.2f} >= 1.0 at {worst.shape}, {len(maxat)}/{len(rows)} "
                              f"shapes measured ({listing(maxat, vm)})")

    def ct(r):
        return r.ct_overlay / r.ct_stock

    timed = [r for r in rows if not math.isnan(ct(r))]
    if timed:
        worst = max(timed, key=ct)
        RESULTS["compile time"] = (ct(worst) <= 1.5, f"max {ct(worst):.2f}x <= 1.5x stock at {worst.shape} "
                                   f"({worst.ct_overlay:.2f}s vs {worst.ct_stock:.2f}s; "
                                   f"{listing(timed, ct)}; Triton cache cold)")


def part_overlay_max_autotune(budget_s: float) -> None:
    """The template's configs and the stock path (one subgraph) autotuned together."""
    from torch._inductor.utils import run_and_get_code

    log("\n== 3b. overlay under max-autotune: template configs vs the stock path, benchmarked ==")
    fn = linear_fn()
    for shape in [(16, 4096, 4096), (128, 4096, 4096)]:
        if elapsed() > budget_s:
            log(f"  skipped from {shape} on: time budget {budget_s:.0f} s")
            break
        with guarded(f"overlay max-autotune {shape}"):
            m, n, k = shape[0], sz(shape[1]), sz(shape[2])
            inputs = linear_inputs(m, n, k)
            with no_caches():
                compiled = compile_fn(fn, "overlay-max-autotune")
                t0 = time.perf_counter()
                out, code = run_and_get_code(compiled, *inputs)
                ct = time.perf_counter() - t0
            chosen = "template" if "triton_tem_" in "\n".join(code) else "stock subgraph"
            ms = median_ms(lambda: compiled(*inputs))
            c = compare(out, references(lambda x, w, b: F.linear(x, w, b), F.linear, inputs, BF16),
                        BF16)
            ok = verdict(c)
            if not ok:
                FAILURES.append(f"overlay max-autotune {shape} values: {c}")
            log(f"{str(shape):>18} {ms:7.4f} ms, compile {ct:5.1f} s, chose {chosen}, "
                f"values {'ok' if ok else 'FAIL'}", summary=True)


# ------------------------------------------------------------------------ 4. variants

def part_variants(budget_s: float) -> list[dict]:
    """The template forced onto alternatives, measured against the cost model."""
    from torch._inductor.template_heuristics import tensorcore_mm as h

    log("\n== 4. variants: forced plans vs the cost model's predictions ==")
    T = h.TileConfig
    plans = [
        # (M, N, K), label, path, fused (a, b), config or None for the heuristic's
        ((16, 4096, 4096), "default", "template", None, None),
        ((16, 4096, 4096), "x pre-cast", "template", (False, True), None),
        # measured on the H200 before (BN16 28.6, BN64 29.5, BK64 s8 28.2, swap 28.0 us,
        # default 28.0): now split-K with 2-3 programs an SM streaming the weight
        ((16, 4096, 4096), "BN32 split2 s3", "template", (True, True), T(16, 32, 128, 8, 4, 3, False, 2)),
        ((16, 4096, 4096), "BN32 split4 s3", "template", (True, True), T(16, 32, 128, 8, 4, 3, False, 4)),
        ((1, 4096, 4096), "default", "template", None, None),
        # stock max-autotune's fused reduction took 22.2 us here (BENCHMARKS.md): more
        # programs an SM, or wider K steps, to stream the weight faster
        ((1, 4096, 4096), "BN32 split2 s3", "template", (True, True), T(16, 32, 128, 8, 4, 3, False, 2)),
        ((1, 4096, 4096), "BN64 split4 s3", "template", (True, True), T(16, 64, 128, 8, 4, 3, False, 4)),
        ((1, 4096, 4096), "BN16 s4", "template", (True, True), T(16, 16, 128, 8, 4, 4)),
        ((1, 4096, 4096), "BN32 w8", "template", (True, True), T(16, 32, 128, 8, 8, 6)),
        ((1, 4096, 4096), "BN32 BK256 s3", "template", (True, True), T(16, 32, 256, 8, 4, 3)),
        ((1, 4096, 4096), "BN32 BK64 s8", "template", (True, True), T(16, 32, 64, 8, 4, 8)),
        ((16, 11008, 4096), "default", "template", None, None),
        ((16, 11008, 4096), "BN64 s4", "template", (True, True), T(16, 64, 128, 8, 4, 4)),
        ((16, 11008, 4096), "BN32 s3", "template", (True, True), T(16, 32, 128, 8, 4, 3)),
        ((16, 11008, 4096), "BN32", "template", (True, True), T(16, 32, 128, 8, 4, 6)),
        ((16, 1024, 4096), "default", "template", None, None),
        ((16, 1024, 4096), "no split", "template", (True, True), T(16, 16, 128, 8, 4, 6)),
        ((16, 1024, 4096), "BN32 split4", "template", (True, True), T(16, 32, 128, 8, 4, 6, False, 4)),
        ((16, 4096, 4096), "BN64 split2", "template", (True, True), T(16, 64, 128, 8, 4, 5, False, 2)),
        # measured before: both fused 64x64 42.3, x pre-cast 64x64 36.6 (now the default),
        # 128x32 w4 40.4, 64x128 w8 57.7, 128x64 w8 61.7 us
        ((128, 4096, 4096), "default", "template", None, None),
        ((128, 4096, 4096), "both fused", "template", (True, True), T(64, 64, 64, 8, 4, 6)),
        ((128, 4096, 4096), "x pre-cast 128x32", "template", (False, True), T(128, 32, 64, 8, 4, 5)),
        ((128, 4096, 4096), "x pre-cast split2", "template", (False, True), T(64, 64, 64, 8, 4, 4, False, 2)),
        ((128, 4096, 4096), "128x128 split4", "template", (True, True), T(128, 128, 64, 8, 8, 3, False, 4)),
        # measured before: w fused swap 91.9 (stock 87.1), no swap 129.6, both fused 147.1
        ((1024, 4096, 4096), "w fused, swap 256", "template", (False, True), T(256, 128, 64, 8, 8, 3, True)),
        ((2048, 4096, 4096), "w fused, swap 256", "template", (False, True), T(256, 128, 64, 8, 8, 3, True)),
    ]
    fn = linear_fn()
    results = []
    log("variants (forced plans):", summary=True)
    log(f"{'M,N,K':>18} {'variant':18} {'ms':>7} {'pred':>7} {'cfg':28} note", summary=True)
    stock_ms: dict = {}
    for shape, label, path, fused, cfg in plans:
        if elapsed() > budget_s:
            log(f"  variants skipped from {shape} {label} on: time budget {budget_s:.0f} s")
            break
        with guarded(f"variant {shape} {label}"):
            m, n, k = shape[0], sz(shape[1]), sz(shape[2])
            inputs = linear_inputs(m, n, k)
            if shape not in stock_ms:
                with no_caches():
                    stock = compile_fn(fn, "stock")
                    stock(*inputs)
                    stock_ms[shape] = median_ms(lambda: stock(*inputs))
            with no_caches(), h.forced(path, fused, cfg), PlanRecorder() as rec:
                compiled = compile_fn(fn, "overlay")
                compiled(*inputs)
                ms = median_ms(lambda: compiled(*inputs))
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
            log(f"{str(shape):>18} {label:18} {ms:7.4f} {pred:7.4f} "
                f"{str(plan.config if plan else ''):28} {note}", summary=True)
            results.append(dict(shape=shape, variant=label, ms=ms, predicted_ms=pred,
                                config=str(plan.config if plan else None), note=note))
    log("\nReading: a template variant whose 'measured/predicted' is well below 1 beats the model:\n"
        "  compute-bound -> raise eff_cast_reg (fused w, swap) / eff_cast_smem (both fused);\n"
        "  dram-bound -> raise stream; l2-bound -> raise l2_bw (DeviceModel fields, or the H200 entry\n"
        "  of DEVICE_MODELS); a variant faster than 'default' -> change select_configs.")
    return results


# ------------------------------------------------------- 5. gelu-add epilogue (issue 6)

EPILOGUE_SHAPES = [(8192, 4096, 1024), (4096, 4096, 4096), (2048, 16384, 4096)]


def gelu_linear_fn(approximate: str, autocast_dtype=None) -> Callable:
    def fn(x, w, b, r):
        with autocast(autocast_dtype) if autocast_dtype else contextlib.nullcontext():
            return F.gelu(F.linear(x, w, b), approximate=approximate) + r

    return fn


def addmm_gelu_add(x, w, b, r):
    return torch._addmm_activation(b, x, w.t(), use_gelu=True) + r


def epilogue_values(out: torch.Tensor, eager: torch.Tensor, ref: torch.Tensor,
                    scale: torch.Tensor) -> tuple[bool, str]:
    """Within one bf16 step (at ``scale``, |gelu| + |r|) of eager everywhere but where the
    matmul's own rounding moved (at most 2 steps on 1%), and no further from fp64 than
    eager (+2%)."""
    ulp = numerics.ulp_at(scale.double(), BF16)
    ulps = ((out.double() - eager.double()).abs() / ulp)
    off = (ulps > 1).double().mean().item()

    def err(t):
        return ((t.double() - ref).norm() / ref.norm()).item()

    ok = ulps.max().item() <= 2 and off <= 0.01 and err(out) <= 1.02 * err(eager) + 1e-7
    return ok, f"ulps max {ulps.max().item():.1f}, >1ulp {off:.4f}, err {err(out):.2e} (eager {err(eager):.2e})"


def part_epilogue(budget_s: float) -> list[dict]:
    """gelu(F.linear(x, w, b)) + r: the cost model's choice, forced configs, stock, addmm_act."""
    from torch._inductor.template_heuristics import tensorcore_mm as h

    log("\n== 5. gelu-add epilogue: gelu(F.linear(x, w, b)) + r, do_bench medians ==")
    T = h.TileConfig
    # H200, 2026-11-21 (stock 0.168 ms at 8192x4096x1024, 0.220 at 4096^3, 0.446 at
    # 2048x16384x4096): the best 0.189 (128x128x64 w8 s4), 0.235 (128x256x64 w8 s3)
    # and 0.475 ms; a persistent variant with the tile and K loops flattened (epilogue
    # overlapped with the next tile's loads) took 0.186, 0.233 and 0.445 ms: not kept
    sweep = [T(128, 128, 64, 8, 8, 4), T(128, 128, 64, 8, 8, 3), T(128, 128, 64, 8, 8, 2),
             T(128, 128, 32, 8, 8, 4), T(128, 128, 32, 8, 8, 3), T(128, 256, 32, 8, 8, 3),
             T(128, 128, 64, 8, 4, 3), T(64, 256, 64, 8, 8, 3), T(128, 256, 64, 8, 8, 3),
             T(128, 64, 64, 8, 4, 4)]
    results = []
    log(f"{'case':34} {'mode':26} {'ms':>7} {'x stock':>7} {'kernels':>7} path / values", summary=True)

    def row(label, mode, ms, stock_ms, kernels="", note=""):
        log(f"{label:34} {mode:26} {ms:7.4f} {stock_ms / ms:7.2f} {kernels:>7} {note}", summary=True)
        results.append(dict(case=label, mode=mode, ms=ms, speedup=stock_ms / ms, note=note))

    def run_overlay(fn, inputs, forced_cfg=None):
        from torch._inductor.utils import run_and_get_code
        ctx = (h.forced("template", (False, False), forced_cfg) if forced_cfg is not None
               else contextlib.nullcontext())
        with no_caches(), ctx, PlanRecorder() as rec:
            compiled = compile_fn(fn, "overlay", overlays=("tensorcore_mm", "gelu_add"))
            out, code = run_and_get_code(compiled, *inputs)
        src = "\n".join(code)
        kernels = src.count("@triton.jit")
        externs = src.count("extern_kernels.")
        ms = median_ms(lambda: compiled(*inputs))
        plan = rec.plans[-1][2] if rec.plans else None
        torch_overlay.disable()
        return out, ms, f"{kernels}+{externs}x", plan, kernel_config(code)

    for variant in ("bf16", "autocast"):
        for approximate in ("none", "tanh"):
            for shape in EPILOGUE_SHAPES:
                m, n, k = (sz(d) for d in shape)
                if elapsed() > budget_s:
                    log(f"  epilogue: skipped from {variant} {approximate} {(m, n, k)}: budget")
                    return results
                label = f"{variant} {approximate} {m}x{n}x{k}"
                with guarded(f"epilogue {label}"):
                    dt = BF16 if variant == "bf16" else torch.float32
                    g = torch.Generator(device=DEV).manual_seed(1)
                    inputs = [torch.randn(m, k, device=DEV, generator=g).to(dt),
                              (torch.randn(n, k, device=DEV, generator=g) / math.sqrt(k)).to(dt),
                              (0.1 * torch.randn(n, device=DEV, generator=g)).to(dt),
                              torch.randn(m, n, device=DEV, generator=g).to(dt)]
                    fn = gelu_linear_fn(approximate, BF16 if variant == "autocast" else None)
                    eager = fn(*inputs)
                    ref = gelu_linear_fn(approximate)(*[t.double() for t in inputs])
                    scale = (eager - inputs[3]).abs() + inputs[3].abs()  # |gelu| + |r|
                    with no_caches():
                        stock = compile_fn(fn, "stock")
                        stock(*inputs)
                        stock_ms = median_ms(lambda: stock(*inputs))
                    row(label, "stock", stock_ms, stock_ms)
                    if approximate == "tanh" and variant == "bf16":
                        row(label, "addmm_act + r", median_ms(lambda: addmm_gelu_add(*inputs)), stock_ms)
                    out, ms, kernels, plan, cfg = run_overlay(fn, inputs)
                    ok, note = epilogue_values(out, eager, ref, scale)
                    if not ok:
                        FAILURES.append(f"epilogue {label} values: {note}")
                    row(label, "overlay", ms, stock_ms, kernels,
                        f"{plan.describe() if plan else 'no plan'} | {cfg} | {note}")
                    if approximate == "none" and (variant == "bf16" or shape == EPILOGUE_SHAPES[0]):
                        for c in sweep[:2] if DEV == "cpu" else sweep:
                            out, ms, kernels, plan, _ = run_overlay(fn, inputs, c)
                            ok, note = epilogue_values(out, eager, ref, scale)
                            pred = next((q.seconds * 1e3 for q in plan.predictions
                                         if q.label == "template[16-bit]"), math.nan) if plan else math.nan
                            row(label, f"forced {c}", ms, stock_ms, kernels,
                                f"pred {pred:.4f} {'ok' if ok else 'VALUES ' + note}")
    return results


# -------------------------------------------------------------------------- 6. limits

try:
    import triton
    import triton.language as tl
except ImportError:  # the GPU-free plumbing (--smoke-cpu) does not need these kernels
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
    """What bounds issue 5's decode and M=1024 targets (see the docstring, 6.)."""
    import itertools

    from triton.tools.tensor_descriptor import TensorDescriptor

    from torch._inductor.template_heuristics import tensorcore_mm as h

    log("\n== 6. limits: pure reads, decode kernel classes, M=1024 compile (do_bench medians) ==")
    fn = linear_fn()

    def cold(mode, inputs, forced=None):
        """(median ms, seconds of the first call) of ``fn`` compiled in ``mode``, with fresh
        Inductor and Triton caches as tools/bench.py: the first call is a cold compile."""
        from torch._inductor.utils import fresh_cache
        with (no_caches(), fresh_cache(),
              h.forced(*forced) if forced else contextlib.nullcontext()):
            compiled, seconds = timed_compile(fn, mode, inputs)
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
    m, n, k = 1024, 4096, 4096
    inputs = linear_inputs(m, n, k)
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


# ------------------------------------------------------------------------ 7. freezing

FREEZING_SHAPES = [(1, 14336, 4096), (16, 14336, 4096), (64, 14336, 4096), (256, 14336, 4096),
                   (1024, 14336, 4096), (1, 4096, 4096), (16, 4096, 4096), (4, 14336, 4096),
                   (1, 4096, 14336), (16, 4096, 14336)]
FREEZING_MODES = ("stock", "stock+freezing", "overlay", "overlay+freezing")


class LlamaBlock(torch.nn.Module):
    """A Llama-style decoder layer: RMSNorm, GQA attention over a KV cache, SwiGLU MLP."""

    def __init__(self, d: int, heads: int, kv_heads: int, ffn: int) -> None:
        super().__init__()
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)  # noqa: E731
        self.h, self.kvh, self.hd = heads, kv_heads, d // heads
        self.wq, self.wk, self.wv, self.wo = lin(d, d), lin(d, kv_heads * self.hd), \
            lin(d, kv_heads * self.hd), lin(d, d)
        self.w1, self.w3, self.w2 = lin(d, ffn), lin(d, ffn), lin(ffn, d)
        self.n1, self.n2 = torch.nn.Parameter(torch.ones(d)), torch.nn.Parameter(torch.ones(d))

    @staticmethod
    def norm(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * w

    @staticmethod
    def rope(x, cos, sin):
        x1, x2 = x.chunk(2, -1)
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1)

    def forward(self, x, cos, sin, kc, vc):
        B, S, D = x.shape
        hx = self.norm(x, self.n1)
        q = self.rope(self.wq(hx).view(B, S, self.h, self.hd), cos, sin)
        k = self.rope(self.wk(hx).view(B, S, self.kvh, self.hd), cos, sin)
        v = self.wv(hx).view(B, S, self.kvh, self.hd)
        k = torch.cat([kc, k.transpose(1, 2).to(kc.dtype)], 2)
        v = torch.cat([vc, v.transpose(1, 2).to(vc.dtype)], 2)
        q = q.transpose(1, 2).reshape(B, self.kvh, (self.h // self.kvh) * S, self.hd)
        a = torch.softmax((q @ k.transpose(2, 3)).float() * self.hd ** -0.5, -1).to(v.dtype)
        o = (a @ v).view(B, self.h, S, self.hd).transpose(1, 2).reshape(B, S, D)
        x = x + self.wo(o)
        hx = self.norm(x, self.n2)
        return x + self.w2(F.silu(self.w1(hx)) * self.w3(hx))


class Llama(torch.nn.Module):
    """Two Llama-3-8B-sized layers (d 4096, 32 heads, 8 KV heads, ffn 14336), fp32."""

    def __init__(self, layers: int = 2, d: int = 4096, heads: int = 32, kv_heads: int = 8,
                 ffn: int = 14336) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(LlamaBlock(d, heads, kv_heads, ffn) for _ in range(layers))

    def forward(self, x, cos, sin, *caches):
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, caches[2 * i], caches[2 * i + 1])
        return LlamaBlock.norm(x, torch.ones_like(x[0, 0]))


def llama_decode_inputs(model: Llama, batch: int, ctx: int = 512, seed: int = 0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    blk = model.layers[0]
    x = torch.randn(batch, 1, blk.h * blk.hd, device=DEV, generator=g)
    ang = torch.randn(1, 1, 1, blk.hd // 2, device=DEV, generator=g)
    caches = [torch.randn(batch, blk.kvh, ctx, blk.hd, device=DEV, generator=g).to(BF16)
              for _ in range(2 * len(model.layers))]
    return [x, ang.cos(), ang.sin(), *caches]


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


FREEZING_BEFORE = "overlay+freezing(before)"
_FN_IDS = __import__("itertools").count()


def _fresh_fn(body: Callable) -> Callable:
    """``body`` behind a code object of its own: Dynamo caches compiles per code object,
    so each mode's compile stays valid while the next mode compiles (no reset between)."""
    ns: dict[str, Any] = {"body": body}
    name = f"fn_{next(_FN_IDS)}"
    exec(f"def {name}(*args):\n    return body(*args)\n", ns)  # noqa: S102
    return ns[name]


@contextlib.contextmanager
def _without_decode16():
    """The overlay as it was before issue 17's 16-bit decode path: stream_cublas16 = 0."""
    from torch._inductor.template_heuristics import tensorcore_mm as h

    saved = {k: dict(v) for k, v in h.DEVICE_MODELS.items()}
    for v in h.DEVICE_MODELS.values():
        v["stream_cublas16"] = 0.0
    try:
        yield
    finally:
        h.DEVICE_MODELS.clear()
        h.DEVICE_MODELS.update(saved)


def _frozen_compile(body: Callable, args: list, mode: str, forced=None):
    """(compiled, code paths, output, counts) of ``body`` compiled in ``mode`` (one of
    FREEZING_MODES or FREEZING_BEFORE) under torch.no_grad(), its first call the compile."""
    import torch._inductor.config as inductor_config

    freezing = "+freezing" in mode
    compiled = compile_fn(_fresh_fn(body), mode.split("+")[0], fresh=False)
    if forced:  # the overlay's modules import only while it is enabled (compile_fn's)
        from torch._inductor.template_heuristics import tensorcore_mm as h
    with (torch.no_grad(), no_caches(), inductor_config.patch(freezing=freezing),
          h.forced(*forced) if forced else contextlib.nullcontext(),
          _without_decode16() if mode == FREEZING_BEFORE else contextlib.nullcontext()):
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


def _freezing_row(body: Callable, args: list, modes: tuple, forced=None):
    torch._dynamo.reset()
    compiled, info = {}, {}
    for mode in modes:
        fn, paths, out, counts = _frozen_compile(body, args, mode, forced)
        compiled[mode], info[mode] = fn, (paths, out, counts)
    t = _time_rounds(compiled, args)
    torch._dynamo.reset()
    return t, info


def _fmt_times(t: dict, modes: tuple) -> str:
    return " ".join(f"{t[m][0]:8.4f}/{t[m][3]:7.4f}" for m in modes)


def _log_row(label: str, t: dict, modes: tuple, tail: str) -> None:
    sf, of = t["stock+freezing"], t["overlay+freezing"]
    log(f"{label:24} {_fmt_times(t, modes)}  {sf[0] / of[0]:5.2f}x {sf[3] / of[3]:5.2f}x  {tail}",
        summary=True)
    log("   spread (min-max do_bench): " + "; ".join(
        f"{mode} {t[mode][1]:.4f}-{t[mode][2]:.4f}" for mode in modes))


def _numerics(c: dict) -> str:
    return (f"err {c['err']:.2e} (eager {c['eager_err']:.2e}) ulps {c['ulps']:.2f} "
            f"mism {c['mismatch']:.4f} {'ok' if verdict(c) else 'FAIL'}")


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
    inference): stock, stock + freezing, overlay, overlay + freezing side by side, and the
    overlay + freezing as it was before (its 16-bit decode path off)."""
    modes = (*FREEZING_MODES, FREEZING_BEFORE)
    log("\n== 7. freezing: fp32 nn.Linear / Llama decode under bf16 autocast, no_grad; ms as "
        "do_bench median (L2 flushed; median of 3 interleaved rounds) / CUDA-graph replay ==")
    header = " ".join(f"{m:>16}" for m in modes)
    log(f"{'case':24} {header}  ovl+fz/stock+fz (do_bench, graph)  numerics (overlay+freezing)",
        summary=True)
    for m, n, k in FREEZING_SHAPES:
        if elapsed() > budget_s:
            log(f"  freezing skipped from {(m, n, k)} on: time budget")
            break
        with guarded(f"freezing linear {(m, n, k)}"):
            lin, x, body = frozen_linear_case(m, n, k)
            t, info = _freezing_row(body, [x], modes)
            w, b = lin.weight, lin.bias
            c = compare(info["overlay+freezing"][1],
                        references(lambda x, w, b: F.linear(x, w, b), F.linear, [x, w, b], BF16), BF16)
            if not verdict(c):
                FAILURES.append(f"freezing {(m, n, k)} values: {c}")
            _log_row("linear %dx%dx%d" % (m, n, k), t, modes, _numerics(c))
            log("   paths: " + "; ".join(f"{mode}: {info[mode][0]} {info[mode][2]}" for mode in modes))
            del lin, t, info
    with guarded("freezing bmm"):
        # a batched weight (a parameter of [B, N, K]) under freezing
        g = torch.Generator(device=DEV).manual_seed(0)
        wb = torch.nn.Parameter(torch.randn(8, 1024, 4096, device=DEV, generator=g) / 64,
                                requires_grad=False)
        xb = torch.randn(8, 16, 4096, device=DEV, generator=g)

        def bbody(x):
            with autocast(BF16):
                return torch.bmm(x, wb.transpose(1, 2))

        t, info = _freezing_row(bbody, [xb], modes)
        bmm_t = lambda x, w: torch.bmm(x, w.transpose(1, 2))  # noqa: E731
        c = compare(info["overlay+freezing"][1], references(bmm_t, bmm_t, [xb, wb], BF16), BF16)
        if not verdict(c):
            FAILURES.append(f"freezing bmm values: {c}")
        _log_row("bmm 8x16x1024x4096", t, modes, _numerics(c))
        log("   paths: " + "; ".join(f"{mode}: {info[mode][0]} {info[mode][2]}" for mode in modes))
    for batch in (1, 16):
        if elapsed() > budget_s:
            break
        with guarded(f"freezing llama B={batch}"):
            torch.manual_seed(0)
            model = Llama().to(DEV).requires_grad_(False)
            for blk in model.layers:  # norms away from 1: their weights are read too
                blk.n1.uniform_(0.5, 1.5)
                blk.n2.uniform_(0.5, 1.5)
            args = llama_decode_inputs(model, batch)

            def mbody(*a):
                with autocast(BF16):
                    return model(*a)

            t, info = _freezing_row(mbody, args, modes)
            with torch.no_grad():
                eager = mbody(*args).float()
                ref = model.double()(*[a.double() for a in args])
                model.float()
            out = info["overlay+freezing"][1].float()
            stock_out = info["stock+freezing"][1].float()
            rel = lambda v: ((v.double() - ref).norm() / ref.norm()).item()  # noqa: E731
            if rel(out) > 1.05 * rel(eager) + 1e-6:
                FAILURES.append(f"freezing llama B={batch}: rel err {rel(out):.2e} vs eager {rel(eager):.2e}")
            _log_row("Llama decode B=%d" % batch, t, modes,
                     f"rel err vs fp64 {rel(out):.2e} (eager {rel(eager):.2e}, stock+fz "
                     f"{rel(stock_out):.2e}), max |ovl+fz - eager| {(out - eager).abs().max().item():.2e}")
            log("   paths: " + "; ".join(f"{mode}: {info[mode][0]} {info[mode][2]}" for mode in modes))
            del model, t, info


def part_freezing_variants(budget_s: float) -> None:
    """The decode kernels on a frozen bf16 weight, forced, against frozen stock (CUDA-graph
    replays, so launch overhead does not hide the weight read): what the cost model's
    16-bit rates (stream16, stream_gemv16, stream_cublas16) are."""
    from torch._inductor.template_heuristics import tensorcore_mm as h

    T = h.TileConfig
    log("\n== 7b. freezing variants: forced decode kernels on the frozen bf16 weight; "
        "CUDA-graph ms (do_bench median) ==")
    thin = [T(16, 64, 128, 8, 4, 3), T(16, 64, 128, 8, 4, 6), T(16, 32, 128, 8, 4, 6),
            T(16, 16, 128, 8, 4, 6), T(16, 16, 256, 8, 4, 4)]
    cases = [(1, 14336, 4096), (16, 14336, 4096), (16, 4096, 4096), (16, 4096, 14336)]
    for m, n, k in cases:
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", default="values,training,perf,variants")
    parser.add_argument("--budget-s", type=float, default=300.0,
                        help="seconds: stock max-autotune starts no new shape after 55%% of it, "
                             "the overlay's after 90%%, variants none after it")
    parser.add_argument("--no-max-autotune", action="store_true")
    parser.add_argument("--out", type=pathlib.Path, default=None)
    parser.add_argument("--smoke-cpu", action="store_true",
                        help="no GPU: run the plumbing on the CPU at small sizes (the overlay "
                             "falls back there; nothing is measured that means anything)")
    args = parser.parse_args()
    global DEV, SHRINK, PERF_SHAPES
    if args.smoke_cpu:
        DEV, SHRINK = "cpu", 64
        PERF_SHAPES = [tuple(max(1, d // SHRINK) for d in s) for s in PERF_SHAPES[:3]]
    elif not torch.cuda.is_available():
        log("no CUDA GPU: nothing to check here (the GPU-free checks are test/test_tensorcore_mm.py)")
        return 2
    import triton

    name = torch.cuda.get_device_name() if DEV == "cuda" else "cpu (smoke run)"
    log(f"{name}, torch {torch.__version__}, triton {triton.__version__}")
    torch_overlay.load_overlays()
    import warnings

    import torch._inductor.config as inductor_config

    # max-autotune's per-choice tables would fill the output; the timings are ours
    inductor_config.autotune_num_choices_displayed = 0
    inductor_config.max_autotune_report_choices_stats = False
    warnings.filterwarnings("ignore", category=UserWarning)
    parts = args.parts.split(",")
    rows: list[PerfRow] = []
    variants: list[dict] = []
    # perf first: stock max-autotune is the slowest part and the one the budget trims
    if "perf" in parts:
        part_perf(rows, args.budget_s * 0.55, not args.no_max_autotune)
    if "values" in parts:
        part_values()
    if "training" in parts:
        part_training()
    if "perf" in parts and not args.no_max_autotune:
        part_overlay_max_autotune(args.budget_s * 0.9)
    if "variants" in parts:
        variants = part_variants(args.budget_s)
    if "epilogue" in parts:
        variants += part_epilogue(args.budget_s)
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
    for key, (ok, text) in RESULTS.items():
        log(f"{'PASS' if ok else 'MISS' if key.startswith(('perf', 'compile')) else 'FAIL'} "
            f"{key}: {text}")
    log(f"{len(FAILURES)} failure(s)")
    for f in FAILURES:
        log("  " + f[:300])
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "check_tensorcore_mm.json").write_text(json.dumps(dict(
            device=name, torch=torch.__version__,
            perf=[dataclasses.asdict(r) for r in rows], variants=variants,
            results={k: dict(ok=ok, text=t) for k, (ok, t) in RESULTS.items()},
            failures=FAILURES), indent=1, default=str))
        (args.out / "check_tensorcore_mm.log").write_text("\n".join(LOG_LINES) + "\n")
    value_failures = [f for f in FAILURES if not f.startswith(("perf", "max-autotune", "variant"))]
    return 1 if value_failures else 0


if __name__ == "__main__":
    sys.exit(main())
