#!/usr/bin/env python3
"""Benchmark torch_overlay against stock Inductor, side by side, on this GPU.

    python tools/bench.py [ops] --out DIR     operators, default modes (about 6 min on an H200)
    python tools/bench.py ops --quick         smoke run: two cases, three modes (under a minute)
    python tools/bench.py zoo --out DIR       transformers architectures (tools/bench_zoo.py)
    python tools/bench.py cast-cache --out DIR  decode in one autocast region, casts kept
    python tools/bench.py report [JSON ...]   BENCHMARKS.md from tools/bench_results/*.json

--list prints the cases and runs nothing. Max-autotune runs after every
other mode, on the required shape sets (--max-autotune all: every case), until
--budget-s. The JSON is rewritten after each case: a killed run keeps it.
"""
from __future__ import annotations

import argparse
import gc
import itertools
import math
import pathlib
import re
import sys
import time
import zlib
from typing import Callable

TOOLS = pathlib.Path(__file__).resolve().parent
REPO = TOOLS.parent
sys.path[1:1] = [str(TOOLS), str(REPO)]  # run from anywhere, without installing the package

import torch  # noqa: E402

import torch_overlay  # noqa: E402
from bench_common import (  # noqa: E402
    REP_MS, WARMUP_MS, environment, finish, gpu_available, log, median_ms, mode_context,
    one_line, probe_overlays, relative_error, synchronize, warm_up_compiler)
from bench_report import (  # noqa: E402
    is_wrong, new_document, read_json, render_benchmarks, result_docs, tolerance, upsert,
    write_json)
from bench_workloads import (  # noqa: E402
    DEFAULT_MODES, MODES, WORKLOADS, Case, Mode, all_cases)

COMMANDS = ("ops", "zoo", "cast-cache", "report")
QUICK_CASES = ("linear/16x4096x4096", "pointwise/float32 tanh 1M")
QUICK_MODES = ("eager", "stock", "overlay")
# no max-autotune step starts after this: the slowest (about 80 s) still ends within
# a 10-minute command limit
DEFAULT_BUDGET_S = 360

# Rotate through input sets that together exceed 3x the L2: by the time a set comes
# back, the others have evicted it, so every call reads its inputs from memory.
# (triton 3.6's do_bench also wipes L2 before each timed call, but not in its warm-up,
# and the harness should not depend on that.)
ROTATE_L2_MULTIPLE, MAX_INPUT_SETS = 3, 32


# -- measuring ----------------------------------------------------------------------

def graph_ms(fn: Callable[[], object]) -> float:
    """``fn`` captured in a CUDA graph, its replay timed by ``median_ms``: GPU time without
    host overhead (NaN, said in a line, where ``fn`` cannot be captured)."""
    try:
        side = torch.cuda.Stream()  # warm-up on a side stream, as capture wants
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
            fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return median_ms(graph.replay)
    except Exception as e:  # a diagnostic column only
        log(f"  (no CUDA graph timing: {one_line(e)[:100]})")
        return math.nan


def n_input_sets(set_bytes: int, l2_bytes: int) -> int:
    return max(1, min(MAX_INPUT_SETS, math.ceil(ROTATE_L2_MULTIPLE * l2_bytes / set_bytes)))


def make_input_sets(case: Case, device: str, l2_bytes: int) -> list[tuple[torch.Tensor, ...]]:
    # seeded by the case: a later phase of the run sees the same data
    gen = torch.Generator(device).manual_seed(zlib.crc32(case.id.encode()))

    def rand(shape, dtype, scale=1.0):
        return (torch.randn(shape, device=device, generator=gen) * scale).to(dtype)

    first = case.make_inputs(rand)
    count = n_input_sets(sum(t.nbytes for t in first), l2_bytes)
    return [first] + [case.make_inputs(rand) for _ in range(count - 1)]


def rotating(call: Callable, input_sets: list) -> Callable[[], object]:
    sets = itertools.cycle(input_sets[1:] + input_sets[:1])  # the first set checked the call
    return lambda: call(*next(sets))


