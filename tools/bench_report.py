"""The numbers tools/bench.py derives from its measurements, and how it shows them.

A results document (the JSON file) holds, per case, each mode's raw measurement:
``status`` ("ok", "WRONG", "failed", "n/a", "skipped"), ``ms``, ``compile_s``,
``error``. Everything else (rates, fractions of the ceilings, speedups, the floor)
is derived here from those, so the terminal, the JSON and BENCHMARKS.md agree.
"""
from __future__ import annotations

import json
import math
import os
import pathlib
from collections import defaultdict

from bench_workloads import MODES, STOCK_MODES, WORKLOADS

# A compiled kernel may round differently from eager (fused epilogues skip the bf16
# rounding in between, accumulation order changes), but an error several times
# eager's own against fp64 is a bug. The floor keeps a near-exact eager (fp32
# pointwise) from setting a tolerance below what a different libdevice call gives.
TOLERANCE_FACTOR = 4.0
ERROR_FLOOR = {"torch.float32": 1e-5, "torch.float16": 1e-4, "torch.bfloat16": 1e-3}


def tolerance(eager_error: float, dtype: str) -> float:
    eager = eager_error if math.isfinite(eager_error) else 0.0
    return TOLERANCE_FACTOR * max(eager, ERROR_FLOOR[dtype])


def is_wrong(error: float, tol: float) -> bool:
    return not error <= tol  # NaN never passes


def is_ok(result: dict | None) -> bool:
    return bool(result) and result.get("status") == "ok" and bool(result.get("ms"))


def speedup(baseline: dict | None, result: dict | None) -> float | None:
    """How many times faster ``result`` is than ``baseline``; None unless both are ok."""
    if not (is_ok(baseline) and is_ok(result)):
        return None
    return baseline["ms"] / result["ms"]


def floor_ms(flops: float, nbytes: float, ceilings: dict) -> tuple[float, str]:
    """The fastest any version could run, and whether arithmetic or bytes bound it."""
    compute = flops / ceilings["bf16_mm_TFLOPs"] / 1e9
    memory = nbytes / ceilings["copy_GBps"] / 1e6
    return (compute, "compute") if compute > memory else (memory, "memory")


def derive(case: dict, ceilings: dict) -> dict:
    """Add the floor, and to each ok mode its rates, fractions and speedups, in place."""
    case["floor_ms"], case["bound"] = floor_ms(case["flops"], case["bytes"], ceilings)
    modes = case["modes"]
    for result in modes.values():
        for key in ("TFLOPs", "GBps", "peak_fraction", "copy_fraction", "floor_fraction"):
            result.pop(key, None)
        result["speedup"] = {s: speedup(modes.get(s), result) for s in STOCK_MODES if s in modes}
        if not is_ok(result):
            continue
        ms = result["ms"]
        if case["flops"]:
            result["TFLOPs"] = case["flops"] / ms / 1e9
            result["peak_fraction"] = result["TFLOPs"] / ceilings["bf16_mm_TFLOPs"]
        result["GBps"] = case["bytes"] / ms / 1e6
        result["copy_fraction"] = result["GBps"] / ceilings["copy_GBps"]
        result["floor_fraction"] = case["floor_ms"] / ms
    return case


# -- the results document ---------------------------------------------------------

def new_document(env: dict, ceilings: dict | None, settings: dict) -> dict:
    return {"schema": 1, "env": env, "ceilings": ceilings, "settings": settings,
            "results": [], "compile_only": []}


def upsert(doc: dict, case_result: dict) -> dict:
    """Merge one case's measurements (a later phase adds modes to an earlier entry)."""
    for existing in doc["results"]:
        if existing["id"] == case_result["id"]:
            existing["modes"].update(case_result["modes"])
            for key, value in case_result.items():  # an earlier phase may have failed early
                existing.setdefault(key, value)
            case_result = existing
            break
    else:
        doc["results"].append(case_result)
    if doc["ceilings"]:
        derive(case_result, doc["ceilings"])
    return case_result


def write_json(doc: dict, path: pathlib.Path) -> None:
    # write then rename: a run killed mid-write leaves the previous complete file
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, path)


def read_json(path: pathlib.Path) -> dict:
    return json.loads(pathlib.Path(path).read_text())


# -- cells and tables -------------------------------------------------------------

