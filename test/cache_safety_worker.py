"""One process of test_cache_safety: compile sin(x) on CPU with a toy overlay on or off.

The toy overlay lowers aten.sin as cos, so the result tells which code ran. Prints
one JSON line: the state, whether the result was cos, and the FX graph cache hits.
"""
import json
import sys

import torch
from torch._dynamo.utils import counters
from torch._inductor.lowering import lowerings

import torch_overlay
from torch_overlay._registry import fingerprint, Hook, Overlay, REGISTRY, torch_version

aten = torch.ops.aten
HOOK = Hook(owner="torch._inductor.lowering.lowerings", key=lambda: aten.sin.default,
            key_repr="aten.sin.default",
            build=lambda original: lowerings[aten.cos.default])
REGISTRY.register(Overlay(name="toy_sin_as_cos", purpose="cache-safety probe", hooks=(HOOK,),
                          validated={torch_version(): {HOOK.target: fingerprint(HOOK.upstream_source())}}))


def main(state: str, unsafe: bool) -> None:
    if unsafe:  # control: without the cache key carried by the pass hooks
        REGISTRY._sync_pass_hooks = lambda: None
    if state == "on":
        torch_overlay.enable("toy_sin_as_cos")
    x = torch.randn(64)
    out = torch.compile(torch.sin)(x)
    print(json.dumps({
        "state": state,
        "cos": bool(torch.allclose(out, torch.cos(x))),
        "sin": bool(torch.allclose(out, torch.sin(x))),
        "fx_hits": counters["inductor"]["fxgraph_cache_hit"],
        "aot_hits": counters["aot_autograd"]["autograd_cache_hit"],
    }))


if __name__ == "__main__":
    main(sys.argv[1], unsafe="--unsafe" in sys.argv)