def reference_outputs(case: Case, inputs: tuple) -> tuple[torch.Tensor, ...]:
    # autocast leaves fp64 alone: case.fn on fp64 inputs is the fp64 reference
    upcast = tuple(t.detach().double().requires_grad_(t.requires_grad) for t in inputs)
    return case.step(case.fn)(*upcast)


def applies(mode: Mode, case: Case) -> bool:
    return not mode.freezing or (bool(case.weight_args) and not case.train)


class Weights(torch.nn.Module):
    """``fn`` with its inputs at ``weight_args`` held as parameters, as in a model: what
    ``torch._inductor.config.freezing`` folds into constants (it leaves plain inputs be)."""

    def __init__(self, fn: Callable, weight_args: tuple[int, ...], inputs: tuple):
        super().__init__()
        self.fn, self.weight_args = fn, tuple(sorted(weight_args))
        self.weights = torch.nn.ParameterList(
            torch.nn.Parameter(inputs[i].detach(), requires_grad=False) for i in self.weight_args)

    def forward(self, *rest):
        args = list(rest)
        for i, w in zip(self.weight_args, self.weights):
            args.insert(i, w)
        return self.fn(*args)


def frozen_call(case: Case) -> Callable:
    """The compiled case with the first call's weights as parameters; later calls pass
    their other inputs only (the rotation cannot move frozen constants)."""
    state: dict = {}

    def call(*inputs):
        if "module" not in state:
            module = Weights(case.fn, case.weight_args, inputs)
            state["module"] = torch.compile(module, dynamic=False)
        rest = [x for i, x in enumerate(inputs) if i not in case.weight_args]
        return case.step(state["module"])(*rest)
    return call


def build_call(mode: Mode, case: Case) -> Callable:
    if mode.freezing:
        return frozen_call(case)
    if mode.compile_mode:
        return case.step(torch.compile(case.fn, mode=mode.compile_mode, dynamic=False))
    return case.step(case.fn)


def measure_mode(case, mode, input_sets, ref, tol, *, device, timer, build, overlays):
    """Compile (the first call), check against the reference, time: a wrong result is
    never timed, and a failure (entering the mode, compiling, running) is a result."""
    if not applies(mode, case):
        return {"status": "n/a"}
    try:
        with mode_context(mode, overlays):
            call = build(mode, case)
            start = time.perf_counter()
            out = call(*input_sets[0])
            synchronize(device)
            seconds = time.perf_counter() - start
            result = {"status": "ok", "compile_s": seconds if mode.compile_mode else None,
                      "error": relative_error(out, ref)}
            del out
            if is_wrong(result["error"], tol):
                result["status"] = "WRONG"
            elif timer is graph_ms:  # one replay calls every input set once
                result["ms"] = graph_ms(lambda: [call(*s) for s in input_sets]) / len(input_sets)
            else:
                result["ms"] = timer(rotating(call, input_sets))
            return result
    except Exception as e:
        return {"status": "failed", "message": one_line(e)}


def case_record(case: Case) -> dict:
    return {"id": case.id, "workload": case.workload, "label": case.label, "params": case.params,
            "dtype": str(case.dtype), "modes": {}}


def measure_case(case: Case, modes: list[str], *, device="cuda", timer=median_ms,
                 build=build_call, overlays=None, l2_bytes=60 << 20, passes=1,
                 on_mode: Callable[[str, dict, dict], None] = lambda *a: None) -> dict:
    """Every mode of one case against the fp64 reference; tolerance from eager's error.

    ``passes`` 2 measures the modes again in reverse order, each compiled anew, and
    keeps each mode's lower median: on the H200 two compiles of the same kernels
    measured minutes apart differed by up to 30% (fwd+bwd MLP), in either order.
    Max-autotune modes are measured once (their compiles take seconds each).
    """
    record = case_record(case)
    input_sets = make_input_sets(case, device, l2_bytes)
    ref = reference_outputs(case, input_sets[0])
    eager = case.step(case.fn)(*input_sets[0])
    record["eager_error"] = relative_error(eager, ref)
    record["tolerance"] = tol = tolerance(record["eager_error"], str(case.dtype))
    del eager

    def measure(name):
        return measure_mode(case, MODES[name], input_sets, ref, tol, device=device,
                            timer=timer, build=build, overlays=overlays)
    for name in modes:
        record["modes"][name] = measure(name)
        on_mode(name, record["modes"][name], record)
    for _ in range(passes - 1):
        for name in reversed(modes):
            first = record["modes"][name]
            if first.get("status") != "ok" or MODES[name].max_autotune:
                continue
            again = measure(name)
            if again.get("status") != "ok":  # a later failure is a failure
                record["modes"][name] = again
            else:
                first.setdefault("ms_passes", [first["ms"]]).append(again["ms"])
                first["ms"] = min(first["ms_passes"])
            on_mode(name, record["modes"][name], record)
    return record