def cell(result: dict | None, key: str = "ms") -> str:
    """A mode's ``key`` for a table; a result that is not ok never shows a speed."""
    if not result:
        return "-"
    if result["status"] != "ok":
        return {"n/a": "n/a", "skipped": "skipped"}.get(result["status"], result["status"])
    return number(result.get(key), key)


def number(value: float | None, key: str = "") -> str:
    if value is None:
        return "-"
    if key == "ms":
        return f"{value:.4f}"
    if key.endswith("fraction"):
        return f"{100 * value:.0f}%"
    if key in ("TFLOPs", "GBps", "compile_s"):
        return f"{value:.1f}"
    if key in ("error", "tolerance"):
        return f"{value:.1e}"
    if key == "abs":
        return f"{value:.2g}"
    if key == "GB":
        return f"{value:.2f}"
    return f"{value:.2f}x"  # speedups


def text_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = [headers, ["-" * w for w in widths], *rows]
    return "\n".join("  ".join(str(c).rjust(w) if i else str(c).ljust(w)
                               for i, (c, w) in enumerate(zip(line, widths))) for line in lines)


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = [headers, ["---"] * len(headers), *rows]
    return "\n".join("| " + " | ".join(str(c) for c in line) + " |" for line in lines)


def modes_run(cases: list[dict]) -> list[str]:
    present = {m for c in cases for m, r in c["modes"].items() if r["status"] != "n/a"}
    return [m for m in MODES if m in present]


SPEEDUP_PAIRS = [(m, s) for m in ("overlay", "overlay-max-autotune")
                 for s in ("stock", "stock-max-autotune")] + [
    ("stock_freezing", "stock"), ("overlay_freezing", "stock_freezing"),
    ("overlay_freezing", "stock")]


def summary_table(cases: list[dict]) -> tuple[list[str], list[list[str]]]:
    """One row per case: each mode's ms, the overlay speedups, the best against the floor."""
    modes = modes_run(cases)
    pairs = [(m, s) for m, s in SPEEDUP_PAIRS if m in modes and s in modes]
    headers = (["case"] + [MODES[m].short + " ms" for m in modes]
               + [f"{MODES[m].short} / {MODES[s].short}" for m, s in pairs] + ["best / floor"])
    rows = []
    for c in cases:
        best = max((r.get("floor_fraction") or 0 for r in c["modes"].values()), default=0)
        rows.append([c["label"]] + [cell(c["modes"].get(m)) for m in modes]
                    + [number(c["modes"].get(m, {}).get("speedup", {}).get(s)) for m, s in pairs]
                    + [number(best or None, "floor_fraction")])
    return headers, rows


DETAIL_KEYS = ["ms", "TFLOPs", "GBps", "peak_fraction", "copy_fraction", "compile_s"]
DETAIL_HEADERS = ["ms", "TFLOP/s", "GB/s", "% bf16 peak", "% copy BW", "compile s"]


def detail_rows(case: dict) -> list[list[str]]:
    """One row per mode: rates, fractions, speedups against each stock mode, error."""
    rows = []
    for name in modes_run([case]):
        r = case["modes"][name]
        compile_s = number(r.get("compile_s"), "compile_s")  # measured even when WRONG
        rows.append([MODES[name].short] + [cell(r, k) for k in DETAIL_KEYS[:-1]] + [compile_s]
                    + [number(r.get("speedup", {}).get(s)) for s in STOCK_MODES]
                    + [number(r.get("error"), "error")])
    return rows


def detail_headers() -> list[str]:
    return (["mode"] + DETAIL_HEADERS + [f"vs {MODES[s].short}" for s in STOCK_MODES]
            + ["rel err"])


def case_heading(case: dict) -> str:
    floor = (f", floor {case['floor_ms']:.4f} ms ({case['bound']})"
             if "floor_ms" in case else "")
    flops = f"{case['flops'] / 1e9:.1f} GFLOP, " if case["flops"] else ""
    tol = f", tolerance {case['tolerance']:.1e}" if case.get("tolerance") else ""
    return f"{case['workload']} {case['label']}: {flops}{case['bytes'] / 1e6:.1f} MB{floor}{tol}"


def messages(case: dict) -> list[str]:
    return [f"{MODES[m].short}: {r['message']}" for m, r in case["modes"].items()
            if r.get("message")]


