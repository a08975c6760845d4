"""pytest plugin: Inductor's CUDA tests on a machine without a GPU.

    pytest -p torch_overlay.testing.gpu_free test/inductor/test_x.py

Upstream-shaped tests (``HAS_GPU``/``GPU_TYPE``/``requires_gpu``, inputs made with
``device=GPU_TYPE``, ``torch._inductor.utils.get_code``) then run here unchanged, against
a faked GPU (``--gpu-free-profile``, default h200; see ``fake_cuda``):

- ``torch.cuda.is_available()`` is true while tests are collected and run, so
  ``HAS_GPU`` is true and ``GPU_TYPE`` is "cuda";
- CUDA tensors (factories with ``device="cuda"``, ``Tensor.to``/``.cuda()``, so also
  ``nn.Module.to``) are FakeTensors of the same shape, stride and dtype; moving one that
  is already on the faked GPU returns it (or its dtype conversion);
- ``torch.Generator(device="cuda")`` is a CPU generator (the factories draw on the CPU);
- Inductor generates the same CUDA Triton source as on that GPU, which ``get_code`` returns;
- a test that would run CUDA code (autograd on a CUDA tensor, max-autotune's benchmarks
  included) is skipped, naming why: only a real GPU has values.

With a CUDA GPU present the plugin does nothing.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import warnings
from typing import Any, Callable, Iterator

import pytest
import torch

from .fake_cuda import fake_cuda
from .gpu_profiles import DEFAULT_PROFILE, get_profile

# factories that take a device=; the *_like ones follow their (fake) input by themselves
FACTORIES = ("arange", "empty", "empty_strided", "eye", "full", "linspace", "ones", "rand",
             "randint", "randn", "randperm", "tensor", "zeros")


class NeedsRealGPU(RuntimeError):
    """Raised where a test would run code on the faked GPU; the test is reported skipped."""


def _needs_real_gpu_reason(exc: BaseException | None) -> str | None:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, NeedsRealGPU):
            return str(exc)
        exc = exc.__cause__ or exc.__context__
    return None


class FakeGPU:
    """The faked device for one test: its FakeTensorMode and the patches that route CUDA
    tensors to it."""

    def __init__(self, profile_name: str) -> None:
        self.profile = get_profile(profile_name)
        self._originals: dict[str, Callable[..., Any]] = {}

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        from torch._dynamo import trace_rules
        from torch._subclasses.fake_tensor import FakeTensorMode

        # Dynamo maps torch's functions to their tracers from torch's attributes as they are
        # when it builds the map (once; init_process_group clears it): built while the
        # factories are faked, later compiles would find the real torch.arange untraceable
        rules = trace_rules.get_torch_obj_rule_map()
        self.mode = FakeTensorMode(allow_non_fake_inputs=True)
        with contextlib.ExitStack() as stack:
            stack.callback(_drop_rules_built_since, rules)  # last, with the factories real
            stack.enter_context(fake_cuda(self.profile))
            stack.enter_context(warnings.catch_warnings())
            # compiled wrappers check input alignment through data_ptr (0 on FakeTensors)
            warnings.filterwarnings("ignore", "Accessing the data pointer of FakeTensor")
            for name in FACTORIES:
                stack.enter_context(_patch(torch, name, self._factory(getattr(torch, name))))
            stack.enter_context(_patch(torch, "Generator", _FakeGPUGenerator))
            stack.enter_context(_patch(torch.Tensor, "to", self._tensor_to(torch.Tensor.to)))
            stack.enter_context(_patch(torch.Tensor, "cuda", self._tensor_cuda(torch.Tensor.cuda)))
            stack.enter_context(_patch(torch.nn.Module, "to", self._module_to(torch.nn.Module.to)))
            stack.enter_context(_patch(torch.nn.Module, "cuda",
                                       self._module_cuda(torch.nn.Module.cuda)))
            # nn.Module.to then gives each parameter a new Parameter around the FakeTensor
            # instead of setting a real Parameter's .data to it
            compatible = torch._has_compatible_shallow_copy_type
            stack.enter_context(_patch(
                torch, "_has_compatible_shallow_copy_type",
                lambda a, b: compatible(a, b) and _is_fake(a) == _is_fake(b)))
            stack.enter_context(_patch(torch.Tensor, "requires_grad_",
                                       self._requires_grad(torch.Tensor.requires_grad_)))
            stack.enter_context(_patch(torch.nn.Parameter, "__new__",
                                       self._parameter(torch.nn.Parameter.__new__)))
            from torch._inductor.graph import GraphLowering
            from torch._inductor.select_algorithm import AlgorithmSelectorCache

            stack.enter_context(_patch(GraphLowering, "compile_to_module",
                                       self._no_cuda_module(GraphLowering.compile_to_module)))
            stack.enter_context(_patch(AlgorithmSelectorCache, "do_autotuning",
                                       self._no_autotuning()))
            yield

    # -- CUDA tensors as FakeTensors ------------------------------------------
    def fake(self, t: torch.Tensor, requires_grad: bool = False) -> torch.Tensor:
        if requires_grad or t.requires_grad:
            # autograd asks the CUDA driver for a stream: a C++ abort, not an error
            raise NeedsRealGPU(
                f"autograd on a CUDA tensor needs a real GPU (the {self.profile.name} is faked "
                "here); GPU-free codegen tests take inputs with requires_grad=False")
        with self.mode:
            out = _EMPTY_STRIDED(t.shape, t.stride(), dtype=t.dtype, device="cuda")
        out._gpu_free_input = True  # a test's CUDA tensor (not one of Inductor's fakes)
        return out

    def _factory(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def factory(*args: Any, **kwargs: Any) -> Any:
            if not _is_cuda(kwargs.get("device")) or _compiling():
                return original(*args, **kwargs)
            requires_grad = kwargs.pop("requires_grad", False)
            return self.fake(original(*args, **{**kwargs, "device": "cpu"}), requires_grad)

        return factory

    def _tensor_to(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def to(t: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            # _parse_to takes Tensor.to's arguments but copy (HF's generate passes it)
            parsed = {k: v for k, v in kwargs.items() if k != "copy"}
            device, dtype, _, memory_format = torch._C._nn._parse_to(*args, **parsed)
            if not _is_cuda(device) or _compiling():
                return original(t, *args, **kwargs)
            if _on_faked_gpu(t):
                # already there: the real Tensor.to would ask the driver for the device
                if dtype is None or dtype == t.dtype:
                    return t
                return original(t, dtype=dtype, memory_format=memory_format
                                or torch.preserve_format)
            if _is_fake(t):
                return original(t, *args, **kwargs)
            return self.fake(original(t, dtype=dtype) if dtype is not None else t)

        return to

    def _tensor_cuda(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def cuda(t: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if _compiling():
                return original(t, *args, **kwargs)
            if _on_faked_gpu(t):
                return t  # already there (the real .cuda() would ask the driver)
            if _is_fake(t):
                return original(t, *args, **kwargs)
            return self.fake(t)

        return cuda

    def _module_to(self, original: Callable[..., Any]) -> Callable[..., Any]:
        # nn.Module.to swaps each FakeTensor parameter for its conversion in place, which
        # fails (FakeTensorMode holds weak references to it): a module already on the faked
        # GPU gets new Parameters around the converted tensors instead (what .to does to a
        # CPU module here), and keeps those that stay as they are
        @functools.wraps(original)
        def to(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            device, dtype, non_blocking, _ = torch._C._nn._parse_to(*args, **kwargs)
            tensors = [*module.parameters(), *module.buffers()]
            if (_compiling() or not any(_on_faked_gpu(t) for t in tensors)
                    or (device is not None and not _is_cuda(device))):
                return original(module, *args, **kwargs)
            for sub in module.modules():
                for name, p in sub._parameters.items():
                    if p is not None:
                        q = _convert(p, device, dtype, non_blocking)
                        if q is not p:
                            sub._parameters[name] = torch.nn.Parameter(
                                q, requires_grad=p.requires_grad)
                for name, b in sub._buffers.items():
                    if b is not None:
                        sub._buffers[name] = _convert(b, device, dtype, non_blocking)
            return module

        return to

    def _module_cuda(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def cuda(module: torch.nn.Module, device: Any = None) -> Any:
            if any(_on_faked_gpu(t) for t in [*module.parameters(), *module.buffers()]):
                return module.to("cuda")
            return original(module, device)

        return cuda

    def _requires_grad(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def requires_grad_(t: torch.Tensor, requires_grad: bool = True) -> Any:
            if requires_grad and getattr(t, "_gpu_free_input", False):
                self.fake(t, requires_grad=True)  # raises
            return original(t, requires_grad)

        return requires_grad_

    def _parameter(self, original: Callable[..., Any]) -> Callable[..., Any]:
        # (Inductor's own FakeTensors are not checked: only the test's CUDA tensors)
        def __new__(cls: type, data: Any = None, requires_grad: bool = True) -> Any:
            if requires_grad and getattr(data, "_gpu_free_input", False):
                self.fake(data, requires_grad=True)  # raises
            return original(cls, data, requires_grad)

        return staticmethod(__new__)

    def _no_cuda_module(self, original: Callable[..., Any]) -> Callable[..., Any]:
        # get_code replaces compile_to_module for its own call; anything else would load
        # and run the generated CUDA module
        profile = self.profile

        @functools.wraps(original)
        def compile_to_module(graph: Any) -> Any:
            if "cuda" in getattr(graph, "device_types", ()):
                raise NeedsRealGPU(
                    f"runs generated CUDA code: needs a real GPU (the {profile.name} is faked "
                    "here; get_code checks the generated code without running it)")
            return original(graph)

        return compile_to_module

    def _no_autotuning(self) -> Callable[..., Any]:
        # max-autotune times its choices on the device (a failure there is no test result)
        profile = self.profile

        def do_autotuning(*args: Any, **kwargs: Any) -> Any:
            raise NeedsRealGPU(
                f"autotuning benchmarks on the device: needs a real GPU (the {profile.name} "
                "is faked here)")

        return do_autotuning


_EMPTY_STRIDED = torch.empty_strided


def _drop_rules_built_since(rules: dict[Any, Any]) -> None:
    from torch._dynamo import trace_rules

    if trace_rules.get_torch_obj_rule_map() is not rules:
        trace_rules.clear_lru_cache()


def _is_cuda(device: Any) -> bool:
    if device is None:
        return False
    if isinstance(device, int):
        return True  # a bare index means a CUDA device
    return torch.device(device).type == "cuda"


def _compiling() -> bool:
    """Inside torch.compile: its tensors belong to its own FakeTensorMode, not the test's."""
    from torch._guards import TracingContext

    return (torch.compiler.is_compiling() or TracingContext.try_get() is not None
            or torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not None)