# -- the run -------------------------------------------------------------------------

def make_plan(cases: list[Case], modes: list[str],
              max_autotune: str) -> list[tuple[Case, list[str]]]:
    """Every other mode of every case first, then max-autotune, the slow compiles."""
    fast = [m for m in modes if not MODES[m].max_autotune]
    slow = [m for m in modes if MODES[m].max_autotune]
    plan = [(c, fast) for c in cases if fast]
    tuned = [c for c in cases if max_autotune == "all" or c.required_max_autotune]
    plan += [(c, slow) for c in tuned if slow]
    return plan


def unmeasured(case: Case, modes: list[str], result: dict) -> dict:
    """The case's record with ``result`` (skipped, failed) for each of ``modes``."""
    return {**case_record(case), "modes": {m: dict(result) for m in modes}}


def progress(label: str, res: dict, tol: float) -> str:
    """One measurement as the run's log shows it (the JSON has the rest)."""
    status = res["status"]
    if status == "ok":
        text = f"{res['ms']:.4f} ms  err {res['error']:.1e}"
    elif status == "WRONG":
        text = f"WRONG: error {res['error']:.1e} > tolerance {tol:.1e}"
    else:
        text = ": ".join([status] + [res[k] for k in ("message", "reason") if k in res])
    if res.get("compile_s") is not None:
        text += f"  compile {res['compile_s']:.1f} s"
    return f"    {label}  {text}"


def run_benchmarks(plan, doc: dict, args) -> None:
    json_path = args.out / "bench.json"
    start = time.perf_counter()
    for i, (case, modes) in enumerate(plan, 1):
        elapsed = time.perf_counter() - start
        slow = any(MODES[m].max_autotune for m in modes)
        if slow and args.budget_s and elapsed > args.budget_s:
            upsert(doc, unmeasured(case, modes, {"status": "skipped", "reason":
                                                 f"time budget of {args.budget_s} s spent"}))
            write_json(doc, json_path)
            continue
        log(f"[{i}/{len(plan)} {elapsed:4.0f} s] {case.id}: {', '.join(modes)}")
        try:
            record = measure_case(
                case, modes, overlays=args.overlays,
                timer=graph_ms if args.graph else median_ms,
                l2_bytes=torch.cuda.get_device_properties().L2_cache_size, passes=args.passes,
                on_mode=lambda name, r, rec: log(progress(
                    f"{MODES[name].short:>11}", r, rec["tolerance"])))
        except Exception as e:  # the case's inputs or reference failed (out of memory, ...)
            log(f"    failed: {one_line(e)}")
            record = unmeasured(case, modes, {"status": "failed", "message": one_line(e)})
        upsert(doc, record)
        write_json(doc, json_path)
        gc.collect()
        torch.cuda.empty_cache()


# -- command line -------------------------------------------------------------------

