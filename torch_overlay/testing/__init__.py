"""Inductor codegen on a machine with or without a GPU.

``get_code`` has the contract of ``torch._inductor.utils.get_code``: it returns the
generated sources (wrapper first, per graph, forward then backward) and compiles or
runs nothing. CPU tensors and modules in ``args`` stand for CUDA ones with the same
shape, stride and dtype. With the profiled GPU present it is used; otherwise the
GPU is faked (``fake_cuda``) and the result is the same source a real compile gives.
"""
from __future__ import annotations

import contextlib
import copy
import warnings
from typing import Any, Callable

import torch

from .gpu_profiles import GPU_PROFILES, GPUProfile, get_profile

__all__ = ["GPU_PROFILES", "GPUProfile", "get_code", "get_profile", "has_real_gpu", "cuda_mode"]


def has_real_gpu(gpu: str) -> bool:
    """True when a real CUDA device of this profile is present."""
    profile = get_profile(gpu)
    # asks the driver: torch.cuda.is_available() is true on a faked GPU too (gpu_free)
    return (
        torch._C._cuda_getDeviceCount() > 0
        and torch.cuda.get_device_name() == profile.name
    )


@contextlib.contextmanager
def cuda_mode(gpu: str = "h200", *, force_fake: bool = False):
    """Yields a function that turns a CPU tensor or module into a CUDA one for ``gpu``.

    Inside, torch.compile generates code for that GPU: the real one if present,
    else a faked one (FakeTensors, device queries answered from the profile).
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    from .fake_cuda import fake_cuda

    profile = get_profile(gpu)
    if not force_fake and has_real_gpu(gpu):
        yield _converter(lambda t: _like(t, "cuda"))
        return
    with fake_cuda(profile), warnings.catch_warnings():
        # the compiled call checks input alignment through data_ptr (0 on FakeTensors)
        warnings.filterwarnings("ignore", "Accessing the data pointer of FakeTensor")
        mode = FakeTensorMode(allow_non_fake_inputs=True)

        def to_fake(t: torch.Tensor) -> torch.Tensor:
            if t.requires_grad:
                # autograd asks the CUDA driver for a stream: a C++ abort, not an error
                raise NotImplementedError(
                    f"backward codegen needs a real GPU: the {gpu} profile is faked here. "
                    "Pass tensors and parameters with requires_grad=False "
                    "(module.requires_grad_(False)), or test the "
                    "backward on device='cpu' or on a GPU machine."
                )
            with mode:
                return _like(t, "cuda")

        yield _converter(to_fake)


def get_code(
    fn: Callable[..., Any], *args: Any, gpu: str = "h200", force_fake: bool = False, **kwargs: Any
) -> list[str]:
    """``torch._inductor.utils.get_code`` for a CUDA GPU, with or without one.

    Backward graphs are lowered eagerly, so a training ``fn`` shows its backward
    code too. Caches are off: the result is always a fresh compile.
    """
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from torch._inductor.utils import get_code as inductor_get_code

    with (
        cuda_mode(gpu, force_fake=force_fake) as to_cuda,
        inductor_config.patch(fx_graph_cache=False, fx_graph_remote_cache=False),
        functorch_config.patch(enable_autograd_cache=False,
                               force_non_lazy_backward_lowering=True),
        _tolerate_dynamic_outputs(),
    ):
        cuda_args = [to_cuda(a) for a in args]
        cuda_kwargs = {k: to_cuda(v) for k, v in kwargs.items()}
        # upstream appends an empty kernel module for graphs of extern kernels only
        return [code for code in inductor_get_code(fn, *cuda_args, **cuda_kwargs) if code]


@contextlib.contextmanager
def _tolerate_dynamic_outputs():
    """upstream's get_code runs a stand-in module that returns None, on which AOTAutograd
    marks the dynamic dims of a dynamic=True or mark_dynamic compile's outputs"""
    from unittest import mock

    from torch._functorch._aot_autograd import runtime_wrappers

    def tolerant(mark: Callable[..., Any]) -> Callable[..., Any]:
        return lambda t, *args, **kwargs: None if t is None else mark(t, *args, **kwargs)

    with contextlib.ExitStack() as stack:
        # the name of the pinned release, and of torch 2.11
        for name in ("mark_dynamo_propagated_dynamic_indices", "maybe_mark_dynamic_helper"):
            if hasattr(runtime_wrappers, name):
                mark = getattr(runtime_wrappers, name)
                stack.enter_context(mock.patch.object(runtime_wrappers, name, tolerant(mark)))
        yield


def _like(t: torch.Tensor, device: str) -> torch.Tensor:
    out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device)
    if not isinstance(out, torch._subclasses.FakeTensor):
        out.copy_(t.detach())
    return out.requires_grad_(t.requires_grad)


def _converter(to_cuda: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[Any], Any]:
    def convert(obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            return to_cuda(obj)
        if isinstance(obj, torch.nn.Module):
            module = copy.deepcopy(obj)
            for sub in module.modules():
                for name, p in sub._parameters.items():
                    if p is not None:
                        sub._parameters[name] = torch.nn.Parameter(
                            to_cuda(p), requires_grad=p.requires_grad
                        )
                for name, b in sub._buffers.items():
                    if b is not None:
                        sub._buffers[name] = to_cuda(b)
            return module
        return obj

    return convert
