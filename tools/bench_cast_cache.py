"""tools/bench.py cast-cache: compiled decode inside one autocast region, with the
parameter casts kept across calls (``config.autocast_param_cache``) and without.

    python tools/bench.py cast-cache --out DIR [--models llama3-8b,gpt2-large]

Sides: *stock* (every overlay flag off), *overlay* (every flag but the cast cache),
*cache* (every flag), and the two a user reaches today: *bf16*, ``torch.compile`` of a
16-bit copy of the model (stock), and *eager*, the model inside the same region (eager
autocast's own cast cache). Rows, per model (the zoo's specs, 2 layers, random weights):
``decode`` (one token, B=1 and 8), ``generate`` (``model.generate()`` over a compiled
``forward`` inside one region: per token) and, for models that train in the zoo,
``accumulate`` (4 micro-batches, forward and backward, inside one region) and ``step``
(one forward in a region of its own, then backward). GPU kernel
time (torch.profiler, summed) and wall time, both passes in alternating order; errors
against fp32 eager; the bytes of casts the cache holds.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import pathlib
import sys
import traceback

import torch

import bench_zoo as zoo
import torch_overlay
from bench_common import environment, log, one_line
from bench_report import write_json

SIDES = ("stock", "overlay", "cache", "bf16", "eager")
MICRO_BATCHES = 4


def flags(side: str):
    names = [o.flag for o in torch_overlay.OVERLAYS]
    on = {"overlay": set(names) - {"autocast_param_cache"}, "cache": set(names)}.get(side, ())
    return torch._inductor.config.patch({f: f in on for f in names})


def region(device: str, enabled: bool = True):
    return torch.autocast(device, torch.bfloat16, enabled=enabled)


def held_mib() -> float:
    from torch._dynamo.utils import counters

    return counters["inductor"]["param_cast_cache_bytes"] / 2**20


def time_sides(row: dict, calls: dict, device: str, iters: int = zoo.ITERS,
               one_region: bool = True) -> None:
    """Each side's kernel and wall time per call, all its calls in one region
    (``one_region``) or each call entering its own, both orders."""
    for order in (SIDES, SIDES[::-1]):
        for side in (s for s in order if s in calls):
            with contextlib.ExitStack() as stack:
                stack.enter_context(flags("stock" if side == "bf16" else side))
                if side != "bf16" and one_region:
                    stack.enter_context(region(device))
                res = row["sides"][side]
                res.setdefault("kernel_us", []).append(zoo.kernel_us(calls[side], iters))
                res.setdefault("wall_us", []).append(zoo.wall_us(calls[side], iters))
                if side == "cache":
                    res["held_mib"] = held_mib()
    for res in row["sides"].values():
        for key in ("kernel_us", "wall_us"):
            res[key.replace("_us", "_mean_us")] = sum(res[key]) / len(res[key])


def compiled(fn, side: str):
    return torch.compile(zoo.fresh(fn)) if side not in ("eager",) else fn


def decode_row(spec, model, bf16, batch: int) -> dict:
    device = model.device.type
    ids = zoo.make_inputs(spec, model, "decode1", batch, device)[0]
    row = {"model": spec.name, "row": "decode", "batch": batch, "sides": {}}
    with torch.no_grad():
        ref = model(input_ids=ids, use_cache=False).logits
        calls = {}
        for side in SIDES:
            m = bf16 if side == "bf16" else model
            fn = compiled(lambda m=m: m(input_ids=ids, use_cache=False).logits, side)
            with flags("stock" if side == "bf16" else side), region(
                    device, enabled=side != "bf16"):
                fn()
                row["sides"][side] = {"err": zoo.max_rel_err(fn(), ref)}
            calls[side] = fn
        time_sides(row, calls, device)
    return row


def generate_row(spec, model) -> dict:
    device = model.device.type
    gen = torch.Generator(device).manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (1, zoo.PROMPT), device=device, generator=gen)
    kw = dict(max_new_tokens=zoo.NEW_TOKENS, min_new_tokens=zoo.NEW_TOKENS, do_sample=False,
              return_dict_in_generate=True, output_logits=True, pad_token_id=0)
    row = {"model": spec.name, "row": "generate", "batch": 1, "tokens": zoo.NEW_TOKENS,
           "sides": {}}
    with torch.no_grad():
        ref = model.generate(ids, **kw).logits[0]
        with region(device):
            eager = model.generate(ids, **kw)
        forwards = {}
        try:
            for side in ("stock", "overlay", "cache"):
                forwards[side] = torch.compile(zoo.fresh(type(model).forward.__get__(model)))
                model.forward = forwards[side]
                with flags(side), region(device):
                    out = model.generate(ids, **kw)
                row["sides"][side] = {
                    "err": zoo.max_rel_err(out.logits[0], ref),
                    "token_match": (out.sequences == eager.sequences).float().mean().item()}

            def on(side):
                return lambda: (setattr(model, "forward", forwards[side]),
                                model.generate(ids, **kw))
            time_sides(row, {s: on(s) for s in forwards}, device, iters=1)
        finally:
            model.__dict__.pop("forward", None)
    for res in row["sides"].values():
        for key in ("kernel_mean_us", "wall_mean_us"):
            res[key.replace("_mean_us", "_per_token_us")] = res[key] / zoo.NEW_TOKENS
    return row


def train_row(spec, model, row_name: str) -> dict:
    """``accumulate``: 4 micro-batches inside one region, the casts of the first serving
    the other three; ``step``: one micro-batch whose forward enters a region of its own,
    as a training step does (nothing to reuse)."""
    accumulate = row_name == "accumulate"
    device = model.device.type
    batches = [zoo.make_inputs(spec, model, "batch8", zoo.BATCH, device, seed)[0]
               for seed in range(MICRO_BATCHES if accumulate else 1)]
    row = {"model": spec.name, "row": row_name, "batch": zoo.BATCH,
           "micro_batches": len(batches), "sides": {}}

    def step(fn):
        def run():
            model.zero_grad(set_to_none=True)
            for ids in batches:
                # a step enters its own region; micro-batches run in the caller's
                with contextlib.nullcontext() if accumulate else region(device):
                    loss = fn(ids).float().pow(2).mean()
                loss.backward()
            return torch.cat([p.grad.flatten() for p in model.parameters()
                              if p.grad is not None])
        return run

    model.zero_grad(set_to_none=True)
    for ids in batches:  # fp32 eager
        model(input_ids=ids, use_cache=False).logits.float().pow(2).mean().backward()
    ref = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    calls = {}
    for side in ("stock", "overlay", "cache", "eager"):
        fn = compiled(lambda ids: model(input_ids=ids, use_cache=False).logits, side)
        calls[side] = step(fn)
        with flags(side), region(device):
            row["sides"][side] = {"err": zoo.max_rel_err(calls[side](), ref)}
    time_sides(row, calls, device, iters=3, one_region=accumulate)
    return row


def run(args, argv: list[str]) -> int:
    enabled = torch_overlay.enable()
    doc = {"kind": "cast-cache", "env": environment(["cast-cache", *argv], enabled),
           "settings": {"timer": zoo.PROFILER_TIMER}, "rows": []}
    for name in args.models:
        spec = zoo.SPECS[name]
        model = zoo.build(spec, "cuda")
        bf16 = zoo.build(spec, "cuda").to(torch.bfloat16)
        jobs = [functools.partial(decode_row, spec, model, bf16, b) for b in (1, 8)]
        jobs.append(functools.partial(generate_row, spec, model))
        if spec.train:
            jobs += [functools.partial(train_row, spec, model, r)
                     for r in ("accumulate", "step")]
        for job in jobs:
            torch._dynamo.reset()
            try:
                row = job()
            except Exception as e:  # a failed row is a result too
                traceback.print_exc()
                row = {"model": name, "status": "failed", "message": one_line(e)}
            log(row)
            doc["rows"].append(row)
        del model, bf16, jobs
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(doc, out / "cast_cache.json")
    return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="bench.py cast-cache", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--models", type=lambda s: s.split(","), default=["llama3-8b", "gpt2-large"])
    return run(p.parse_args(argv), argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
