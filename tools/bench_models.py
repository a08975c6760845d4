"""The models of ``tools/bench.py models``: plain-PyTorch decoder stacks (no transformers,
no download) with the public configs' dimensions, a few layers deep, random weights:
Llama-3-8B's layer (GQA, RMSNorm, rotary, untied lm_head) and GPT-2 large's block
(LayerNorm, learned positions, tied lm_head).

fp32 parameters under bf16 autocast on CUDA (``model.double()`` is the fp64 reference).
With ``input_pos`` the attention reads and writes a static KV cache in module buffers
(prefill: ``arange(T)``; a decode step: ``[T]``), else it is training's causal forward.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

BF16 = torch.bfloat16


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    name: str
    arch: str  # "llama" or "gpt2"
    source: str  # the public config the dimensions come from
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    max_seq: int = 1024  # the KV cache's length
    max_batch: int = 16  # the KV cache's batch
    eps: float = 1e-5
    rope_theta: float = 500000.0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


@dataclasses.dataclass(frozen=True)
class Sizes:
    """The shapes of a model's rows: decode batches, prefill and training tokens."""
    decode_batches: tuple[int, ...] = (1, 16)
    prefill: int = 512  # also the position a decode step writes
    train_batch: int = 4
    train_tokens: int = 512


LLAMA3_8B = dict(arch="llama", source="meta-llama/Meta-Llama-3-8B config.json (2 of 32 layers)",
                 hidden=4096, heads=32, kv_heads=8, intermediate=14336, vocab=128256,
                 eps=1e-5, rope_theta=500000.0)
GPT2_LARGE = dict(arch="gpt2", source="openai-community/gpt2-large config.json (4 of 36 layers)",
                  hidden=1280, heads=20, kv_heads=20, intermediate=5120, vocab=50257, eps=1e-5)

MODEL_SETS: dict[str, tuple[list[ModelConfig], Sizes]] = {
    # what `tools/bench.py models` measures
    "full": ([ModelConfig("llama3-8b-2L", layers=2, **LLAMA3_8B),
              ModelConfig("gpt2-large-4L", layers=4, **GPT2_LARGE)], Sizes()),
    # the same structure at toy sizes: the tests, and a GPU smoke run
    "tiny": ([ModelConfig("llama-tiny", "llama", "tiny Llama (GQA 4:2)", layers=2, hidden=64,
                          heads=4, kv_heads=2, intermediate=160, vocab=256, max_seq=64),
              ModelConfig("gpt2-tiny", "gpt2", "tiny GPT-2", layers=2, hidden=64, heads=4,
                          kv_heads=4, intermediate=256, vocab=256, max_seq=64)],
             Sizes(prefill=16, train_batch=2, train_tokens=16)),
}


def autocast(tokens: torch.Tensor):
    return torch.autocast(tokens.device.type, dtype=BF16)


# -- shared pieces --------------------------------------------------------------------

class Attention(nn.Module):
    """Multi-head attention with grouped KV heads, optional rotary, and a static KV cache."""

    def __init__(self, cfg: ModelConfig, bias: bool, rotary: bool):
        super().__init__()
        self.cfg, self.rotary = cfg, rotary
        hd, kv = cfg.head_dim, cfg.kv_heads
        self.wq = nn.Linear(cfg.hidden, cfg.heads * hd, bias=bias)
        self.wk = nn.Linear(cfg.hidden, kv * hd, bias=bias)
        self.wv = nn.Linear(cfg.hidden, kv * hd, bias=bias)
        self.wo = nn.Linear(cfg.heads * hd, cfg.hidden, bias=bias)
        cache = (cfg.max_batch, kv, cfg.max_seq, hd)
        self.register_buffer("k_cache", torch.zeros(cache, dtype=BF16), persistent=False)
        self.register_buffer("v_cache", torch.zeros(cache, dtype=BF16), persistent=False)

    def forward(self, x, cos, sin, input_pos):
        cfg = self.cfg
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, cfg.heads, cfg.head_dim).transpose(1, 2)
        k = self.wk(x).view(B, T, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        v = self.wv(x).view(B, T, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        if self.rotary:  # transformers' rotate_half convention
            cos, sin = cos.to(q.dtype), sin.to(q.dtype)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        mask = None
        if input_pos is not None:
            # narrow, not [:B]: the GPU-free harness's fake device cannot index
            k_cache, v_cache = self.k_cache.narrow(0, 0, B), self.v_cache.narrow(0, 0, B)
            k_cache.index_copy_(2, input_pos, k.to(k_cache.dtype))
            v_cache.index_copy_(2, input_pos, v.to(v_cache.dtype))
            k, v = k_cache, v_cache
            mask = torch.arange(cfg.max_seq, device=x.device) <= input_pos.unsqueeze(1)  # [T, S]
        group = cfg.heads // cfg.kv_heads
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        q = q.to(v.dtype)  # fp64 reference: the cache's dtype
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                             is_causal=input_pos is None)
        return self.wo(out.transpose(1, 2).reshape(B, T, cfg.heads * cfg.head_dim))


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def upcast(x):
    """fp32 for 16-bit activations; an fp64 reference stays fp64."""
    return x.float() if x.dtype in (torch.bfloat16, torch.float16) else x


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = upcast(x)
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps))


# -- Llama ----------------------------------------------------------------------------

class LlamaLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.hidden, cfg.eps)
        self.attn = Attention(cfg, bias=False, rotary=True)
        self.mlp_norm = RMSNorm(cfg.hidden, cfg.eps)
        self.w1 = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)  # gate
        self.w3 = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)  # up
        self.w2 = nn.Linear(cfg.intermediate, cfg.hidden, bias=False)  # down

    def forward(self, x, cos, sin, input_pos):
        h = x + self.attn(self.attn_norm(x), cos, sin, input_pos)
        y = self.mlp_norm(h)
        return h + self.w2(F.silu(self.w1(y)) * self.w3(y))


class Llama(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList(LlamaLayer(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden, cfg.eps)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        hd = cfg.head_dim
        inv_freq = 1.0 / cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        angles = torch.outer(torch.arange(cfg.max_seq, dtype=torch.float64), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, tokens, input_pos=None):
        """Logits: every position without ``input_pos`` (training), else the last one."""
        with autocast(tokens):
            pos = input_pos if input_pos is not None else torch.arange(tokens.shape[1],
                                                                       device=tokens.device)
            cos, sin = F.embedding(pos, self.cos), F.embedding(pos, self.sin)
            x = self.embed(tokens)
            for layer in self.layers:
                x = layer(x, cos, sin, input_pos)
            if input_pos is not None:
                x = x.narrow(1, x.shape[1] - 1, 1)
            return self.lm_head(self.norm(x))

    def embedding_only_params(self):
        return [self.embed.weight]  # gathered a few rows per token, never read whole


# -- GPT-2 ----------------------------------------------------------------------------

class GPT2Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.attn = Attention(cfg, bias=True, rotary=False)
        self.ln_2 = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.c_fc = nn.Linear(cfg.hidden, cfg.intermediate)
        self.c_proj = nn.Linear(cfg.intermediate, cfg.hidden)

    def forward(self, x, input_pos):
        x = x + self.attn(self.ln_1(x), None, None, input_pos)
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab, cfg.hidden)
        self.wpe = nn.Embedding(cfg.max_seq, cfg.hidden)
        self.blocks = nn.ModuleList(GPT2Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.hidden, eps=cfg.eps)

    def forward(self, tokens, input_pos=None):
        with autocast(tokens):
            pos = input_pos if input_pos is not None else torch.arange(tokens.shape[1],
                                                                       device=tokens.device)
            x = self.wte(tokens) + self.wpe(pos)
            for block in self.blocks:
                x = block(x, input_pos)
            if input_pos is not None:
                x = x.narrow(1, x.shape[1] - 1, 1)
            return F.linear(self.ln_f(x), self.wte.weight)  # tied lm_head

    def embedding_only_params(self):
        return [self.wpe.weight]  # wte is read whole: it is the lm_head


ARCHS = {"llama": Llama, "gpt2": GPT2}


def build(cfg: ModelConfig, device: str, seed: int = 0) -> nn.Module:
    """fp32 parameters, random normal (never the zeros/ones of a fresh init), seeded."""
    model = ARCHS[cfg.arch](cfg).to(device)
    gen = torch.Generator(device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, device=device, generator=gen)
            if p.dim() == 1:  # norm weights around 1, biases around 0
                p.copy_(noise * 0.1 + (1.0 if name.endswith("weight") else 0.0))
            elif isinstance(model.get_submodule(name.rsplit(".", 1)[0]), nn.Embedding):
                p.copy_(noise)
            else:  # fan-in scaling: activations stay O(1)
                p.copy_(noise * p.shape[1] ** -0.5)
        fill_caches(model, seed + 1)
    return model


def caches(model: nn.Module) -> list[torch.Tensor]:
    return [b for name, b in model.named_buffers() if name.endswith("_cache")]


def fill_caches(model: nn.Module, seed: int) -> None:
    """Random keys and values: a decode step attends over a 'prompt' of random data."""
    for i, buf in enumerate(caches(model)):
        gen = torch.Generator(buf.device).manual_seed(seed + i)
        buf.copy_(torch.randn(buf.shape, device=buf.device, generator=gen))


def load_caches(model: nn.Module, saved: list[torch.Tensor]) -> None:
    """Copy saved caches in place (the buffers keep their identity for CUDA graphs)."""
    with torch.no_grad():
        for buf, value in zip(caches(model), saved, strict=True):
            buf.copy_(value)


def param_bytes(model: nn.Module) -> int:
    return sum(p.nbytes for p in model.parameters())


def decode_weight_bytes(model: nn.Module) -> int:
    """Parameter bytes a decode step reads at least once: all but pure lookup tables."""
    return param_bytes(model) - sum(p.nbytes for p in model.embedding_only_params())


def loss_fn(model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = model(tokens)
    return F.cross_entropy(upcast(logits).flatten(0, 1), targets.flatten())


def count_params(cfg: ModelConfig) -> int:
    """Parameters from the config alone (checked against the module in the tests)."""
    h, hd, i = cfg.hidden, cfg.head_dim, cfg.intermediate
    if cfg.arch == "llama":
        layer = h * (cfg.heads + 2 * cfg.kv_heads) * hd + cfg.heads * hd * h + 3 * h * i + 2 * h
        return cfg.layers * layer + 2 * cfg.vocab * h + h
    layer = (4 * h * h + 4 * h) + (2 * h * i + i + h) + 4 * h
    return cfg.layers * layer + (cfg.vocab + cfg.max_seq) * h + 2 * h

