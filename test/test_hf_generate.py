"""HF ``generate()`` under autocast with fp32 weights: which KV cache works (CPU, eager).

The overlays serve ``generate()`` over a compiled ``model.forward`` wherever stock
Inductor does; what fails here fails in eager already. transformers' static cache (the
one its docs recommend for compiled decode) sizes its layers from the first keys it
stores: under autocast Llama's keys leave rotary embedding as fp32 (its cos/sin are
fp32) and its values leave the linear as bf16, so storing the values fails. The default
(dynamic) cache concatenates each on its own and works; README's Safety section says so.
If this test fails because the static cache works, transformers fixed it: update README.
"""
from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")


def tiny_llama() -> torch.nn.Module:
    cfg = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=128, max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


def generate(model, **kw) -> torch.Tensor:
    ids = torch.randint(0, 128, (2, 5), generator=torch.Generator().manual_seed(1))
    with torch.autocast("cpu", torch.bfloat16):
        return model.generate(ids, max_new_tokens=4, do_sample=False, **kw)


def test_dynamic_cache_under_autocast():
    model = tiny_llama()
    out = generate(model)
    assert out.shape == (2, 9)
    # greedy decoding with the cache = greedy decoding recomputing every prefix
    assert torch.equal(out, generate(model, use_cache=False))


def test_static_cache_under_autocast_fails_in_eager():
    with pytest.raises(RuntimeError, match="same dtype"):
        generate(tiny_llama(), cache_implementation="static")
