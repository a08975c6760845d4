"""What tools/bench.py measures: the workloads, their shapes, and the modes they run in.

Each ``Case`` is one workload at one shape: the eager function and how to draw its
random inputs.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

BF16, FP32 = torch.bfloat16, torch.float32


# -- modes ------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Mode:
    name: str
    short: str  # column header
    compile_mode: str | None = None  # torch.compile mode; None runs eagerly
    overlays: bool = False
    only: tuple[str, ...] = ()  # these overlays (and what they require) instead of --overlays
    # torch._inductor.config.freezing: the weights (Case.weight_args) become parameters of
    # a module and Inductor folds them into constants (inference cases only)
    freezing: bool = False

    @property
    def max_autotune(self) -> bool:
        return (self.compile_mode or "").startswith("max-autotune")


# "max-autotune-no-cudagraphs": CUDA graphs would change the host overhead, not the
# kernels, and would replay into static buffers that the rotated inputs bypass.
MAX_AUTOTUNE = "max-autotune-no-cudagraphs"
MODES: dict[str, Mode] = {m.name: m for m in (
    Mode("eager", "eager"),
    Mode("stock", "stock", "default"),
    Mode("stock-max-autotune", "stock MA", MAX_AUTOTUNE),
    Mode("overlay", "overlay", "default", overlays=True),
    Mode("overlay-max-autotune", "overlay MA", MAX_AUTOTUNE, overlays=True),
    Mode("stock_freezing", "stock frz", "default", freezing=True),
    Mode("overlay_freezing", "overlay frz", "default", overlays=True, freezing=True),
    # stock max-autotune with prologue_downcast alone (the series' first patch)
    Mode("prologue-max-autotune", "MA + pd", MAX_AUTOTUNE, overlays=True,
         only=("prologue_downcast",)),
    # stock max-autotune with the patches meant for upstream (0001-0005)
    Mode("upstream-max-autotune", "MA + up", MAX_AUTOTUNE, overlays=True,
         only=("prologue_downcast", "downcast_mm", "bmm_prologue", "template_fill_order")),
)}
# what a run measures unless --modes names others
DEFAULT_MODES = tuple(m for m in MODES if m not in ("prologue-max-autotune",
                                                    "upstream-max-autotune"))


# -- cases ------------------------------------------------------------------------

# rand(shape, dtype, scale) -> tensor: random normal data on the device under test
Rand = Callable[..., torch.Tensor]


@dataclasses.dataclass(frozen=True)
class Case:
    workload: str
    label: str  # shape and variant, e.g. "bf16 tanh 4096x4096x4096"
    params: dict
    dtype: torch.dtype  # precision of the arithmetic: sets the error tolerance
    make_inputs: Callable[[Rand], tuple[torch.Tensor, ...]]
    fn: Callable[..., torch.Tensor]
    train: bool = False  # the step is forward + backward; the last input is grad_out
    required_max_autotune: bool = False  # a required shape set: max-autotune by default
    weight_args: tuple[int, ...] = ()  # inputs that are a model's weights: what freezing folds

    @property
    def id(self) -> str:
        return f"{self.workload}/{self.label}"

    def step(self, f: Callable[..., torch.Tensor]) -> Callable[..., tuple[torch.Tensor, ...]]:
        """The timed call around ``f`` (case.fn, compiled or not): outputs as a tuple."""
        return functools.partial(train_step if self.train else inference_step, f)


def inference_step(f, *inputs):
    with torch.no_grad():
        return (f(*inputs),)


def train_step(f, *inputs):
    # autograd.grad rather than .backward(): nothing accumulates into .grad between calls
    *args, grad_out = inputs
    out = f(*args)
    return (out.detach(), *torch.autograd.grad(out, args, grad_out))


# -- the eager functions ----------------------------------------------------------

def autocast_bf16(f):
    """``f`` run under bf16 autocast: fp32 inputs, bf16 matrix products."""
    def autocast_fn(*args):
        with torch.autocast("cuda", dtype=BF16):
            return f(*args)
    return autocast_fn


def linear(x, w):
    return F.linear(x, w)


def bmm(x, w):
    return torch.bmm(x, w.transpose(1, 2))


def matmul_t(x, w):
    # the weight transposed before autocast casts it, where F.linear casts it first
    return x @ w.t()


def gelu_linear_add(x, w, b, r, approximate):
    return F.gelu(F.linear(x, w, b), approximate=approximate) + r


def gelu_add(x, r, approximate):
    return F.gelu(x, approximate=approximate) + r


def mlp_block(x, w1, b1, w2, b2):
    """x + fc2(gelu(fc1(x))): a GPT-style transformer MLP with its residual."""
    return x + F.linear(F.gelu(F.linear(x, w1, b1), approximate="tanh"), w2, b2)


# -- the workloads and their shapes -----------------------------------------------

# tensorcore_mm's required shape set: decode (M <= 16) to prefill and square
TENSORCORE_MM_SHAPES = [(m, 4096, 4096) for m in (1, 16, 128, 1024, 2048, 4096)] + [
    (16, 11008, 4096), (2048, 11008, 4096), (8192, 8192, 8192)]
# Llama-2-7B's fused qkv (4096 -> 12288) and down projection (11008 -> 4096),
# decode at batch 16 and prefill of 2048 tokens
LLM_SHAPES = [(16, 12288, 4096), (2048, 12288, 4096), (16, 4096, 11008), (2048, 4096, 11008)]
# batched decode (M = 64-256) on Llama-3-8B's 4096 -> 14336 and back, and the layers of
# a BERT/ViT-large (hidden 1024, ffn 4096) at batch 8 x 128 tokens
BATCHED_SHAPES = [(64, 14336, 4096), (256, 14336, 4096), (64, 4096, 14336), (256, 4096, 4096),
                  (1024, 1024, 1024), (1024, 4096, 1024), (1024, 1024, 4096)]
# a weight per batch entry (8 experts of 4096 -> 1024), decode to prefill
BMM_SHAPES = [(8, m, 1024, 4096) for m in (1, 16, 128, 1024)]
GELU_LINEAR_SHAPES = [(8192, 4096, 1024), (4096, 4096, 4096), (2048, 16384, 4096)]
# x @ w.t() at decode and batched decode
MATMUL_T_SHAPES = [(16, 4096, 4096), (16, 14336, 4096), (256, 4096, 4096)]
POINTWISE_SIZES = {"1M": 1 << 20, "64M": 1 << 26}
# (tokens, hidden, ffn): a small model at 8k tokens, a 6.7B-class layer at 4k
MLP_SHAPES = [(8192, 1024, 4096), (4096, 4096, 16384)]


def weight_case(workload: str, fn, M: int, N: int, K: int, **kwargs) -> Case:
    """``fn`` of fp32 x [M, K] and an fp32 [N, K] weight under bf16 autocast."""
    return Case(
        workload, f"{M}x{N}x{K}", dict(M=M, N=N, K=K), BF16,
        make_inputs=lambda rand: (rand((M, K), FP32), rand((N, K), FP32, K ** -0.5)),
        fn=autocast_bf16(fn),
        weight_args=(1,),
        **kwargs,
    )


def linear_cases(shapes=None) -> Iterator[Case]:
    for M, N, K in shapes or TENSORCORE_MM_SHAPES + LLM_SHAPES + BATCHED_SHAPES:
        yield weight_case("linear", linear, M, N, K,
                          required_max_autotune=(M, N, K) in TENSORCORE_MM_SHAPES)


def matmul_t_cases() -> Iterator[Case]:
    for M, N, K in MATMUL_T_SHAPES:
        yield weight_case("matmul_t", matmul_t, M, N, K)


def bmm_cases() -> Iterator[Case]:
    for B, M, N, K in BMM_SHAPES:
        yield Case(
            "bmm", f"{B}x{M}x{N}x{K}", dict(B=B, M=M, N=N, K=K), BF16,
            make_inputs=lambda rand, B=B, M=M, N=N, K=K: (
                rand((B, M, K), FP32), rand((B, N, K), FP32, K ** -0.5)),
            fn=autocast_bf16(bmm),
            weight_args=(1,),
        )


def gelu_linear_cases(shapes=None) -> Iterator[Case]:
    # bf16: every tensor bf16; autocast: fp32 tensors under bf16 autocast
    for variant, in_dtype in (("bf16", BF16), ("autocast", FP32)):
        for approximate in ("tanh", "none"):
            for M, N, K in shapes or GELU_LINEAR_SHAPES:
                fn = functools.partial(gelu_linear_add, approximate=approximate)
                # bf16 + fp32 residual promotes: the autocast output is fp32
                yield Case(
                    "gelu_linear", f"{variant} {approximate} {M}x{N}x{K}",
                    dict(M=M, N=N, K=K, variant=variant, approximate=approximate), BF16,
                    make_inputs=lambda rand, M=M, N=N, K=K, dt=in_dtype: (
                        rand((M, K), dt), rand((N, K), dt, K ** -0.5),
                        rand((N,), dt, 0.1), rand((M, N), dt)),
                    fn=autocast_bf16(fn) if variant == "autocast" else fn,
                    weight_args=(1, 2),
                    required_max_autotune=approximate == "tanh" and variant == "bf16",
                )


def pointwise_cases() -> Iterator[Case]:
    for dtype in (FP32, BF16):
        for approximate in ("tanh", "none"):
            for size, n in POINTWISE_SIZES.items():
                yield Case(
                    "pointwise", f"{str(dtype).removeprefix('torch.')} {approximate} {size}",
                    dict(n=n, dtype=str(dtype), approximate=approximate), dtype,
                    make_inputs=lambda rand, n=n, dt=dtype: (rand((n,), dt), rand((n,), dt)),
                    fn=functools.partial(gelu_add, approximate=approximate),
                )


def mlp_cases() -> Iterator[Case]:
    for train in (False, True):
        for T, H, Fd in MLP_SHAPES:
            yield Case(
                "mlp", f"{'fwd+bwd' if train else 'fwd'} {T}x{H}x{Fd}",
                dict(tokens=T, hidden=H, ffn=Fd, train=train), BF16,
                make_inputs=functools.partial(mlp_inputs, T=T, H=H, Fd=Fd, train=train),
                fn=autocast_bf16(mlp_block),
                train=train,
                weight_args=() if train else (1, 2, 3, 4),
                required_max_autotune=train and (T, H, Fd) == MLP_SHAPES[0],
            )


def mlp_inputs(rand: Rand, T: int, H: int, Fd: int, train: bool) -> tuple[torch.Tensor, ...]:
    inputs = (rand((T, H), FP32), rand((Fd, H), FP32, H ** -0.5), rand((Fd,), FP32, 0.1),
              rand((H, Fd), FP32, Fd ** -0.5), rand((H,), FP32, 0.1))
    if not train:
        return inputs
    return (*(t.requires_grad_() for t in inputs), rand((T, H), FP32))


WORKLOADS: dict[str, Callable[..., Iterator[Case]]] = {
    "linear": linear_cases, "matmul_t": matmul_t_cases, "bmm": bmm_cases,
    "gelu_linear": gelu_linear_cases,
    "pointwise": pointwise_cases, "mlp": mlp_cases}


# the workloads whose cases take other (M, N, K) shapes (bench.py --mnk)
SHAPED = ("linear", "gelu_linear")


def all_cases(workloads: list[str] | None = None,
              shapes: list[tuple[int, int, int]] | None = None) -> list[Case]:
    if shapes:
        return [c for name in (workloads or ["linear"]) if name in SHAPED
                for c in WORKLOADS[name](shapes)]
    return [c for name in (workloads or WORKLOADS) for c in WORKLOADS[name]()]
