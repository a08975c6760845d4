"""tools/bench.py zoo: transformers architectures, stock Inductor against the overlays.

    python tools/bench.py zoo --out DIR [--models a,b] [--rows decode1,batch8] [--budget-s N]
    python tools/bench.py zoo --compile-only     tiny configs, GPU-free code generation

Models from ``transformers`` config classes with the public configs' dimensions, 2 layers,
random weights, fp32 parameters under bf16 autocast, ``fullgraph=True``. One process,
every overlay enabled: *stock* has their flags patched off. Each side compiles its own
code object cold, ``--compiles`` times, the sides alternating; both are timed in both
orders. BENCHMARKS.md (its opening, the families' notes) says what each row is.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import gc
import itertools
import pathlib
import statistics
import sys
import time
import zlib
from typing import Callable
from unittest import mock

import torch

import torch_overlay
from bench_common import (attempt, both_orders, environment, finish, gpu_available, log,
                          one_line, probe_overlays, relative_error, warm_up_compiler)
from bench_report import GRAPH_MODES, write_json

ROWS = ("decode1", "decode_dyn", "batch8", "train")
GRAPH_ROWS = ("decode1", "decode_dyn")  # the rows timed under CUDA graphs
# each mode's rows: freezing folds the weights into constants, for inference only
MODE_ROWS = {"default": ROWS, **dict.fromkeys(GRAPH_MODES, GRAPH_ROWS),
             "freezing": ("decode1", "decode_dyn", "batch8")}
MODES = tuple(MODE_ROWS)
DYN_BATCHES = (4, 16, 1)  # the first compiles (a size-1 dim cannot be marked dynamic)
SEQ, BATCH, ENC_SEQ = 128, 8, 128
WARMUP, ITERS = 3, 20
# input sets a row's errors are averaged over: one maximum of one output is one sample of
# how a kernel's order of sums rounds
ERR_INPUTS = 4
DEFAULT_BUDGET_S = 420
DEFAULT_COMPILES = 2


@dataclasses.dataclass(frozen=True)
class Spec:
    name: str
    kind: str  # "decoder", "encoder", "encdec", "vision"
    source: str  # the public config the dimensions come from
    classes: tuple[str, str]  # transformers config and model classes
    kwargs: dict  # real dimensions, 2 layers
    tiny: dict  # overrides for --compile-only
    train: bool = False

    @property
    def hidden(self) -> int:
        k = self.kwargs
        return k.get("hidden_size") or k.get("n_embd") or k["d_model"]

    def rows(self) -> tuple[str, ...]:
        gen = self.kind in ("decoder", "encdec")
        return ("decode1", "decode_dyn")[:2 * gen] + ("batch8",) + ("train",)[:self.train]


def _lm(hidden, heads, ffn, vocab, **kw):
    return {"hidden_size": hidden, "num_attention_heads": heads, "intermediate_size": ffn,
            "vocab_size": vocab, "num_hidden_layers": 2, **kw}


def _rope(theta):
    return {"rope_parameters": {"rope_type": "default", "rope_theta": theta}}


_TINY = _lm(64, 4, 128, 256, num_hidden_layers=1)
_TINY_GQA = {**_TINY, "num_key_value_heads": 2}
SPECS = {s.name: s for s in (
    Spec("llama3-8b", "decoder", "meta-llama/Meta-Llama-3-8B (GQA 32:8)",
         ("LlamaConfig", "LlamaForCausalLM"),
         _lm(4096, 32, 14336, 128256, num_key_value_heads=8, **_rope(5e5)), _TINY_GQA),
    Spec("qwen2-7b", "decoder", "Qwen/Qwen2-7B (GQA 28:4, qkv bias)",
         ("Qwen2Config", "Qwen2ForCausalLM"),
         _lm(3584, 28, 18944, 152064, num_key_value_heads=4, rms_norm_eps=1e-6, **_rope(1e6)),
         _TINY_GQA),
    Spec("pythia-1.4b", "decoder", "EleutherAI/pythia-1.4b (GPTNeoX: parallel residual, fused "
         "qkv, rotary on 25%)", ("GPTNeoXConfig", "GPTNeoXForCausalLM"),
         _lm(2048, 16, 8192, 50304, use_parallel_residual=True), _TINY),
    Spec("gpt2-large", "decoder", "openai-community/gpt2-large (Conv1D, tied lm_head)",
         ("GPT2Config", "GPT2LMHeadModel"), dict(n_embd=1280, n_head=20, n_layer=2,
                                                 vocab_size=50257),
         dict(n_embd=64, n_head=4, n_layer=1, vocab_size=256, bos_token_id=0, eos_token_id=0),
         train=True),
    Spec("bert-large", "encoder", "google-bert/bert-large-uncased", ("BertConfig", "BertModel"),
         _lm(1024, 16, 4096, 30522), _TINY, train=True),
    Spec("t5-large", "encdec", "google-t5/t5-large (relu FFN, tied lm_head; decode over 128 "
         "random encoder states, their cross-attention K/V cached)",
         ("T5Config", "T5ForConditionalGeneration"),
         dict(d_model=1024, d_kv=64, d_ff=4096, num_heads=16, num_layers=2,
              num_decoder_layers=2, vocab_size=32128, feed_forward_proj="relu"),
         dict(d_model=64, d_kv=16, d_ff=128, num_heads=4, num_layers=1, num_decoder_layers=1,
              vocab_size=256)),
    Spec("vit-large", "vision", "google/vit-large-patch16-224 (224x224, 197 tokens)",
         ("ViTConfig", "ViTModel"), _lm(1024, 16, 4096, None), _TINY, train=True),
)}
# the most informative first: encoders and decode steps, then prefill, dynamic, training
_DEC = ("llama3-8b", "gpt2-large", "pythia-1.4b", "qwen2-7b")
ORDER = ([("bert-large", "batch8"), ("vit-large", "batch8"), ("t5-large", "batch8")]
         + [(m, "decode1") for m in _DEC + ("t5-large",)] + [(m, "batch8") for m in _DEC]
         + [(m, "decode_dyn") for m in ("llama3-8b", "gpt2-large", "t5-large", "pythia-1.4b",
                                        "qwen2-7b")]
         + [(m, "train") for m in ("gpt2-large", "bert-large", "vit-large")])


def build(spec: Spec, device: str, tiny: bool = False) -> torch.nn.Module:
    """Random weights, seeded: norm weights near 1, biases near 0, matrices with fan-in
    scaling (activations stay O(1)), embeddings (and ViT's class token, positions) N(0, 1)."""
    import transformers
    from transformers.pytorch_utils import Conv1D

    kwargs = {k: v for k, v in {**spec.kwargs, **(spec.tiny if tiny else {})}.items()
              if v is not None}
    config = getattr(transformers, spec.classes[0])(**kwargs)
    extra = {"add_pooling_layer": False} if spec.kind in ("encoder", "vision") else {}
    with torch.device(device):
        model = getattr(transformers, spec.classes[1])(config, **extra).float().eval()
    gen = torch.Generator(device).manual_seed(zlib.crc32(spec.name.encode()))
    seen = set()
    with torch.no_grad():
        for module in model.modules():
            for name, p in module.named_parameters(recurse=False):
                if id(p) in seen:  # tied: its first owner, the embedding, drew it
                    continue
                seen.add(id(p))
                noise = torch.randn(p.shape, device=device, generator=gen)
                if p.dim() == 1:
                    noise = noise * 0.1 + float(name == "weight")
                elif isinstance(module, (torch.nn.Linear, torch.nn.Conv2d)):
                    noise *= p[0].numel() ** -0.5
                elif isinstance(module, Conv1D):  # GPT-2's [in, out] weights
                    noise *= p.shape[0] ** -0.5
                p.copy_(noise)
    return model


def make_inputs(spec: Spec, model, row: str, batch: int, device: str, seed: int = 0) -> tuple:
    """Random inputs (never zeros), seeded by model, row, batch and ``seed``."""
    key = f"{spec.name}/{row}/{batch}" + (f"/{seed}" if seed else "")
    gen = torch.Generator(device).manual_seed(zlib.crc32(key.encode()))
    if spec.kind == "vision":
        size = model.config.image_size
        return (torch.randn(batch, 3, size, size, device=device, generator=gen),)
    seq = 1 if row.startswith("decode") else SEQ
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), device=device, generator=gen)
    if spec.kind == "encdec" and seq == 1:
        enc = torch.randn(batch, ENC_SEQ, model.config.d_model, device=device, generator=gen)
        return (ids, enc, *cross_attention_kv(model, ids, enc))
    return (ids, ids.roll(1, dims=-1)) if spec.kind == "encdec" else (ids,)


