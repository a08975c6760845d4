"""tools/bench.py cast-cache: compiled decode inside one autocast region, with the
parameter casts kept across calls (``config.autocast_param_cache``) and without.

    python tools/bench.py cast-cache --out DIR [--models llama3-8b,gpt2-large]

Sides and rows: BENCHMARKS.md's "Autocast region" says what each one is. The zoo's models
(2 layers, random weights); kernel and wall time, both orders; errors against fp32 eager.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import pathlib
import statistics
import sys

import torch

import bench_zoo as zoo
import torch_overlay
from bench_common import attempt, both_orders, environment, finish, log

SIDES = ("stock", "overlay", "cache", "bf16", "eager")
MICRO_BATCHES = 4
PROMPT, NEW_TOKENS = 32, 32  # generate(): prompt tokens, then greedy new tokens


def flags(side: str):
    names = [o.flag for o in torch_overlay.OVERLAYS]
    on = {"overlay": set(names) - {"autocast_param_cache"}, "cache": set(names)}.get(side, ())
    return torch._inductor.config.patch({f: f in on for f in names})


def region(device: str, enabled: bool = True):
    return torch.autocast(device, torch.bfloat16, enabled=enabled)


def time_sides(row: dict, calls: dict, device: str, iters: int = zoo.ITERS,
               one_region: bool = True, wall_iters: int | None = None) -> None:
    """Each side's kernel and wall time per call, all its calls in one region
    (``one_region``) or each call entering its own, both orders; the wall over
    ``wall_iters`` calls where given (a host-bound call varies more than its kernels)."""
    from torch._dynamo.utils import counters

    def measure(side):
        res = row["sides"][side]
        own = region(device) if side != "bf16" and one_region else contextlib.nullcontext()
        with flags(side), own:
            for key, timer, n in (("kernel_us", zoo.kernel_us, iters),
                                  ("wall_us", zoo.wall_us, wall_iters or iters)):
                res.setdefault(key, []).append(timer(calls[side], n))
            if side == "cache":
                res["held_mib"] = counters["inductor"]["param_cast_cache_bytes"] / 2**20
    both_orders([s for s in SIDES if s in calls], measure)
    for res in row["sides"].values():
        for key in ("kernel", "wall"):
            res[f"{key}_mean_us"] = statistics.fmean(res[f"{key}_us"])


def compiled(fn, side: str):
    return fn if side == "eager" else torch.compile(zoo.fresh(fn))


def decode_row(spec, model, bf16, batch: int) -> dict:
    device = model.device.type
    ids = zoo.make_inputs(spec, model, "decode1", batch, device)[0]
    row = {"model": spec.name, "row": "decode", "batch": batch, "sides": {}}
    with torch.no_grad():
        ref = model(input_ids=ids, use_cache=False).logits
        calls = {}
        for side in SIDES:
            m = bf16 if side == "bf16" else model
            calls[side] = compiled(lambda m=m: m(input_ids=ids, use_cache=False).logits, side)
            with flags(side), region(device, enabled=side != "bf16"):
                calls[side]()
                row["sides"][side] = {"err": zoo.max_rel_err(calls[side](), ref)}
        time_sides(row, calls, device)
    return row


@contextlib.contextmanager
def compiled_forwards(model, sides):
    """Per side ``model.forward`` compiled as a code object of its own; ``use(side)`` puts
    it on the instance, where generate() looks it up."""
    forwards = {s: torch.compile(zoo.fresh(type(model).forward.__get__(model))) for s in sides}
    try:
        yield lambda side: setattr(model, "forward", forwards[side])
    finally:
        model.__dict__.pop("forward", None)


def generate_row(spec, model) -> dict:
    """NEW_TOKENS greedy tokens after a random prompt, batch 1: errors of the first step's
    logits, and the share of eager autocast's tokens each side generates."""
    device = model.device.type
    gen = torch.Generator(device).manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (1, PROMPT), device=device, generator=gen)
    kw = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
              return_dict_in_generate=True, output_logits=True, pad_token_id=0)
    row = {"model": spec.name, "row": "generate", "batch": 1, "tokens": NEW_TOKENS,
           "sides": {}}
    sides = ("stock", "overlay", "cache")
    # the frames past generate()'s graph breaks are the model's own, shared by the sides,
    # each recompiled per side and KV-cache shape: at Dynamo's default limit of 8 the
    # last side measured would run them eagerly
    with torch.no_grad(), compiled_forwards(model, sides) as use, \
            torch._dynamo.config.patch(recompile_limit=64):
        ref = model.generate(ids, **kw).logits[0]
        with region(device):
            eager = model.generate(ids, **kw)
        for side in sides:
            use(side)
            with flags(side), region(device):
                out = model.generate(ids, **kw)
            row["sides"][side] = {"err": zoo.max_rel_err(out.logits[0], ref), "token_match":
                                  (out.sequences == eager.sequences).float().mean().item()}
        time_sides(row, {s: lambda s=s: (use(s), model.generate(ids, **kw)) for s in sides},
                   device, iters=1, wall_iters=5)
    for res in row["sides"].values():
        for key in ("kernel", "wall"):
            res[f"{key}_per_token_us"] = res[f"{key}_mean_us"] / NEW_TOKENS
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

    def step(fn, own_region=not accumulate):
        def run():
            model.zero_grad(set_to_none=True)
            for ids in batches:
                # a step enters its own region; micro-batches run in the caller's
                with region(device) if own_region else contextlib.nullcontext():
                    loss = fn(ids).float().pow(2).mean()
                loss.backward()
            return torch.cat([p.grad.flatten() for p in model.parameters()
                              if p.grad is not None])
        return run

    def logits(ids):
        return model(input_ids=ids, use_cache=False).logits
    ref = step(logits, own_region=False)()  # fp32 eager
    calls = {}
    for side in ("stock", "overlay", "cache", "eager"):
        calls[side] = step(compiled(logits, side))
        with flags(side), region(device):
            row["sides"][side] = {"err": zoo.max_rel_err(calls[side](), ref)}
    time_sides(row, calls, device, iters=3, one_region=accumulate)
    return row


def run(args, argv: list[str]) -> int:
    doc = {"kind": "cast-cache", "env": environment(["cast-cache", *argv], torch_overlay.enable()),
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
            row = attempt(job, {"model": name})
            log(row)
            doc["rows"].append(row)
        del model, bf16, jobs
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    args.out.mkdir(parents=True, exist_ok=True)
    finish(doc, args.out / "cast_cache.json")
    return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="bench.py cast-cache", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=pathlib.Path, required=True)
    p.add_argument("--models", type=lambda s: s.split(","), default=["llama3-8b", "gpt2-large"])
    return run(p.parse_args(argv), argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