def by_workload(doc: dict) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for case in doc["results"]:
        groups[case["workload"]].append(case)
    return groups


def terminal_summary(doc: dict) -> str:
    parts = []
    for workload, cases in by_workload(doc).items():
        parts.append(f"\n== {workload}: {WORKLOADS[workload].title}")
        parts.append(text_table(*summary_table(cases)))
    if doc.get("compile_only"):
        parts.append("\n== compile time through the GPU-free harness (s)")
        parts.append(text_table(*compile_only_table(doc["compile_only"])))
    return "\n".join(parts)


def compile_only_table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    headers = ["workload", "case", "stock s", "overlay s", "overlay s / stock s", "code differs"]
    return headers, [[r["workload"], r["label"], number(r.get("stock_s"), "compile_s"),
                      number(r.get("overlay_s"), "compile_s"),
                      number(ratio(r.get("overlay_s"), r.get("stock_s"))),
                      {True: "yes", False: "no"}.get(r.get("code_differs"), "-")]
                     for r in rows]


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


# -- BENCHMARKS.md ----------------------------------------------------------------

PLOT_NAME = "linear_speedup.png"

READING = """\
Every speed here is a ratio against stock Inductor measured in the same run on the
same GPU; the absolute figures are for orientation only. Each time is the median of
`triton.testing.do_bench` (warm-up, L2 flushed, inputs rotated through several random
sets where they fit in the 60 MB L2). *stock* is `torch.compile` with no overlay,
*overlay* the same with `torch_overlay.enable(...)`; *MA* is
`mode="max-autotune-no-cudagraphs"`; *addmm_act* is eager
`torch._addmm_activation(..., use_gelu=True) + r` (cuBLASLt's GELU epilogue).
*frz* (`stock_freezing`, `overlay_freezing`): `torch._inductor.config.freezing = True`
under `torch.no_grad()`, the case's weights held as `nn.Parameter`s of a module so that
freezing folds them into constants (bf16 ones where autocast casts them: its bytes and
floor still count the fp32 weights); inference cases with weights only.
`a / b` is how many times faster *a* is than *b*. *best / floor*: the floor is the
larger of FLOPs over the bf16 cuBLAS rate and bytes (inputs read once, outputs written
once) over the copy bandwidth, both measured in the same run. Each mode's output is
compared with an fp64 reference (relative Frobenius error); one whose error exceeds
4x eager's own is shown as **WRONG** and never as a speed. Compile time is the first
call after `torch._dynamo.reset()` in a fresh cache directory per mode. A `-` is a
mode not run: max-autotune runs on the issue's shape sets unless `--max-autotune all`."""


def render_markdown(doc: dict | None, plot_link: str | None = None,
                    notes: str | None = None) -> str:
    """BENCHMARKS.md from a results document; with None, the skeleton to be filled.
    ``notes``: a person's reading of this run (NOTES.md beside the JSON), placed first."""
    env = (doc or {}).get("env", {})
    ceilings = (doc or {}).get("ceilings")
    todo = "_to be filled: run the command above_"

    def field(key):
        return env.get(key) or f"_{key}_"
    out = ["# Benchmarks", "",
           "torch_overlay against stock Inductor, every figure of a table measured in one run "
           "on one GPU.", "",
           "| | |", "|---|---|",
           f"| GPU | {field('gpu')} |",
           f"| date | {field('date')} |",
           f"| versions | torch {field('torch')}, triton {field('triton')}, CUDA {field('cuda')}, "
           f"Python {field('python')} |",
           f"| torch_overlay | {field('torch_overlay')} (git {field('git')}) |",
           f"| overlays | {', '.join(env.get('overlays') or []) or '_overlays_'} |",
           f"| command | `{env.get('command', 'python tools/bench.py --out bench_out')}` |", "",
           "Every number is in `tools/bench_results/bench.json`; this page is rendered from it "
           "by `python tools/bench.py --report tools/bench_results/bench.json > BENCHMARKS.md`. "
           "A full run takes about 6 minutes on an H200; `--quick` checks the tool in under one.",
           ""]
    if notes:
        out += [notes.strip(), ""]
    out += ["## How to read these tables", "", READING, "",
           "## Ceilings, measured in the same run", ""]
    if ceilings:
        out += [f"- device copy: {ceilings['copy_GBps'] / 1e3:.2f} TB/s (bytes read + written)",
                f"- bf16 cuBLAS {ceilings['mm_shape']}: "
                f"{ceilings['bf16_mm_TFLOPs']:.0f} TFLOP/s", ""]
    else:
        out += [todo, ""]
    groups = by_workload(doc) if doc else {}
    for workload, spec in WORKLOADS.items():
        out += [f"## {workload}: {spec.title}", "", spec.notes, ""]
        cases = groups.get(workload)
        if not cases:
            out += [todo, ""]
            continue
        out += [markdown_table(*summary_table(cases)), ""]
        if workload == "linear" and plot_link:
            out += [f"![speedup over stock default against M]({plot_link})", ""]
        out += ["<details><summary>Every mode of every case</summary>", ""]
        for case in cases:
            out += [f"**{case_heading(case)}**", "",
                    markdown_table(detail_headers(), detail_rows(case)), ""]
            out += [f"- {m}" for m in messages(case)] + ([""] if messages(case) else [])
        out += ["</details>", ""]
    if doc and doc.get("compile_only"):
        out += ["## Compile time through the GPU-free harness", "",
                "Inductor's own compile (tracing, lowering, code generation) for the H200 "
                "profile, without Triton's kernel compilation.", "",
                markdown_table(*compile_only_table(doc["compile_only"])), ""]
    return "\n".join(out)