def cross_attention_kv(model, ids, enc) -> list[torch.Tensor]:
    """Each decoder layer's cross-attention keys and values of ``enc`` (bf16 autocast), as
    generate's first step caches them: its later steps do not project the encoder states."""
    with torch.no_grad(), torch.autocast("cuda", torch.bfloat16):
        cache = model(encoder_outputs=(enc,), decoder_input_ids=ids,
                      use_cache=True).past_key_values.cross_attention_cache
    return [t for layer in cache.layers for t in (layer.keys, layer.values)]


def kv_cache(kv: tuple):
    """An encoder-decoder cache holding only the cross-attention ``kv``: the step attends
    to its own token (no self-attention past, as the decoders' steps) and to the cache."""
    from transformers.cache_utils import DynamicCache, DynamicLayer, EncoderDecoderCache

    cross = DynamicCache()
    for k, v in zip(kv[::2], kv[1::2]):
        # what DynamicLayer.update stores, without its copy: generate's later steps read
        # the cached tensors themselves
        layer = DynamicLayer()
        layer.dtype, layer.device, layer.keys, layer.values = k.dtype, k.device, k, v
        layer.is_initialized = True
        cross.layers.append(layer)
    cache = EncoderDecoderCache(DynamicCache(), cross)
    cache.is_updated.update(dict.fromkeys(range(len(cross.layers)), True))
    return cache


