"""tensorcore_mm_precompile on a GPU: the cold compile time of a Llama-3-8B-sized layer at
decode (B=16) with and without it, and the failure it prevents (every template kernel's
load refused as CUDA_ERROR_NO_BINARY_FOR_GPU). Each compile in a fresh process with empty
Inductor and Triton caches; prints one RESULT line per compile.

    python tools/precompile_cost.py

Results: tools/bench_results/precompile_cost_h100.log.
"""
import json, os, subprocess, sys, tempfile, time

def child(pre: bool, inject: bool):
    import torch, torch.nn.functional as F
    import torch_overlay
    torch_overlay.enable()
    from torch._dynamo.utils import counters
    from torch._inductor import config
    from unittest import mock
    torch.manual_seed(0)
    d, h = 4096, 14336
    ws = [torch.randn(n, k, device="cuda") / k**0.5 for n, k in
          [(6144, d), (d, d), (h, d), (h, d), (d, h)]]
    x = torch.randn(16, d, device="cuda")

    def layer(x, wqkv, wo, w1, w3, w2):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            q = F.linear(x, wqkv)[:, :d]
            y = x + F.linear(q, wo)
            return y + F.linear(F.silu(F.linear(y, w1)) * F.linear(y, w3), w2)

    import contextlib
    ctx = contextlib.nullcontext()
    if inject:
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner
        real = CachingAutotuner._make_launchers
        def refuse(self):
            if self.fn.__name__.startswith(("triton_tensorcore", "triton_tem_")):
                raise RuntimeError("Triton Error [CUDA]: CUDA_ERROR_NO_BINARY_FOR_GPU")
            return real(self)
        ctx = mock.patch.object(CachingAutotuner, "_make_launchers", refuse)
    with config.patch(tensorcore_mm_precompile=pre, **{"tensorcore_mm_autocast": True,
                                                       "autocast_matmul_meta": True}), ctx:
        t = time.perf_counter()
        try:
            out = torch.compile(layer)(x, *ws)
            torch.cuda.synchronize()
            err = None
        except Exception as e:
            out, err = None, f"{type(e).__name__}: {str(e)[:300]}"
        dt = time.perf_counter() - t
    res = {"precompile": pre, "inject": inject, "compile_s": round(dt, 2), "error": err,
           "counters": {k: v for k, v in counters["inductor"].items() if k.startswith("tensorcore")}}
    if out is not None:
        ref = layer(x, *ws)
        res["max_abs_diff_vs_eager"] = (out.float() - ref.float()).abs().max().item()
    print("RESULT " + json.dumps(res), flush=True)

if __name__ == "__main__":
    if len(sys.argv) > 1:
        child(sys.argv[1] == "1", sys.argv[2] == "1")
        sys.exit()
    runs = [("0", "0"), ("1", "0"), ("0", "0"), ("1", "0"), ("0", "1"), ("1", "1")]
    for pre, inject in runs:
        with tempfile.TemporaryDirectory() as d:  # cold Inductor and Triton caches
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=f"{d}/inductor", TRITON_CACHE_DIR=f"{d}/triton")
            p = subprocess.run([sys.executable, __file__, pre, inject], env=env, capture_output=True, text=True)
            lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT")]
            print(lines[0] if lines else f"rc={p.returncode} {p.stderr[-1500:]}", flush=True)
            if inject == "1":
                warn = [l for l in p.stderr.splitlines() if "tensorcore_mm" in l and "stock lowering" in l]
                print("  warnings:", warn, flush=True)
