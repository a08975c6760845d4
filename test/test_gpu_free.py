# Owner(s): ["module: inductor"]
"""torch_overlay.testing.gpu_free, the pytest plugin that runs CUDA tests with no GPU.

One pytest process runs a small test file under the plugin (as conftest.py loads it for
test/); each test here reads the outcome of one of its tests.
"""
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap
import unittest
import xml.etree.ElementTree as ET

import torch
from torch._inductor.test_case import run_tests, TestCase

REPO = pathlib.Path(__file__).resolve().parent.parent

# run under the plugin; the asserts are on the faked GPU
TESTS = '''
import pytest
import torch
from torch.testing._internal.inductor_utils import GPU_TYPE, HAS_GPU


def test_has_gpu():
    assert HAS_GPU and GPU_TYPE == "cuda"
    x = torch.randn(3, 4, device=GPU_TYPE)
    assert isinstance(x, torch._subclasses.FakeTensor) and x.device.type == "cuda"


def test_tensor_moved_again_is_itself():
    x = torch.randn(3, 4, device=GPU_TYPE)
    assert x.to(GPU_TYPE) is x
    assert x.to("cuda") is x
    assert x.to(device="cuda:0") is x
    assert x.cuda() is x
    assert x.to(GPU_TYPE, torch.float32) is x


def test_tensor_dtype_conversion_on_faked_gpu():
    x = torch.randn(3, 4, device=GPU_TYPE)
    for y in (x.to(GPU_TYPE, torch.bfloat16), x.to(torch.float16),
              x.to(device=GPU_TYPE, dtype=torch.float64)):
        assert isinstance(y, torch._subclasses.FakeTensor)
        assert y.device.type == "cuda" and y.shape == x.shape and y.dtype != x.dtype


def test_module_moved_again_is_itself():
    m = torch.nn.Linear(4, 5).requires_grad_(False).to(GPU_TYPE)
    weight = m.weight
    assert m.to(GPU_TYPE) is m and m.weight is weight
    assert m.cuda() is m and m.weight is weight


def test_module_dtype_conversion_on_faked_gpu():
    m = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.BatchNorm1d(5))
    m = m.requires_grad_(False).to(GPU_TYPE)
    m.to(GPU_TYPE, torch.bfloat16)
    assert isinstance(m[0].weight, torch.nn.Parameter)
    assert m[0].weight.dtype == torch.bfloat16 and m[0].weight.device.type == "cuda"
    assert m[1].running_mean.dtype == torch.bfloat16
    assert m[1].num_batches_tracked.dtype == torch.int64  # only floating point converts
    m.to(torch.float16)
    assert m[0].bias.dtype == torch.float16 and m[0].bias.device.type == "cuda"


def test_cuda_generator():
    g = torch.Generator(device=GPU_TYPE).manual_seed(0)
    assert isinstance(g, torch.Generator)
    x = torch.randn(3, 4, device=GPU_TYPE, generator=g)
    assert x.device.type == "cuda" and x.shape == (3, 4)
    assert torch.Generator().device.type == "cpu"


def test_autograd_is_skipped():
    torch.randn(3, device=GPU_TYPE, requires_grad=True)


def test_a_rebuilt_dynamo_rule_map():
    # as init_process_group does: Dynamo's map of torch functions is rebuilt while the
    # factories are faked
    torch._dynamo.trace_rules.clear_lru_cache()
    torch.compile(lambda n: torch.arange(n) + 1, backend="eager", fullgraph=True)(3)


def test_torch_arange_traceable_after_it():
    out = torch.compile(lambda n: torch.arange(n) + 1, backend="eager", fullgraph=True)(3)
    assert out.tolist() == [1, 2, 3]
'''


@unittest.skipIf(torch._C._cuda_getDeviceCount() > 0, "the plugin does nothing on a real GPU")
class TestGpuFreePlugin(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp, "test_faked.py")
            path.write_text(textwrap.dedent(TESTS))
            junit = pathlib.Path(tmp, "junit.xml")
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(
                [str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
            cls.run_result = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 "-p", "torch_overlay.testing.gpu_free", f"--junitxml={junit}",
                 "--rootdir", tmp, str(path)],
                capture_output=True, text=True, timeout=600, env=env, cwd=tmp)
            cls.outcomes = {}
            if junit.exists():
                for case in ET.parse(junit).getroot().iter("testcase"):
                    result = next(iter(case), None)
                    cls.outcomes[case.get("name")] = (
                        "passed" if result is None else result.tag,
                        "" if result is None else (result.get("message") or ""))

    def outcome(self, name):
        self.assertIn(name, self.outcomes,
                      self.run_result.stdout[-3000:] + self.run_result.stderr[-3000:])
        return self.outcomes[name]

    def assertPassed(self, name):
        kind, message = self.outcome(name)
        self.assertEqual(kind, "passed", message + "\n" + self.run_result.stdout[-3000:])

    def test_has_gpu(self):
        self.assertPassed("test_has_gpu")

    def test_tensor_moved_again_is_itself(self):
        self.assertPassed("test_tensor_moved_again_is_itself")

    def test_tensor_dtype_conversion_on_faked_gpu(self):
        self.assertPassed("test_tensor_dtype_conversion_on_faked_gpu")

    def test_module_moved_again_is_itself(self):
        self.assertPassed("test_module_moved_again_is_itself")

    def test_module_dtype_conversion_on_faked_gpu(self):
        self.assertPassed("test_module_dtype_conversion_on_faked_gpu")

    def test_cuda_generator(self):
        self.assertPassed("test_cuda_generator")

    def test_dynamo_rule_map_rebuilt_in_a_test(self):
        self.assertPassed("test_a_rebuilt_dynamo_rule_map")
        self.assertPassed("test_torch_arange_traceable_after_it")

    def test_autograd_is_skipped_with_reason(self):
        kind, message = self.outcome("test_autograd_is_skipped")
        self.assertEqual(kind, "skipped", message)
        self.assertIn("autograd on a CUDA tensor needs a real GPU", message)


if __name__ == "__main__":
    run_tests()
