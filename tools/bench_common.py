"""What every benchmark of tools/bench.py shares: logging, the timers, the overlay
state of a mode, the run's environment and its results files."""
from __future__ import annotations

import contextlib
import datetime
import math
import pathlib
import platform
import shlex
import subprocess
import traceback
from typing import Callable, Sequence

import torch

import torch_overlay
from bench_report import render_run, write_json
from bench_workloads import MODES, Mode

REPO = pathlib.Path(__file__).resolve().parent.parent
# do_bench arguments are milliseconds of warm-up and of timed repetitions
WARMUP_MS, REP_MS = 25, 100


def log(*parts) -> None:
    print(*parts, flush=True)  # flush: a killed run still shows where it was


def median_ms(fn: Callable[[], object]) -> float:
    import triton.testing

    return triton.testing.do_bench(fn, warmup=WARMUP_MS, rep=REP_MS, return_mode="median")


def both_orders(sides: Sequence[str], measure: Callable[[str], None]) -> None:
    """``measure`` each side in the given order, then in reverse: going first or last
    (a cold clock, the caches another side filled) favours no side."""
    for order in (list(sides), list(sides)[::-1]):
        for side in order:
            measure(side)


def relative_error(outputs, refs) -> float:
    """The largest ||out - ref|| / ||ref|| over the outputs; NaN or inf gives inf."""
    worst = 0.0
    for out, ref in zip(outputs, refs, strict=True):
        ref = ref.detach().double()
        err = (torch.linalg.vector_norm(out.detach().double() - ref)
               / torch.linalg.vector_norm(ref)).item()
        worst = max(worst, err if math.isfinite(err) else math.inf)
    return worst


def gpu_available() -> bool:
    """A real CUDA device: asks the driver (torch.cuda.is_available() is also true where
    the GPU-free test harness fakes one)."""
    count = getattr(torch._C, "_cuda_getDeviceCount", None)
    return count is not None and count() > 0


def synchronize(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


@contextlib.contextmanager
def mode_context(mode: Mode, overlays: list[str] | None):
    """Each mode starts from nothing: overlays on or off as the mode says, Dynamo reset,
    and a fresh Inductor and Triton cache directory, so its compile time is a cold
    compile and stock and overlay never share a cache entry. ``TORCH_OVERLAY_FORCE=1``
    skips an overlay that does not apply to this torch instead of failing the mode."""
    from torch._inductor.utils import fresh_cache

    torch_overlay.disable()
    torch._dynamo.reset()
    try:
        if mode.overlays:
            torch_overlay.enable(list(mode.only) or overlays)
        with fresh_cache(), torch._inductor.config.patch(freezing=mode.freezing):
            yield
    finally:
        torch_overlay.disable()
        torch._dynamo.reset()


def one_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip().splitlines()
    return text[0][:300] if text else type(e).__name__


def attempt(job: Callable[[], dict], failed: dict) -> dict:
    """``job()``; once it raises, ``failed`` with the exception's line: one row's failure
    is a result, and the run goes on."""
    try:
        return job()
    except Exception as e:
        traceback.print_exc()
        log(f"    failed: {one_line(e)}")
        return {**failed, "status": "failed", "message": one_line(e)}


def warm_up_compiler(device: str) -> int:
    """Start Inductor's compile workers and load its modules before the first case, so
    that case's compile time is not charged for them. Returns the workers answering (0:
    every Triton kernel compiles in this process, which compile times then include)."""
    from torch._inductor.async_compile import AsyncCompile, get_compile_threads

    x = torch.randn(1 << 10, device=device)
    with mode_context(MODES["stock"], None):
        torch.compile(torch.nn.functional.gelu, dynamic=False)(x)
        synchronize(device)
    try:  # until the workers answer, Inductor compiles each kernel in this process
        AsyncCompile.wait_pool_ready(timeout=60)
    except Exception as e:  # noqa: BLE001 - then compiles stay in this process, said once
        log(f"compile workers not ready: {one_line(e)}")
    return get_compile_threads() if AsyncCompile.use_process_pool() else 0


def environment(argv: list[str], overlays: list[str] | None) -> dict:
    import triton

    def git(*cmd):
        try:
            return subprocess.run(["git", *cmd], cwd=REPO, capture_output=True, text=True,
                                  timeout=10, check=True).stdout.strip()
        except Exception:  # the device machine gets the tree without .git
            return None
    commit = git("rev-parse", "--short", "HEAD")
    if commit and git("status", "--porcelain", "--untracked-files=no"):
        commit += "+dirty"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name() if gpu_available() else "none (GPU-free harness)",
        "torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
        "python": platform.python_version(), "torch_overlay": torch_overlay.__version__,
        "git": commit, "overlays": overlays or [],
        "command": shlex.join(["python", "tools/bench.py", *argv]),
    }


def probe_overlays(names: list[str] | None) -> list[str] | None:
    """The overlays the overlay modes will run with (requirements included), said up front."""
    try:
        enabled = torch_overlay.enable(names)
    except torch_overlay.OverlayError as e:
        log(f"overlays: the overlay modes will fail: {e}")
        return names  # each overlay mode then fails with this reason
    finally:
        torch_overlay.disable()
    if torch_overlay.killed():
        log("overlays: TORCH_OVERLAY_DISABLE is set: the overlay modes measure stock Inductor")
    else:
        log(f"overlays: {', '.join(enabled) or 'none: the overlay modes measure stock Inductor'}")
    return enabled


def finish(doc: dict, json_path: pathlib.Path) -> None:
    """The JSON, and its tables beside it."""
    write_json(doc, json_path)
    text = render_run(doc)
    json_path.with_suffix(".md").write_text(text)
    wall = f"; {doc['wall_s']:.0f} s in all" if "wall_s" in doc else ""
    log(f"{text}\nresults: {json_path}{wall}")
