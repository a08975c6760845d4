"""Generate CUDA Triton code on a machine without a GPU.

``fake_cuda(profile)`` makes torch, Dynamo, Inductor and Triton answer the device
queries they make while compiling as the profiled GPU would, and nothing more:
no kernel is compiled or launched (``get_code`` stubs the module load).
Inputs are FakeTensors on ``cuda``; see ``get_code`` in ``__init__.py``.
"""
from __future__ import annotations

import contextlib
import functools
import sys
from typing import Iterator
from unittest import mock

import torch

from .gpu_profiles import GPUProfile


class _FakeCudaDeviceProperties:
    """Duck-types torch._C._CudaDeviceProperties for one profile."""

    def __init__(self, profile: GPUProfile) -> None:
        for field in profile.__dataclass_fields__:
            setattr(self, field, getattr(profile, field))
        self.uuid = "00000000-0000-0000-0000-000000000000"
        self.pci_bus_id = self.pci_device_id = self.pci_domain_id = 0

    def __repr__(self) -> str:
        return f"_FakeCudaDeviceProperties(name={self.name!r}, major={self.major}, minor={self.minor})"


def _triton_target(profile: GPUProfile):
    from triton.backends.compiler import GPUTarget

    return GPUTarget("cuda", profile.cc, profile.warp_size)


_HOLDERS: dict[str, tuple[int, list[object]]] = {}


def _module_bindings(name: str, obj) -> list[tuple[object, str]]:
    """Every loaded torch module attribute bound to ``obj`` (``from x import name``).

    The torch modules that have an attribute ``name`` are found once per count of
    loaded modules (a scan of ~3,000 modules, 7 ms: the harness enters this for every
    test); what each binds is read on every call.
    """
    loaded, holders = _HOLDERS.get(name, (-1, []))
    if loaded != len(sys.modules):
        holders = [
            mod
            for mod_name, mod in list(sys.modules.items())
            if mod is not None and mod_name.startswith("torch") and hasattr(mod, name)
        ]
        _HOLDERS[name] = (len(sys.modules), holders)
    return [(mod, name) for mod in holders if getattr(mod, name, None) is obj]


def _import_patched_modules() -> None:
    """Import what we patch first: a module imported inside the context would bind
    the originals (from-imports) and escape the patches."""
    import torch._inductor.compile_fx  # noqa: F401
    import torch._inductor.scheduler  # noqa: F401
    import torch._inductor.fx_passes.pad_mm  # noqa: F401
    import torch._inductor.runtime.autotune_cache  # noqa: F401
    import torch._inductor.kernel.mm_grouped  # noqa: F401
    import torch.cuda.amp.common  # noqa: F401


def _torch_cuda_patches(profile: GPUProfile, props: _FakeCudaDeviceProperties) -> list:
    """torch.cuda's device queries, answered as the profiled GPU would."""
    return [
        mock.patch("torch.cuda.is_available", lambda: True),
        mock.patch("torch.cuda.device_count", lambda: 1),
        mock.patch("torch.cuda.current_device", lambda: 0),
        mock.patch("torch.cuda.set_device", lambda device: None),
        mock.patch("torch.cuda._exchange_device", lambda device: 0),
        mock.patch("torch.cuda._maybe_exchange_device", lambda device: 0),
        mock.patch("torch.cuda._lazy_init", lambda: None),
        # Dynamo saves and restores the CUDA RNG state around tracing
        # Dynamo tracks the current stream only when an accelerator is live; there is none
        mock.patch("torch.accelerator.is_available", lambda: False),
        mock.patch("torch.cuda.get_rng_state", lambda device="cuda": torch.zeros(16, dtype=torch.uint8)),
        mock.patch("torch.cuda.set_rng_state", lambda new_state, device="cuda": None),
        # torch 2.14's Dynamo refuses to trace during a CUDA graph capture: asks the driver
        mock.patch("torch.cuda.is_current_stream_capturing", lambda: False),
        # FakeTensor creates one real tensor per device to initialise a context
        mock.patch("torch._subclasses.fake_tensor.init_gpu_context", lambda device: None),
        mock.patch("torch.cuda.get_device_properties", lambda device=None: props),
        mock.patch("torch.cuda.get_device_capability", lambda device=None: profile.capability),
        mock.patch("torch.cuda.get_device_name", lambda device=None: profile.name),
        mock.patch("torch.cuda.is_bf16_supported", lambda including_emulation=True: profile.major >= 8),
        mock.patch("torch.cuda.amp.common.amp_definitely_not_available", lambda: False),
    ]