# -- the plot ---------------------------------------------------------------------

def write_plot(doc: dict, path: pathlib.Path) -> str:
    """Speedup over stock default against M, one panel per (N, K) of the linear set."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot (pip install matplotlib)"
    series = linear_speedups(doc)
    if not series:
        return "no linear results to plot"
    panels = sorted({nk for nk, _ in series})
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.5 * ncols, 3.4 * nrows), sharey=True,
                             squeeze=False)
    for ax, nk in zip(axes.flat, panels):
        for (panel, mode), points in series.items():
            if panel == nk:
                ms, ys = zip(*sorted(points))
                # a mode keeps its colour in every panel
                ax.plot(ms, ys, marker="o", color=f"C{list(MODES).index(mode)}",
                        label=MODES[mode].short)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_title(f"N={nk[0]}, K={nk[1]}")
        ax.set_xlabel("M")
        ax.legend(fontsize="small")
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for row in axes:
        row[0].set_ylabel("speedup over stock default")
    env = doc.get("env", {})
    fig.suptitle(f"F.linear, bf16 autocast: {env.get('gpu', '')} {env.get('date', '')[:10]}, "
                 f"torch {env.get('torch', '')}, triton {env.get('triton', '')}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot: {path}"


def linear_speedups(doc: dict) -> dict[tuple, list[tuple[int, float]]]:
    """{((N, K), mode): [(M, speedup over stock default)]} for the ok results."""
    series: dict[tuple, list[tuple[int, float]]] = defaultdict(list)
    for case in doc["results"]:
        if case["workload"] != "linear":
            continue
        p = case["params"]
        for mode, result in case["modes"].items():
            value = result.get("speedup", {}).get("stock")
            if mode != "stock" and value is not None:
                series[((p["N"], p["K"]), mode)].append((p["M"], value))
    return dict(series)


# -- the model workloads (tools/bench.py --models) --------------------------------

MODELS_PLOT_NAME = "models_speedup.png"
MODEL_PAIRS = [("stock", "overlay"), ("stock_freezing", "overlay_freezing")]


def model_rows(doc: dict):
    """(model record, row) in run order."""
    for record in doc.get("models", []):
        for r in record.get("rows", {}).values():
            yield record, r


def floor_cell(r: dict, result: dict | None) -> str:
    if not r.get("floor_ms") or not is_ok(result):
        return "-"
    return number(r["floor_ms"] / result["ms"], "floor_fraction")


def models_speed_table(doc: dict) -> tuple[list[str], list[list[str]]]:
    headers = ["model", "row", "eager ms", "stock ms", "overlay ms", "overlay / stock",
               "stock frz ms", "overlay frz ms", "ovl frz / stock frz", "overlay / stock frz",
               "weight floor ms", "% floor stock", "% floor overlay", "% floor ovl frz"]
    rows = []
    for record, r in model_rows(doc):
        m = r["modes"]
        rows.append([record["model"], r["row"], cell(m.get("eager")), cell(m.get("stock")),
                     cell(m.get("overlay")),
                     number(speedup(m.get("stock"), m.get("overlay"))),
                     cell(m.get("stock_freezing")), cell(m.get("overlay_freezing")),
                     number(speedup(m.get("stock_freezing"), m.get("overlay_freezing"))),
                     number(speedup(m.get("stock_freezing"), m.get("overlay"))),
                     number(r.get("floor_ms"), "ms"), floor_cell(r, m.get("stock")),
                     floor_cell(r, m.get("overlay")), floor_cell(r, m.get("overlay_freezing"))])
    return headers, rows


def models_check_table(doc: dict) -> tuple[list[str], list[list[str]]]:
    """Compile time, errors and peak memory, one line per row and pair of sides."""
    headers = ["model", "row", "sides", "compile s", "rel err vs fp64 (eager)",
               "rel err vs eager", "max abs vs eager", "max abs ovl vs stock", "peak +GB"]
    rows = []
    for record, r in model_rows(doc):
        for stock, overlay in MODEL_PAIRS:
            a, b = r["modes"].get(stock), r["modes"].get(overlay)
            if not a and not b:
                continue
            a, b = a or {}, b or {}

            def both(key, kind):
                return f"{number(a.get(key), kind)} / {number(b.get(key), kind)}"
            eager = number(r.get("eager_error"), "error")
            rows.append([record["model"], r["row"], f"{MODES[stock].short} / {MODES[overlay].short}",
                         both("compile_s", "compile_s"),
                         f"{both('error', 'error')} ({eager})",
                         both("err_eager", "error"),
                         f"{number(a.get('maxabs_eager'), 'abs')} / "
                         f"{number(b.get('maxabs_eager'), 'abs')}",
                         number(b.get("maxabs_stock"), "abs"),
                         f"{number(a.get('peak_GB'), 'GB')} / {number(b.get('peak_GB'), 'GB')}"])
            for res, name in ((a, stock), (b, overlay)):
                if res.get("status") not in (None, "ok"):
                    rows[-1][3] += f" [{MODES[name].short}: {res['status']}]"
    return headers, rows


def models_messages(doc: dict) -> list[str]:
    out = [f"{rec['model']}: {rec['message']}" for rec in doc.get("models", [])
           if rec.get("message")]
    for record, r in model_rows(doc):
        for name, res in r["modes"].items():
            if res.get("message") or res.get("reason"):
                out.append(f"{record['model']} {r['row']} {MODES[name].short}: "
                           f"{res.get('message') or res.get('reason')}")
    return out


def models_summary(doc: dict) -> str:
    parts = ["\n== models: speed (ms; ratios are how many times faster)",
             text_table(*models_speed_table(doc)),
             "\n== models: compile time, errors, peak memory (stock side / overlay side)",
             text_table(*models_check_table(doc))]
    parts += models_messages(doc)
    return "\n".join(parts)


MODELS_READING = """\
Whole decoder stacks from `tools/bench_models.py` (plain PyTorch, random weights; the
dimensions of public configs, a few layers), fp32 parameters under bf16 autocast,
`torch.compile` default mode, stock and overlay in the same process from the same
weights. *decode B=b*: one token per sequence at position 512 of a 1024-long static KV
cache (random keys and values), logits of that token; *graphs*: the same under
`mode="reduce-overhead"` (CUDA graphs); *prefill 512*: 512 tokens into the cache, the
last token's logits; *train*: forward, cross-entropy, backward and a fused AdamW step
(the optimizer runs eagerly; only the model is compiled); *live decode*: the plain
decode compile called again right after those optimizer steps, the weights changed in
place (as in RL rollouts: freezing cannot serve it, its constants would be stale).
*frz*: `torch._inductor.config.freezing = True` under `torch.no_grad()` (the weights are
`nn.Parameter`s, folded into constants: fp32 weights become bf16 constants, cast once).
Times are do_bench medians (L2 flushed before each call); eager is timed without a
compile. The *weight floor* of a decode row is the fp32 parameter bytes a step reads
(all but lookup tables) over the measured copy bandwidth; a frozen side can pass 100%
because it reads bf16 copies. Errors are relative Frobenius norms of the logits (the
loss for *train*) against the fp64 model on the same inputs and caches, in brackets
eager's own; a side over 4x eager's error is **WRONG** and not timed. *max abs ovl vs
stock*: overlay's logits against stock's. Compile time is the first call. Each side
(stock, then overlay) runs in one fresh Inductor and Triton cache directory, its groups in
this order, each after `torch._dynamo.reset()`: default compile (decode, prefill; its
first row compiles cold), freezing, CUDA graphs, train then live decode (a recompile);
a later group's compile reuses the kernels it shares with earlier ones, alike on both sides.
*peak +GB*: `torch.cuda.max_memory_allocated()` over the row (compile included) above
what was allocated before it (weights, caches, optimizer state held from earlier rows)."""


def render_models_markdown(doc: dict, plot_link: str | None = None,
                           notes: str | None = None) -> str:
    """The models section; ``notes``: a person's reading (MODELS_NOTES.md beside the JSON)."""
    env = doc.get("env", {})
    c = doc.get("ceilings") or {}
    out = ["## models: what a model gains, decode to training", "",
           f"Run {env.get('date', '?')} on {env.get('gpu', '?')}, torch {env.get('torch', '?')}, "
           f"triton {env.get('triton', '?')}, CUDA {env.get('cuda', '?')}, git "
           f"{env.get('git', '?')}, overlays {', '.join(env.get('overlays') or []) or '-'}: "
           f"`{env.get('command', '')}`"
           + (f", {doc['wall_s']:.0f} s in all." if doc.get("wall_s") else "."), ""]
    if c:
        out += [f"Ceilings of that run: device copy {c['copy_GBps'] / 1e3:.2f} TB/s, bf16 "
                f"cuBLAS {c['bf16_mm_TFLOPs']:.0f} TFLOP/s.", ""]
    for rec in doc.get("models", []):
        out.append(f"- **{rec['model']}**: {rec.get('source', '')}; "
                   + (f"{rec['param_bytes'] / 1e9:.2f} GB of fp32 parameters, a decode step "
                      f"reads {rec['decode_weight_bytes'] / 1e9:.2f} GB"
                      if "param_bytes" in rec else rec.get("message", "")))
    out += [""]
    if notes:
        out += [notes.strip(), ""]
    out += ["### How to read the model tables", "", MODELS_READING, ""]
    if doc.get("models"):
        out += [markdown_table(*models_speed_table(doc)), ""]
        if plot_link:
            out += [f"![overlay over stock, per model row]({plot_link})", ""]
        out += [markdown_table(*models_check_table(doc)), ""]
        out += [f"- {m}" for m in models_messages(doc)]
    if doc.get("compile_only"):
        out += ["", "Compile time through the GPU-free harness:", "",
                markdown_table(*compile_only_table(doc["compile_only"]))]
    return "\n".join(out) + "\n"