def forward(spec: Spec, model, inputs: tuple, amp: bool) -> torch.Tensor:
    """The row's output, logits or last_hidden_state, under bf16 autocast if ``amp``."""
    with torch.autocast("cuda", torch.bfloat16, enabled=amp):
        if spec.kind == "vision":
            return model(pixel_values=inputs[0]).last_hidden_state
        if spec.kind == "encoder":
            return model(input_ids=inputs[0]).last_hidden_state
        if spec.kind == "encdec" and inputs[1].is_floating_point():
            kv = inputs[2:] if amp else [t.float() for t in inputs[2:]]  # the fp32 reference's
            return model(encoder_outputs=(inputs[1],), decoder_input_ids=inputs[0],
                         past_key_values=kv_cache(kv), use_cache=True).logits
        if spec.kind == "encdec":
            return model(input_ids=inputs[0], decoder_input_ids=inputs[1],
                         use_cache=False).logits
        return model(input_ids=inputs[0], use_cache=False).logits


def fresh(fn):
    """``fn`` behind a new code object: Dynamo caches compiled code per code object."""
    ns = {"fn": fn}
    exec("def zoo_step(*args, **kw):\n    return fn(*args, **kw)\n", ns)  # noqa: S102
    return ns["zoo_step"]


def side_config(side: str):
    flags = [o.flag for o in torch_overlay.OVERLAYS if hasattr(torch._inductor.config, o.flag)]
    return torch._inductor.config.patch({f: side == "overlay" for f in flags})


def warm_up(call, warmup: int) -> None:
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()


def kernel_us(call, iters: int = ITERS, warmup: int = WARMUP) -> float:
    """GPU time per call: the profiler's CUDA events summed (kernels, memsets, copies; not
    annotations), as its "Self CUDA time total" sums them."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    warm_up(call, warmup)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            call()
        torch.cuda.synchronize()
    us = sum(e.time_range.elapsed_us() for e in prof.events()
             if e.device_type == DeviceType.CUDA and not e.is_user_annotation)
    if not us > 0:
        raise RuntimeError("torch.profiler recorded no CUDA kernel")
    return us / iters


PROFILER_TIMER = "GPU kernel time (torch.profiler, summed)"
WALL_TIMER = "wall time per call (CUDA-graph replays back to back)"


def wall_us(call, iters: int = ITERS, warmup: int = WARMUP) -> float:
    """Host-to-host time per call, the GPU synchronized before and after ``iters`` calls."""
    warm_up(call, warmup)
    start = time.perf_counter()
    for _ in range(iters):
        call()
    torch.cuda.synchronize()
    return 1e6 * (time.perf_counter() - start) / iters


def max_rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max |out - ref| / max |ref| (an elementwise relative error means nothing near 0)."""
    out, ref = out.detach().double(), ref.detach().double()
    return ((out - ref).abs().max() / ref.abs().max()).item()