def _device_interface_patches(profile: GPUProfile, props: _FakeCudaDeviceProperties) -> list:
    """Dynamo's CUDA device interface (and its compile workers'), as torch.cuda's."""
    from torch._dynamo import device_interface

    def get_device_properties(device=None):
        return props

    cuda_iface = device_interface.CudaInterface
    return [
        mock.patch.object(cuda_iface, "is_available", staticmethod(lambda: True)),
        mock.patch.object(cuda_iface, "device_count", staticmethod(lambda: 1)),
        mock.patch.object(cuda_iface, "current_device", staticmethod(lambda: 0)),
        mock.patch.object(cuda_iface, "set_device", staticmethod(lambda device: None)),
        mock.patch.object(cuda_iface, "get_device_properties", staticmethod(get_device_properties)),
        mock.patch.object(cuda_iface, "get_compute_capability", staticmethod(lambda device=None: profile.cc)),
        mock.patch.object(cuda_iface, "is_bf16_supported", staticmethod(lambda including_emulation=False: profile.major >= 8)),
        mock.patch.object(cuda_iface.Worker, "get_device_properties", staticmethod(get_device_properties)),
        mock.patch.object(cuda_iface.Worker, "current_device", staticmethod(lambda: 0)),
        mock.patch.object(cuda_iface.Worker, "set_device", staticmethod(lambda device: None)),
    ]


def _triton_patches(profile: GPUProfile) -> list:
    """Triton's backend for the profiled target, and the cache key hashed from it,
    at every module that imported them."""
    import torch.utils._triton as triton_utils
    from triton.compiler.compiler import make_backend

    backend = make_backend(_triton_target(profile))

    @functools.cache
    def fake_triton_backend():
        return backend

    @functools.cache
    def fake_triton_hash_with_backend():
        import hashlib

        from torch._inductor.runtime.triton_compat import triton_key

        key = f"{triton_key()}-{backend.hash()}"
        return hashlib.sha256(key.encode("utf-8")).hexdigest().upper()

    patches = []
    for mod, name in _module_bindings("has_triton", triton_utils.has_triton):
        # torch 2.15 asks has_triton(include_cpu=True)
        patches.append(mock.patch.object(mod, name, lambda *args, **kwargs: True))
    for mod, name in _module_bindings("triton_backend", triton_utils.triton_backend):
        patches.append(mock.patch.object(mod, name, fake_triton_backend))
    for mod, name in _module_bindings(
        "triton_hash_with_backend", triton_utils.triton_hash_with_backend
    ):
        patches.append(mock.patch.object(mod, name, fake_triton_hash_with_backend))
    return patches


def _inductor_patches(profile: GPUProfile) -> list:
    """Inductor's own device reads: benchmarks refused with why, shared memory, and
    what needs real CUDA tensors."""

    def no_benchmarks(*args, **kwargs):
        raise RuntimeError(
            f"Inductor wants to benchmark on the device (shape padding of an odd-sized "
            f"matmul), and the {profile.name} is faked here. Set "
            "torch._inductor.config.shape_padding=False for GPU-free codegen, or run on the GPU."
        )

    from torch._inductor.fx_passes import pad_mm

    patches = [
        # reached only past pad_mm's deterministic checks, right before it times both variants
        mock.patch.object(pad_mm, "get_cached_should_pad", no_benchmarks),
        mock.patch("torch._inductor.utils.get_gpu_shared_memory",
                   lambda: profile.shared_memory_per_block_optin),
    ]
    # Pattern tables trace example tensors on the input device, which needs real CUDA;
    # traced on CPU they come out the same for sm < 100 (misc_patterns adds sm100-only ones).
    from torch._inductor.fx_passes import joint_graph

    lazy_init = joint_graph.lazy_init
    patches.append(
        mock.patch.object(joint_graph, "lazy_init",
                          lambda input_device=None: lazy_init(torch.device("cpu")))
    )
    # Inductor names equal constants once, "equal" meaning the same storage by data_ptr;
    # every FakeTensor's is 0, so freezing's distinct parameters of one shape would be
    # generated as one constant: compare the storages themselves.
    import torch._inductor.graph as inductor_graph
    from torch._subclasses.fake_tensor import FakeTensor

    is_same_tensor = inductor_graph.is_same_tensor

    def is_same_fake_tensor(data: torch.Tensor, value: torch.Tensor) -> bool:
        if isinstance(data, FakeTensor) or isinstance(value, FakeTensor):
            return (is_same_tensor(data, value)
                    and data.untyped_storage()._cdata == value.untyped_storage()._cdata)
        return is_same_tensor(data, value)

    patches.append(mock.patch.object(inductor_graph, "is_same_tensor", is_same_fake_tensor))
    return patches