def parse_args(argv: list[str]) -> argparse.Namespace:
    def names(choices):
        def parse(text):
            values = [v.strip() for v in text.split(",") if v.strip()]
            unknown = [v for v in values if v not in choices]
            if unknown:
                raise argparse.ArgumentTypeError(
                    f"unknown {', '.join(unknown)}; choose from {', '.join(choices)}")
            return values
        return parse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add = p.add_argument
    add("--out", type=pathlib.Path, default=pathlib.Path("bench_out"),
        help="directory for the JSON and its tables (default: bench_out)")
    add("--workloads", type=names(list(WORKLOADS)), help="default: all")
    add("--shapes", metavar="REGEX", help="the cases whose label matches")
    add("--modes", type=names(list(MODES)), help=f"default: {','.join(DEFAULT_MODES)}")
    add("--mnk", metavar="MxNxK,...",
        type=lambda s: [tuple(int(d) for d in v.split("x")) for v in s.split(",") if v],
        help="linear (and gelu_linear) cases of these shapes instead of the sets")
    add("--graph", action="store_true", help="time a CUDA-graph replay of each input set")
    add("--max-autotune", choices=("required", "all"), default="required",
        help="cases that get the max-autotune modes (default: the required sets)")
    add("--budget-s", type=float, default=DEFAULT_BUDGET_S,
        help=f"skip max-autotune after this many seconds (default {DEFAULT_BUDGET_S}); "
             "0: no limit")
    add("--overlays", type=lambda s: [n for n in s.split(",") if n],
        help="overlays of the overlay modes (default: all registered)")
    add("--passes", type=int, default=2,
        help="measure each mode this many times, in alternating order, and keep the lowest "
             "median (max-autotune modes: once)")
    add("--quick", action="store_true",
        help=f"smoke run: {', '.join(QUICK_CASES)}; modes {', '.join(QUICK_MODES)}")
    add("--list", action="store_true", help="print the selected cases and exit")
    return p.parse_args(argv)


def main_ops(args, argv: list[str]) -> int:
    cases = all_cases(args.workloads, args.mnk)
    if args.quick and not args.shapes:
        cases = [c for c in cases if c.id in QUICK_CASES]
    if args.shapes:
        cases = [c for c in cases if re.search(args.shapes, c.label)]
    modes = args.modes or list(QUICK_MODES if args.quick else DEFAULT_MODES)
    if args.list:
        for c in cases:
            mark = "  (max-autotune by default)" if c.required_max_autotune else ""
            log(f"{c.id}{mark}")
        return 0
    if not cases:
        print("bench.py: no case matches the selection (see --list)", file=sys.stderr)
        return 2
    known = torch_overlay.load_overlays()
    unknown = [n for n in args.overlays or [] if n not in known]
    if unknown:
        print(f"bench.py: unknown overlay {', '.join(unknown)}; registered: "
              f"{', '.join(known) or 'none'}", file=sys.stderr)
        return 2
    if not gpu_available():
        print("bench.py: no CUDA GPU here; ops needs one (--list and report run without)",
              file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    # the overlays the overlay modes run with, said up front
    args.overlays = probe_overlays(args.overlays)
    settings = {"modes": modes, "max_autotune": args.max_autotune, "budget_s": args.budget_s,
                "timer": "CUDA-graph replay" if args.graph else "do_bench",
                "do_bench_ms": {"warmup": WARMUP_MS, "rep": REP_MS}}
    doc = new_document(environment(argv, args.overlays), settings)
    doc["env"]["compile_workers"] = warm_up_compiler("cuda")
    plan = make_plan(cases, modes, args.max_autotune)
    log(f"plan: {len(plan)} steps over {len(cases)} cases; modes {', '.join(modes)}")
    start = time.perf_counter()
    try:
        run_benchmarks(plan, doc, args)
    finally:
        doc["wall_s"] = time.perf_counter() - start
        finish(doc, args.out / "bench.json")
    return 0


def report(paths: list[str]) -> int:
    """BENCHMARKS.md from tools/bench_results/*.json, or a run's own JSON."""
    files = [(pathlib.Path(p).stem, read_json(pathlib.Path(p))) for p in paths]
    files = [(stem, doc.get("runs", [doc])) for stem, doc in files] or result_docs()
    print(render_benchmarks(files), end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv.pop(0) if argv and argv[0] in COMMANDS else "ops"
    if command == "zoo":  # transformers architectures: tools/bench_zoo.py, its own options
        import bench_zoo

        return bench_zoo.main(argv)
    if command == "cast-cache":
        import bench_cast_cache

        return bench_cast_cache.main(argv)
    if command == "report":
        return report(argv)
    return main_ops(parse_args(argv), argv)


if __name__ == "__main__":
    sys.exit(main())