def counters_fired(before: dict) -> dict:
    from torch._dynamo.utils import counters

    return {k: v - before.get(k, 0) for k, v in counters["inductor"].items()
            if k.startswith(("tensorcore_mm", "gelu_add")) and v > before.get(k, 0)}


def peak_mib(call) -> float:
    """Memory one call allocates above what is allocated before it, at its peak (MiB)."""
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = call()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak / 2**20


def output_code(into: list):
    """Inductor's generated code of the compiles inside, appended to ``into``."""
    from torch._inductor.graph import GraphLowering

    return mock.patch.object(GraphLowering, "save_output_code", into.append)


def same_code(a: list[str], b: list[str]) -> bool | None:
    """Whether two sides generated the same code but its comments (None: no code seen)."""
    def strip(codes):
        return [[ln for ln in c.splitlines() if not ln.lstrip().startswith("#")] for c in codes]
    return strip(a) == strip(b) if a and b else None


def time_sides(entries: dict, runner: Callable, timer: Callable, compiles: int) -> None:
    """Both sides timed twice, in both orders; each side keeps its fastest compile's."""
    times = collections.defaultdict(list)

    def measure(side):
        with side_config(side):
            for c, b in itertools.product(range(compiles), entries):
                times[side, c, b].append(timer(runner(side, c, b)))
    both_orders(("stock", "overlay"), measure)
    for b, e in entries.items():
        for side, res in e["sides"].items():
            means = [statistics.fmean(times[side, c, b]) for c in range(compiles)]
            best = min(range(compiles), key=means.__getitem__)
            res["us"], res["mean_us"] = times[side, best, b], means[best]
            if compiles > 1:
                res["compiles_mean_us"] = means
        e["ratio"] = e["sides"]["stock"]["mean_us"] / e["sides"]["overlay"]["mean_us"]


# where a compile's seconds go (Dynamo's timers): lowering the graph, generating its code,
# loading that code, which waits for its Triton kernels to compile
COMPILE_PHASES = {"lowering": "GraphLowering.run", "codegen": "GraphLowering.codegen",
                  "load": "PyCodeCache.load_by_key_path"}


def phase_seconds() -> dict:
    from torch._dynamo.utils import compilation_time_metrics

    return {name: sum(compilation_time_metrics.get(key, ()))
            for name, key in COMPILE_PHASES.items()}


def compile_sides(step, call, errs, entries: dict, first_inputs: tuple, dynamic: bool,
                  device: str, compile, compiles: int,
                  dyn_max: int | None = None) -> tuple[dict, dict]:
    """Each side compiled ``compiles`` times, cold (one cache a compile), alternating with
    the other side, and run at each batch of ``entries``: its (re)compile times, and its
    first compile's errors (``errs``) and counters, and each (re)compile's phases
    (``COMPILE_PHASES``). ``dynamic``: the batch dim of ``first_inputs`` is marked dynamic,
    up to ``dyn_max`` where given. Returns the compiled steps and the code of each,
    both by (side, compile)."""
    from torch._dynamo.utils import counters
    from torch._inductor.utils import fresh_cache

    batches, compiled, codes = list(entries), {}, collections.defaultdict(list)
    # Dynamo counts every side's compiles against one limit
    with torch._dynamo.config.patch(recompile_limit=max(8, 4 * compiles)):
        for c in range(compiles):  # sides alternate, as in the timed passes
            for side in ("stock", "overlay")[::1 if c % 2 == 0 else -1]:
                compiled[side, c] = compile(fresh(step), fullgraph=True)
                before = dict(counters["inductor"])
                with fresh_cache():  # one cache a compile, its recompiles' too
                    for b in batches:
                        graphs, first = counters["stats"]["unique_graphs"], b == batches[0]
                        with side_config(side), output_code(codes[side, c]):
                            if dynamic and first:
                                bound = {} if dyn_max is None else {"min": 2, "max": dyn_max}
                                for t in first_inputs:
                                    torch._dynamo.mark_dynamic(t, 0, **bound)
                            phases, start = phase_seconds(), time.perf_counter()
                            call(compiled[side, c], b)
                            if device == "cuda":
                                torch.cuda.synchronize()
                            seconds = time.perf_counter() - start
                            phases = {k: round(v - phases[k], 3)
                                      for k, v in phase_seconds().items()}
                        kind = ("compile_s" if first else "recompile_s"
                                if counters["stats"]["unique_graphs"] > graphs else None)
                        if c == 0:
                            with side_config(side):
                                entries[b]["sides"][side] = errs(compiled[side, c], b)
                        res = entries[b]["sides"][side]
                        if kind:  # each side's fastest cold compile; all of them beside it
                            res.setdefault(kind + "_all", []).append(seconds)
                            res.setdefault(kind + "_phases_all", []).append(phases)
                            res[kind] = min(res[kind + "_all"])
                            fastest = res[kind + "_all"].index(res[kind])
                            res[kind + "_phases"] = res[kind + "_phases_all"][fastest]
                if c == 0:
                    entries[batches[0]]["sides"][side]["counters"] = counters_fired(before)
    return compiled, codes


