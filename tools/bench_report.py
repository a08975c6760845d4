"""What tools/bench.py makes of its raw measurements (each mode's ``status``, ``ms``,
``compile_s``, ``error``): its results documents, and their tables (BENCHMARKS.md)."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import re
from collections import defaultdict
from typing import Callable

from bench_workloads import MODES, WORKLOADS

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


def speedup(baseline: dict | None, result: dict | None) -> float | None:
    """How many times faster ``result`` is than ``baseline``; None unless both are ok."""
    if not all(r and r.get("status") == "ok" and r.get("ms") for r in (baseline, result)):
        return None
    return baseline["ms"] / result["ms"]


# -- the results document ---------------------------------------------------------

def new_document(env: dict, settings: dict) -> dict:
    return {"schema": 1, "env": env, "settings": settings, "results": []}


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
    return case_result


def write_json(doc: dict, path: pathlib.Path) -> None:
    # write then rename: a run killed mid-write leaves the previous complete file
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, path)


def read_json(path: pathlib.Path) -> dict:
    return json.loads(pathlib.Path(path).read_text())


# -- cells and tables -------------------------------------------------------------

def ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = [headers, ["---"] * len(headers), *rows]
    return "\n".join("| " + " | ".join(str(c) for c in line) + " |" for line in lines)


# -- BENCHMARKS.md: the newest measurement of each row, per GPU and release -----------

RESULTS = pathlib.Path(__file__).resolve().parent / "bench_results"
FAMILIES = ("decode", "dynamic batch", "autocast region", "batched", "training",
            "operators", "max-autotune", "freezing")
# families shown inside another's section, after its table under each GPU, captioned
INSET = {"dynamic batch": "CUDA graphs", "freezing": "frozen models"}
CAPTION = {"CUDA graphs": "#### Under CUDA graphs, both sides in one mode: stock / overlay us "
                          "(overlay / stock)",
           "frozen models": "#### `transformers` architectures, both sides frozen"}
# the zoo's torch.compile modes that capture CUDA graphs: timed by wall time per call
GRAPH_MODES = ("reduce-overhead", "max-autotune")
ZOO_FAMILY = {"decode1": "decode", "decode_dyn": "dynamic batch", "batch8": "batched",
              "train": "training"}
# per operator family: the modes it shows, and the (faster, baseline) ratios
OPS_FAMILY = {
    "operators": (("eager", "stock", "overlay"), [("overlay", "stock"), ("overlay", "eager")]),
    "max-autotune": (("stock", "stock-max-autotune", "overlay", "overlay-max-autotune",
                      "prologue-max-autotune", "upstream-max-autotune"),
                     [("overlay", "stock-max-autotune"),
                      ("overlay-max-autotune", "stock-max-autotune"),
                      ("prologue-max-autotune", "stock-max-autotune"),
                      ("upstream-max-autotune", "stock-max-autotune")]),
    "freezing": (("stock", "stock_freezing", "overlay", "overlay_freezing"),
                 [("overlay_freezing", "stock_freezing"), ("overlay", "stock_freezing")]),
}
ZOO_MODELS = ("llama3-8b", "qwen2-7b", "pythia-1.4b", "gpt2-large", "t5-large", "bert-large",
              "vit-large")
FAMILY_TEXT = {
    "decode": "One token at batch 1, a decoder step without KV cache (T5-large attends to 128 "
              "cached encoder states). `bench.py zoo --rows decode1`.",
    "dynamic batch": "The same step with the batch dim `mark_dynamic`, compiled at B = 4 and "
                     "timed at 1, 4, 16 (B = 1 recompiles). `bench.py zoo --rows decode_dyn`; a "
                     "line *model, B up to N* marks it from 2 to N (`--dyn-max N`). "
                     "Under CUDA graphs: both rows compiled with `mode=\"reduce-overhead\"` "
                     "or `\"max-autotune\"` on both sides, what a launch-bound step costs "
                     "(`bench.py zoo --mode reduce-overhead`, or `max-autotune`).",
    "autocast region": "Every call inside one `torch.autocast` region entered outside the "
                       "compiled function, as a decode loop runs: *cache* is the overlays "
                       "with `autocast_param_cache`, *overlay* without it; *bf16* is "
                       "`torch.compile` (stock) of a 16-bit copy of the model, *eager* the "
                       "model in the region (eager autocast's own cast cache). Kernel time per "
                       "call (per token for `generate`; *step*: one forward in a region of its "
                       "own, then backward; *accumulate*: 4 micro-batches in one region); "
                       "*wall us*: host-to-host, the same calls back to back (5 for "
                       "`generate`); max relative errors against fp32 eager; the casts held. "
                       "`bench.py cast-cache`.",
    "batched": "8 x 128 tokens (8 images for ViT): where the plan keeps stock's code. "
               "`bench.py zoo --rows batch8`.",
    "training": "Forward and backward of the batched row; errors are those of every "
                "parameter's gradient. `bench.py zoo --rows train`.",
    "operators": "Single operators under bf16 autocast with fp32 inputs, default "
                 "`torch.compile` mode, against stock and eager autocast. `bench.py ops`.",
    "max-autotune": "The same under `mode=\"max-autotune-no-cudagraphs\"` (*MA*); *MA + pd* is "
                    "stock max-autotune with `prologue_downcast` alone, *MA + up* with the "
                    "patches meant for upstream (0001-0005); *matmul_t* is `x @ w.t()`, the "
                    "weight transposed before its cast. "
                    "`bench.py ops --modes stock-max-autotune,overlay-max-autotune`.",
    "freezing": "`torch._inductor.config.freezing=True`, weights folded into constants "
                "(inference only): single operators (`bench.py ops --modes stock_freezing,"
                "overlay_freezing`), then the zoo's inference rows (`bench.py zoo --mode "
                "freezing`).",
}
INTRO = (
    "torch_overlay against stock Inductor: each row's newest measurement, per workload family, "
    "GPU and release, rendered from `tools/bench_results/*.json` by `python tools/bench.py "
    "report > BENCHMARKS.md` (a test keeps it current; git history holds earlier ones). Each "
    "table names its GPU, torch and triton; a row's *measured* column, its date and timer. "
    "Ratios are how many times faster the first side is, both sides measured in the same run "
    "(*same code*: both generated the same code, so the ratio is runtime autotuning's "
    "spread). Errors are relative (rms for the zoo) against an fp64 reference; a result more "
    "than 4x eager's error is **WRONG** and never timed.")
TIMERS = (
    "- *profiler* (models): GPU kernel time of one call (torch.profiler's CUDA events, summed "
    "over 20 calls after 3 warm-up calls); each side compiled cold in its own cache, timed in "
    "both orders, the faster of N compiles a side (*cN*). fp32 parameters under bf16 "
    "autocast, random weights of the public configs' dimensions, 2 layers.",
    "- *compile s*: the wall time of a side's first call, cold (its fastest of N), at the "
    "batch the step was compiled at (dynamic batch: B = 4).",
    "- *wall*: host-to-host time per call of 20 CUDA-graph replays back to back.",
    "- *graph* (operators): a CUDA-graph replay of one call per input set, inputs rotated past "
    "the L2; *do_bench*: `triton.testing.do_bench` median of the calls, host included. *pN*: "
    "the modes measured N times in alternating order, the lower median kept.")


def result_docs(directory: pathlib.Path = RESULTS) -> list[tuple[str, list[dict]]]:
    """(file stem, the runs it holds) for each results file, in name order."""
    return [(p.stem, read_json(p)["runs"]) for p in sorted(directory.glob("*.json"))]


def doc_kind(doc: dict) -> str:
    if doc.get("kind") == "cast-cache":
        return "cast-cache"
    return "ops" if "results" in doc else "zoo"


def ops_families(case: dict) -> list[str]:
    """The operator families a case has a row in: a row compares sides with its family's
    baseline (its first pair's), so it needs that and one of those sides measured."""
    done = {m for m, r in case["modes"].items() if r.get("status") not in ("skipped", "n/a")}
    return [family for family, (_, pairs) in OPS_FAMILY.items()
            if pairs[0][1] in done and done & {a for a, _ in pairs}]


def entries(doc: dict):
    """(family, key, row) for every row a run measured."""
    kind = doc_kind(doc)
    if kind == "ops":
        for case in doc["results"]:
            for family in ops_families(case):
                yield family, case["id"], case
    elif kind == "cast-cache":
        for r in doc["rows"]:
            if "sides" in r:
                yield "autocast region", (r["model"], r["row"], r["batch"]), r
    elif kind == "zoo":
        for r in doc["rows"]:
            if "sides" not in r:  # skipped (time budget) or failed before measuring
                continue
            settings = doc.get("settings") or {}
            mode, model = settings.get("mode", "default"), r["model"]
            if r["row"] == "decode_dyn" and settings.get("dyn_max"):  # a line of its own
                model = f"{model}, B up to {settings['dyn_max']}"
            if mode == "default":
                yield ZOO_FAMILY[r["row"]], (model, r["row"], r["batch"]), r
            elif mode == "freezing":
                yield "frozen models", (model, r["row"], r["batch"]), r
            else:
                yield "CUDA graphs", (model, f"{mode} {r['row']}", r["batch"]), r


def newest(runs: list[dict]) -> dict[str, dict]:
    """family -> key -> (doc, row): each row's newest measurement."""
    found: dict[str, dict] = defaultdict(dict)
    for doc in sorted(runs, key=lambda d: d["env"]["date"]):
        for family, key, row in entries(doc):
            found[family][key] = (doc, row)
    return found


def timing(doc: dict) -> str:
    """How a run measured, in a table cell (TIMERS says what the words mean)."""
    settings, command = doc.get("settings") or {}, doc["env"].get("command", "")
    if doc_kind(doc) == "cast-cache":
        return "profiler"
    if doc_kind(doc) == "zoo":
        compiles = settings.get("compiles")
        timer = "wall" if settings.get("mode") in GRAPH_MODES else "profiler"
        return timer + (f", c{compiles}" if compiles else "")
    timer = "graph" if settings.get("timer") == "CUDA-graph replay" else "do_bench"
    passes = re.search(r"--passes (\d+)", command)
    return timer + (f", p{passes.group(1)}" if passes else "")


def measured(doc: dict) -> str:
    return f"{doc['env']['date'][:10]}, {timing(doc)}"


def natural(text: str) -> list:
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", text)]


def us(result: dict | None) -> str:
    """A mode's time in microseconds; a result that is not ok shows its status."""
    if not result:
        return "-"
    if result.get("status") != "ok":
        return "n/a" if result.get("status") == "n/a" else f"**{result['status']}**"
    return f"{1000 * result['ms']:.1f}"


def ops_table(family: str, rows: dict) -> str:
    """Per case: each mode's time, each (faster, baseline) ratio, the date."""
    wanted, pairs = OPS_FAMILY[family]
    order = list(WORKLOADS)
    cases = sorted(rows.values(), key=lambda dr: (order.index(dr[1]["workload"]),
                                                  natural(dr[1]["label"])))
    present = {m for _, c in cases for m in c["modes"] if m in wanted}
    modes = [m for m in wanted if m in present]
    pairs = [(a, b) for a, b in pairs if a in present and b in present]
    headers = (["case"] + [MODES[m].short + " us" for m in modes]
               + [f"{MODES[a].short} / {MODES[b].short}" for a, b in pairs] + ["measured"])
    return markdown_table(headers, [
        [f"{c['workload']} {c['label']}"] + [us(c["modes"].get(m)) for m in modes]
        + [ratio(speedup(c["modes"].get(b), c["modes"].get(a))) for a, b in pairs]
        + [measured(doc)] for doc, c in cases])


def zoo_order(item) -> tuple:
    (model, row, batch), _ = item
    base = model.split(",")[0]  # a bounded dynamic batch's line follows its model's
    return ((ZOO_MODELS.index(base) if base in ZOO_MODELS else len(ZOO_MODELS)), model, row,
            batch)


@dataclasses.dataclass(frozen=True)
class PerModel:
    """A family tabled one line a model: a column per ``column(key)`` of its rows."""

    column: Callable[[tuple], object]
    header: Callable[[object], str]
    digits: int  # of the times in microseconds
    same_code: bool  # say where both sides generated the same code
    compiled: bool  # a column for the compile time of the row compiled at


PER_MODEL = {
    "dynamic batch": PerModel(lambda key: key[2], lambda b: f"B = {b}: stock / overlay us",
                              digits=1, same_code=False, compiled=True),
    "CUDA graphs": PerModel(
        lambda key: key[1:], lambda c: f"{c[0].replace('decode_dyn', 'dynamic')} B = {c[1]}",
        digits=0, same_code=True, compiled=False),
    "frozen models": PerModel(lambda key: key[1:],
                              lambda c: f"{c[0]} B = {c[1]}: stock / overlay us",
                              digits=1, same_code=True, compiled=False),
}


def zoo_table(family: str, rows: dict) -> str:
    if family in PER_MODEL:
        return per_model_table(rows, PER_MODEL[family])
    headers = ["model", "B", "stock us", "overlay us", "overlay / stock",
               "rms err stock / overlay", "peak MiB stock / overlay",
               "compile s stock / overlay", "measured"]
    body = []
    for (model, row, batch), (doc, r) in sorted(rows.items(), key=zoo_order):
        stock, overlay = r["sides"]["stock"], r["sides"]["overlay"]

        def pair(k, fmt):
            a, b = stock.get(k), overlay.get(k)
            return "-" if a is None or b is None else f"{a:{fmt}} / {b:{fmt}}"
        body.append([model, str(batch), f"{stock['mean_us']:.1f}", f"{overlay['mean_us']:.1f}",
                     f"{r['ratio']:.2f}x" + (" (same code)" if r.get("same_code") else ""),
                     pair("rms_err", ".2e"), pair("peak_mib", ".0f"),
                     pair("compile_s", ".1f"), measured(doc)])
    return markdown_table(headers, body)


REGION_SIDES = ("stock", "overlay", "cache", "bf16", "eager")


def region_table(rows: dict) -> str:
    """Per model and row: each side's kernel time, the cache against stock, the overlays
    without it and the 16-bit copy, errors and the casts held."""
    def per_call(res, key="kernel"):
        return res.get(f"{key}_per_token_us", res[f"{key}_mean_us"])

    body = []
    for (model, row, batch), (doc, r) in sorted(rows.items(), key=zoo_order):
        sides, cache = r["sides"], per_call(r["sides"]["cache"])
        times = [f"{per_call(sides[s]):.1f}" if s in sides else "-" for s in REGION_SIDES]
        ratios = [f"{per_call(sides[s]) / cache:.2f}x" if s in sides else "-"
                  for s in ("stock", "overlay", "bf16")]
        errs = " / ".join(f"{sides[s]['err']:.1e}" for s in ("stock", "cache"))
        wall = " / ".join(f"{per_call(sides[s], 'wall'):.0f}" for s in ("overlay", "cache"))
        body.append([model, row, str(batch), *times, *ratios, wall, errs,
                     f"{sides['cache'].get('held_mib', 0):.0f}", measured(doc)])
    headers = ["model", "row", "B", *(f"{s} us" for s in REGION_SIDES), "stock / cache",
               "overlay / cache", "bf16 / cache", "wall us overlay / cache",
               "err stock / cache", "held MiB",
               "measured"]
    return markdown_table(headers, body)


def per_model_table(rows: dict, spec: PerModel) -> str:
    """One line a model: stock / overlay us (overlay / stock) per column of its rows' keys,
    and where ``spec.compiled`` the compile time of the row it was compiled at."""
    columns = sorted({spec.column(key) for key in rows})
    cells: dict[str, dict] = {}
    for key, (doc, r) in sorted(rows.items(), key=zoo_order):
        line = cells.setdefault(key[0], {"measured": set()})
        same = ", same code" if spec.same_code and r.get("same_code") else ""
        line[spec.column(key)] = (f"{r['sides']['stock']['mean_us']:.{spec.digits}f} / "
                                  f"{r['sides']['overlay']['mean_us']:.{spec.digits}f} "
                                  f"({r['ratio']:.2f}x{same})")
        line["measured"].add(measured(doc))
        times = [r["sides"][side].get("compile_s") for side in ("stock", "overlay")]
        if spec.compiled and None not in times:  # the row the step was compiled at
            line["compile"] = f"{times[0]:.1f} / {times[1]:.1f}"
    headers = ["model"] + [spec.header(c) for c in columns]
    if spec.compiled:
        headers.append("compile s stock / overlay")
    headers.append("measured")
    return markdown_table(headers, [[model] + [line.get(c, "-") for c in columns]
                                    + ([line.get("compile", "-")] if spec.compiled else [])
                                    + ["; ".join(sorted(line["measured"]))]
                                    for model, line in cells.items()])


def heading(docs: list[dict]) -> str:
    env = docs[0]["env"]
    gpu = env["gpu"].removeprefix("NVIDIA ")
    dates = sorted(d["env"]["date"][:10] for d in docs)
    span = dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"
    triton = sorted({d["env"]["triton"] for d in docs})
    return (f"### {gpu}, torch {env['torch'].split(' ')[0]}, triton {', '.join(triton)}; "
            f"measured {span}")


def render_benchmarks(files: list[tuple[str, list[dict]]]) -> str:
    """BENCHMARKS.md: per workload family, one table per results file (GPU and release)."""
    out = ["# Benchmarks", "", INTRO, "", *TIMERS, ""]
    found = [(stem, newest(runs)) for stem, runs in files]
    for family in FAMILIES:
        parts = [f for f in (family, INSET.get(family)) if f]
        if not any(f in rows for _, rows in found for f in parts):
            continue
        out += [f"## {family[0].upper() + family[1:]}", "", FAMILY_TEXT[family]]
        for _, rows in found:
            shown = [f for f in parts if f in rows]
            docs = {id(d): d for f in shown for d, _ in rows[f].values()}
            out += [heading(list(docs.values()))] if shown else []
            for f in shown:
                out += [CAPTION[f]] if f in CAPTION else []
                out.append(region_table(rows[f]) if f == "autocast region" else
                           ops_table(f, rows[f]) if f in OPS_FAMILY else zoo_table(f, rows[f]))
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def render_run(doc: dict) -> str:
    """One run's tables (bench.md / models.md / zoo.md beside its JSON)."""
    return render_benchmarks([("run", [doc])])