def _is_fake(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)


def _convert(t: torch.Tensor, device: Any, dtype: Any, non_blocking: bool) -> torch.Tensor:
    """What nn.Module.to does to one of its tensors: dtype only for floating point ones."""
    if dtype is not None and not (t.is_floating_point() or t.is_complex()):
        dtype = None
    if device is None and dtype is None:
        return t
    return t.to(device if device is not None else t.device, dtype, non_blocking)


def _on_faked_gpu(t: torch.Tensor) -> bool:
    """A FakeTensor on the faked CUDA device (a test's input, or a parameter around one)."""
    return _is_fake(t) and t.device.type == "cuda"


_GENERATOR = torch.Generator


class _GeneratorType(type):
    # isinstance(g, torch.Generator) stays true for every generator while patched
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _GENERATOR)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, _GENERATOR)


class _FakeGPUGenerator(metaclass=_GeneratorType):
    """``torch.Generator`` while a GPU is faked: a CUDA generator is a CPU one (the faked
    factories draw on the CPU and keep only shape, stride and dtype)."""

    def __new__(cls, device: Any = "cpu") -> Any:
        return _GENERATOR() if _is_cuda(device) else _GENERATOR(device)


@contextlib.contextmanager
def _patch(owner: Any, name: str, value: Any) -> Iterator[None]:
    old = owner.__dict__[name] if name in owner.__dict__ else getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