def measure_row(spec: Spec, model, row: str, device: str = "cuda", timer=kernel_us,
                compile=torch.compile, compiles: int = 1,
                dyn_max: int | None = None) -> list[dict]:
    """One row of one model, both sides; one entry per batch (decode_dyn has three).
    Each side compiles ``compiles`` times, alternating with the other side, and keeps its
    fastest compile's time per call and its fastest compile time (errors and counters are the
    first compile's); ``same_code`` says whether the sides' first compiles generated the
    same code (then their ratio is the spread of Inductor's runtime autotuning).
    ``dyn_max``: decode_dyn's batch is marked dynamic up to it."""
    train = row == "train"
    batches = DYN_BATCHES if row == "decode_dyn" else (1,) if row == "decode1" else (BATCH,)
    sets = {b: [make_inputs(spec, model, row, b, device, seed) for seed in range(ERR_INPUTS)]
            for b in batches}

    def step(*t, amp=True):
        out = forward(spec, model, t, amp=amp)
        return out.float().pow(2).mean() if train else out

    def call(fn, b, seed=0):
        # a new step for CUDA graphs (a no-op without): the last call's outputs may be reused
        torch.compiler.cudagraph_mark_step_begin()
        if not train:
            with torch.no_grad():
                return fn(*sets[b][seed])
        model.zero_grad(set_to_none=True)
        loss = fn(*sets[b][seed])
        loss.backward()
        return loss.detach()

    def result(fn, b, seed):
        """What errors are taken of: the output, or every gradient (the loss is one number,
        a sample of rounding; the gradients are the backward's and the forward's work)."""
        out = call(fn, b, seed)
        if not train:
            return out.clone()  # a CUDA graph's next replay overwrites its output
        return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    def errs(fn, b) -> dict:
        pairs = [(result(fn, b, s), r) for s, r in enumerate(refs[b])]
        res = {"errs": [max_rel_err(o, r) for o, r in pairs],
               "rms_errs": [relative_error((o,), (r,)) for o, r in pairs]}
        res["err"], res["rms_err"] = (sum(res[k]) / ERR_INPUTS for k in ("errs", "rms_errs"))
        return res

    entries, refs = {}, {}
    for b in batches:
        # fp32 eager, no autocast
        refs[b] = [result(lambda *t: step(*t, amp=False), b, s) for s in range(ERR_INPUTS)]
        eager = errs(step, b)
        entries[b] = {"model": spec.name, "hidden": spec.hidden, "row": row, "batch": b,
                      "eager_err": eager["err"], "eager_rms_err": eager["rms_err"], "sides": {}}
    torch._dynamo.reset()
    compiled, codes = compile_sides(step, call, errs, entries, sets[batches[0]][0],
                                    row == "decode_dyn", device, compile, compiles, dyn_max)

    def runner(side, c, b):
        return lambda: call(compiled[side, c], b)
    if device == "cuda":  # the stock side's 16-bit copies of fp32 weights among it
        for side, (b, e) in itertools.product(("stock", "overlay"), entries.items()):
            with side_config(side):
                e["sides"][side]["peak_mib"] = peak_mib(runner(side, 0, b))
    time_sides(entries, runner, timer, compiles)
    # the first compile of each side, which covers each batch
    same = same_code(codes["stock", 0], codes["overlay", 0])
    for e in entries.values():
        e["same_code"] = same
    compiled.clear()  # the compiled code and its graphs go with the reset
    torch._dynamo.reset()
    return [entries[b] for b in sorted(batches)]