@contextlib.contextmanager
def fake_cuda(profile: GPUProfile) -> Iterator[None]:
    _import_patched_modules()
    props = _FakeCudaDeviceProperties(profile)
    patches = [
        *_torch_cuda_patches(profile, props),
        *_device_interface_patches(profile, props),
        *_triton_patches(profile),
        *_inductor_patches(profile),
    ]
    with contextlib.ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        # Inductor caches device properties and has_triton answers per process.
        from torch._inductor.runtime.hints import DeviceProperties

        DeviceProperties.create.cache_clear() if hasattr(DeviceProperties.create, "cache_clear") else None
        yield


def index_as_aten(self: torch.Tensor, index) -> torch.Tensor:
    """``self[index]`` as aten view and index ops (basic and integer-tensor indexing)."""
    index = index if isinstance(index, tuple) else (index,)
    if any(i is Ellipsis for i in index):
        k = next(n for n, i in enumerate(index) if i is Ellipsis)
        used = sum(1 for i in index if i is not None and i is not Ellipsis)
        index = index[:k] + (slice(None),) * (self.dim() - used) + index[k + 1:]
    out, dim, tensors = self, 0, []
    for i in index:
        if isinstance(i, torch.Tensor) and i.dtype == torch.bool:
            raise NotImplementedError("boolean indexing of a faked CUDA tensor")
        if i is None:
            out = out.unsqueeze(dim)
        elif isinstance(i, slice) and i != slice(None):
            out = torch.ops.aten.slice.Tensor(out, dim, i.start, i.stop, i.step or 1)
        elif not isinstance(i, (slice, torch.Tensor)):  # an integer: the dim goes
            out = torch.ops.aten.select.int(out, dim, i)
            continue
        tensors.append(i if isinstance(i, torch.Tensor) else None)
        dim += 1
    while tensors and tensors[-1] is None:
        tensors.pop()
    return torch.ops.aten.index.Tensor(out, tensors) if tensors else out


@contextlib.contextmanager
def fake_cuda_tensor_methods() -> Iterator[None]:
    """Tensor methods (and ``torch.tensor``) whose C++ binding asks the CUDA driver for
    the current device, done in Python for CUDA tensors: what a whole model's forward
    (transformers' indexing, ``.contiguous()``, an empty KV cache's first tensor) needs
    on a faked GPU, beyond ``fake_cuda``. Opt-in: every tensor's indexing goes through it."""
    getitem, contiguous, tensor = torch.Tensor.__getitem__, torch.Tensor.contiguous, torch.tensor

    def _getitem(self, index):
        return (index_as_aten if self.device.type == "cuda" else getitem)(self, index)

    def _contiguous(self, memory_format=torch.contiguous_format):
        if self.device.type != "cuda" or self.is_contiguous(memory_format=memory_format):
            return contiguous(self, memory_format=memory_format)
        return torch.ops.aten.clone.default(self, memory_format=memory_format)

    def _tensor(data, *, device=None, **kw):
        if isinstance(data, list) and not data and torch.device(device or "cpu").type == "cuda":
            return torch.empty(0, device=device, **kw)
        return tensor(data, device=device, **kw)

    with mock.patch.object(torch.Tensor, "__getitem__", _getitem), \
            mock.patch.object(torch.Tensor, "contiguous", _contiguous), \
            mock.patch.object(torch, "tensor", _tensor):
        yield