def write_models_plot(doc: dict, path: pathlib.Path) -> str:
    """overlay / stock and overlay frz / stock frz per model row, as horizontal bars."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot (pip install matplotlib)"
    labels, plain, frozen = [], [], []
    for record, r in model_rows(doc):
        m = r["modes"]
        labels.append(f"{record['model']} {r['row']}")
        plain.append(speedup(m.get("stock"), m.get("overlay")))
        frozen.append(speedup(m.get("stock_freezing"), m.get("overlay_freezing")))
    if not any(v for v in plain + frozen):
        return "no model results to plot"
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(labels) + 1.5))
    ys = range(len(labels))
    ax.barh([y - 0.2 for y in ys], [v or 0 for v in plain], height=0.4, color="C3",
            label="overlay / stock")
    ax.barh([y + 0.2 for y in ys], [v or 0 for v in frozen], height=0.4, color="C6",
            label="overlay frz / stock frz")
    ax.axvline(1.0, color="grey", linewidth=0.8)
    ax.set_yticks(list(ys), labels, fontsize="small")
    ax.invert_yaxis()
    ax.set_xlabel("speedup over stock Inductor (same run)")
    ax.legend(fontsize="small")
    env = doc.get("env", {})
    ax.set_title(f"models, bf16 autocast: {env.get('gpu', '')} {env.get('date', '')[:10]}, "
                 f"torch {env.get('torch', '')}, triton {env.get('triton', '')}",
                 fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot: {path}"