# -- the run on a GPU ----------------------------------------------------------------

def run(args, argv) -> int:
    import transformers

    args.out.mkdir(parents=True, exist_ok=True)
    workers = warm_up_compiler("cuda")  # before enabling: it disables the overlays when done
    overlays = probe_overlays(None)
    try:
        torch_overlay.enable()
    except torch_overlay.OverlayError as e:  # then both sides are stock Inductor
        log(f"overlays not enabled: {e}")
    env = {**environment(["zoo", *argv], overlays), "transformers": transformers.__version__,
           "compile_workers": workers}
    graphs = args.mode in GRAPH_MODES
    doc = {"env": env, "settings": {"timer": WALL_TIMER if graphs else PROFILER_TIMER,
                                    "warmup": WARMUP, "iters": ITERS, "budget_s": args.budget_s,
                                    "compiles": args.compiles, "mode": args.mode,
                                    "dyn_max": args.dyn_max},
           "models": {}, "rows": []}
    compile = functools.partial(torch.compile, mode=args.mode) if graphs else torch.compile
    plan = [(m, r) for m, r in ORDER if m in args.models and r in args.rows
            and r in SPECS[m].rows()]
    last = {m: i for i, (m, _) in enumerate(plan)}
    models, start = {}, time.perf_counter()

    def measure(spec, row):
        if spec.name not in models:
            models[spec.name] = model = build(spec, "cuda")
            doc["models"][spec.name] = {"source": spec.source, "config": spec.kwargs,
                                        "params": sum(p.numel() for p in model.parameters()),
                                        "attn": model.config._attn_implementation}
        with torch._inductor.config.patch(freezing=args.mode == "freezing"):
            return measure_row(spec, models[spec.name], row,
                               timer=wall_us if graphs else kernel_us, compile=compile,
                               compiles=args.compiles, dyn_max=args.dyn_max)
    for i, (name, row) in enumerate(plan):
        spec, elapsed = SPECS[name], time.perf_counter() - start
        failed = {"model": name, "hidden": spec.hidden, "row": row}
        if args.budget_s and elapsed > args.budget_s:
            doc["rows"].append({**failed, "status": "skipped", "message": "time budget spent"})
        else:
            log(f"[{elapsed:4.0f} s] {name} {row}")
            measured = attempt(lambda: measure(spec, row), failed)
            for e in measured if isinstance(measured, list) else [measured]:
                doc["rows"].append(e)
                if "sides" not in e:
                    continue
                s, o = e["sides"]["stock"], e["sides"]["overlay"]
                log(f"    B={e['batch']}: stock / overlay {s['mean_us']:.1f} / "
                    f"{o['mean_us']:.1f} us ({e['ratio']:.2f}x), err {s['err']:.1e} / "
                    f"{o['err']:.1e}; overlay counters {o.get('counters')}")
        if last[name] == i:
            models.pop(name, None)
        gc.collect()
        torch.cuda.empty_cache()
        doc["wall_s"] = time.perf_counter() - start
        write_json(doc, args.out / "zoo.json")  # after each row: a killed run keeps it
    finish(doc, args.out / "zoo.json")
    return 0


# -- code generation without a GPU ----------------------------------------------------