# -- pytest hooks ---------------------------------------------------------------
_FAKE: FakeGPU | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--gpu-free-profile", default=DEFAULT_PROFILE,
                     help="GPU profile the GPU-free harness fakes (torch_overlay.testing.gpu_profiles)")


def pytest_configure(config: pytest.Config) -> None:
    global _FAKE
    if torch.cuda.is_available():
        return  # a real GPU: the tests run on it
    _FAKE = FakeGPU(config.getoption("--gpu-free-profile"))
    config.addinivalue_line("markers", "gpu_free: run against a faked GPU (torch_overlay)")
    config.pluginmanager.register(_SkipsWhereValuesNeedAGPU(), "gpu_free_skips")
    with _FAKE.active():
        # HAS_GPU, GPU_TYPE, requires_gpu, ... are computed when this module is imported
        import torch.testing._internal.inductor_utils as inductor_utils

        if not inductor_utils.HAS_GPU:
            importlib.reload(inductor_utils)


def pytest_report_header(config: pytest.Config) -> str:
    if _FAKE is None:
        return "gpu_free: a CUDA GPU is present; tests run on it"
    return f"gpu_free: CUDA faked as {_FAKE.profile.name} (values need a real GPU: skipped)"


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    # test modules are imported here
    if _FAKE is None:
        return (yield)
    with _FAKE.active():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Any:
    if _FAKE is None:
        return (yield)
    with _FAKE.active():
        return (yield)


_SKIP_REASON = pytest.StashKey[str]()


class _SkipsWhereValuesNeedAGPU:
    """A test that reached code only a real GPU runs is reported as the skip it is, before
    pytest builds a failure's report: that formats the traceback through Inductor's frames
    first, about a second for each of some 200 tests. Registered in ``pytest_configure``, so
    it runs after pytest's unittest plugin has put a TestCase's error into ``call``."""

    @pytest.hookimpl
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> None:
        reason = None if call.excinfo is None else _needs_real_gpu_reason(call.excinfo.value)
        if reason is not None:
            item.stash[_SKIP_REASON] = reason
            skip = pytest.CallInfo.from_call(lambda: pytest.skip(reason), call.when)
            call.excinfo = skip.excinfo


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    reason = item.stash.get(_SKIP_REASON, None)
    if reason is not None:
        del item.stash[_SKIP_REASON]
        # where the test is, not where the skip was raised
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {reason}")
    return report