def compile_only(names, rows=("decode1", "batch8")) -> list[dict]:
    """Tiny configs (1 layer, hidden 64) compiled for the H200 through the GPU-free harness,
    overlays on: the counters of the overlay paths that fired. No train row: backward code
    needs a real GPU. Shape padding is off (it would time matmuls on the device)."""
    from torch._dynamo.utils import counters

    from torch_overlay.testing import get_code
    from torch_overlay.testing.fake_cuda import fake_cuda_tensor_methods

    enabled = torch_overlay.enable()
    results = []
    for name in names:
        spec = SPECS[name]
        model = build(spec, "cpu", tiny=True).requires_grad_(False)
        for row in (r for r in spec.rows() if r in rows):
            res = {"model": name, "row": row}
            inputs = make_inputs(spec, model, row, 1 if row == "decode1" else BATCH, "cpu")

            def step(m, *t):
                with torch.no_grad():
                    return forward(spec, m, t, amp=True)
            try:
                torch._dynamo.reset()
                before, start = dict(counters["inductor"]), time.perf_counter()
                with fake_cuda_tensor_methods(), side_config("overlay"), \
                        torch._inductor.config.patch(joint_graph_constant_folding=False,
                                                     shape_padding=False):
                    code = get_code(torch.compile(step, fullgraph=True), model, *inputs,
                                    force_fake=True)
                res.update(status="ok", seconds=time.perf_counter() - start,
                           counters=counters_fired(before), code_chars=sum(map(len, code)))
            except Exception as e:
                res.update(status="failed", message=one_line(e))
            log(f"{name} {row}: {res['status']} {res.get('counters', res.get('message'))}")
            results.append(res)
    torch._dynamo.reset()
    if enabled:
        torch_overlay.disable(enabled)
    return results


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="bench.py zoo", description=__doc__.splitlines()[0])
    add = p.add_argument
    add("--out", type=pathlib.Path, default=pathlib.Path("bench_out"),
        help="directory for zoo.json and zoo.md (default: bench_out)")
    add("--models", type=lambda s: s.split(","), default=list(SPECS),
        help=f"default: {','.join(SPECS)}")
    add("--rows", type=lambda s: s.split(","),
        help=f"default: {','.join(ROWS)} (with --mode: {','.join(GRAPH_ROWS)} under CUDA "
        f"graphs, {','.join(MODE_ROWS['freezing'])} frozen)")
    add("--budget-s", type=float, default=DEFAULT_BUDGET_S,
        help=f"start no row after this many seconds (default {DEFAULT_BUDGET_S})")
    add("--compiles", type=int, default=DEFAULT_COMPILES,
        help=f"compiles a side, the fastest kept (default {DEFAULT_COMPILES})")
    add("--mode", choices=MODES, default="default", help="torch.compile's mode for both sides, "
        "timed by wall time per call under CUDA graphs; or freezing=True for both")
    add("--dyn-max", type=int, metavar="B",
        help="decode_dyn marks the batch dynamic up to B (at least 16: it times 1, 4, 16)")
    add("--compile-only", action="store_true",
        help="tiny configs, overlays on, GPU-free H200 code generation")
    add("--list", action="store_true", help="the models and their rows")
    args = p.parse_args(argv)
    rows = MODE_ROWS[args.mode]
    args.rows = args.rows or list(rows)
    unknown = [m for m in args.models if m not in SPECS] + [r for r in args.rows if r not in rows]
    if unknown:
        print(f"bench.py zoo: unknown {', '.join(unknown)} (rows in mode {args.mode}: "
              f"{', '.join(rows)})", file=sys.stderr)
        return 2
    if args.dyn_max is not None and args.dyn_max < max(DYN_BATCHES):
        print(f"bench.py zoo: --dyn-max {args.dyn_max} is below a batch decode_dyn times "
              f"({max(DYN_BATCHES)})", file=sys.stderr)
        return 2
    if args.list:
        for s in (SPECS[m] for m in args.models):
            log(f"{s.name}: {s.source}; hidden {s.hidden}; rows {', '.join(s.rows())}")
        return 0
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("bench.py zoo: needs transformers (pip install -e '.[bench]')", file=sys.stderr)
        return 2
    if args.compile_only:
        results = compile_only(args.models, [r for r in args.rows if r in ("decode1", "batch8")])
        args.out.mkdir(parents=True, exist_ok=True)
        write_json({"compile_only": results}, args.out / "zoo_compile_only.json")
        return 0 if all(r["status"] == "ok" for r in results) else 1
    if not gpu_available():
        print("bench.py: no CUDA GPU here; zoo needs one (zoo --compile-only and "
              "zoo --list run without)", file=sys.stderr)
        return 1
    return run(args, argv)
