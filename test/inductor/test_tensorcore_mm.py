# Owner(s): ["module: inductor"]
"""``config.tensorcore_mm_autocast``: autocast matmuls of fp32 tensors cast in registers.

The cost model and its configs are checked as plain Python, for the GPUs' properties
given below (whatever GPU runs the tests); the generated CUDA code (``get_code``, which
runs nothing: its kernels and their structure) for the H200's plans, on any CUDA GPU with
sm_80; its values on such a GPU against eager autocast and an fp64 reference, for the
plans of the GPU with the least shared memory (A10G), which every CUDA GPU CI runs on can
launch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import unittest
from unittest import mock

import torch
import torch._functorch.config as functorch_config
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.kernel import mm_tensorcore, mm_tensorcore_plan as planner
from torch._inductor.test_case import run_tests, TestCase
from torch._inductor.utils import get_code, run_and_get_code
from torch.testing import FileCheck
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
    TEST_WITH_ROCM,
)
from torch.testing._internal.inductor_utils import (
    GPU_TYPE,
    HAS_CPU,
    HAS_CUDA_AND_TRITON,
)


try:
    from .test_downcast_mm import tolerate_dynamic_outputs
except ImportError:
    from test_downcast_mm import tolerate_dynamic_outputs

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32

# what the GPUs report (SMs, shared memory, SM clock, DRAM peak = memory clock x bus
# width): the plans asserted below are these devices', whatever GPU runs the tests
DEVICE_SPECS = {
    "h200": planner.DeviceSpec(
        cc=90,
        sm_count=132,
        smem_per_block=232448,
        sm_clock=1.98e9,
        dram_bw=3.201e9 * 2 * 6016 / 8,
    ),
    "h100": planner.DeviceSpec(
        cc=90,
        sm_count=132,
        smem_per_block=232448,
        sm_clock=1.98e9,
        dram_bw=2.619e9 * 2 * 5120 / 8,
    ),
    "a100": planner.DeviceSpec(
        cc=80,
        sm_count=108,
        smem_per_block=166912,
        sm_clock=1.41e9,
        dram_bw=1.593e9 * 2 * 5120 / 8,
    ),
    # the least shared memory a block may use of the GPUs CI runs on
    "a10g": planner.DeviceSpec(
        cc=86,
        sm_count=80,
        smem_per_block=101376,
        sm_clock=1.71e9,
        dram_bw=6.251e9 * 2 * 384 / 8,
    ),
    "l4": planner.DeviceSpec(
        cc=89,
        sm_count=58,
        smem_per_block=101376,
        sm_clock=2.04e9,
        dram_bw=6.251e9 * 2 * 192 / 8,
    ),
}
H200 = planner.device_model(DEVICE_SPECS["h200"])
A10G = planner.device_model(DEVICE_SPECS["a10g"])

# the template needs bf16 tensor cores (sm_80) of a CUDA GPU
HAS_CUDA_SM80 = (
    HAS_CUDA_AND_TRITON
    and not TEST_WITH_ROCM
    and torch.cuda.get_device_capability() >= (8, 0)
)
requires_cuda_sm80 = unittest.skipUnless(
    HAS_CUDA_SM80, "requires a CUDA GPU with sm_80 or later"
)


def plans_as(model):
    """A test run with ``model``'s plans on whatever CUDA GPU with sm_80 runs it: the
    cost model sees that device. On a class: each test."""

    def decorate(test):
        if isinstance(test, type):
            for name, fn in list(vars(test).items()):
                if name.startswith("test") and callable(fn):
                    setattr(test, name, decorate(fn))
            return test
        as_model = mock.patch.object(
            mm_tensorcore, "current_device_model", lambda device: model
        )
        return requires_cuda_sm80(as_model(test))

    return decorate


# code generated (nothing run) from the H200's plans (its SM count and measured rates)
plans_as_h200 = plans_as(H200)
# kernels run: the A10G's plans, whose configs fit every CI GPU's shared memory
plans_as_a10g = plans_as(A10G)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def linear(dtype=BF16):
    """F.linear under autocast: aten.addmm(bias, x, permute(w)) with a bias, else mm."""

    def fn(x, w, b=None):
        with torch.autocast("cuda", dtype=dtype):
            return F.linear(x, w, b)

    return fn


def user_cast_linear(x, w, b=None):
    """F.linear with the casts autocast would insert written out."""
    return F.linear(x.bfloat16(), w.bfloat16(), None if b is None else b.bfloat16())


def matmul_op(op, dtype=BF16):
    """One aten matmul under autocast, its weight (mat2) given as [N, K] and transposed."""

    def fn(*args):
        with torch.autocast("cuda", dtype=dtype):
            if op == "mm":
                x, w = args
                return x @ w.t()
            if op == "addmm":
                b, x, w = args
                return torch.addmm(b, x, w.t(), beta=0.5, alpha=2.0)
            if op == "bmm":
                x, w = args
                return torch.bmm(x, w.transpose(1, 2))
            c, x, w = args
            return torch.baddbmm(c, x, w.transpose(1, 2), beta=0.5, alpha=2.0)

    return fn


def matmul_inputs(op, m, n, k, batch=3, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    lead = (batch,) if op in ("bmm", "baddbmm") else ()
    x = torch.randn(*lead, m, k, generator=g)
    w = torch.randn(*lead, n, k, generator=g) / k**0.5
    if op in ("addmm", "baddbmm"):
        bias = (
            torch.randn(*lead, m, n, generator=g)
            if op == "baddbmm"
            else torch.randn(n, generator=g)
        )
        return [t.to(device) for t in (bias, x, w)]
    return [t.to(device) for t in (x, w)]


def gpu_randn(*shapes, dtype=FP32):
    """Random CUDA tensors of these shapes."""
    return [torch.randn(shape, dtype=dtype, device=GPU_TYPE) for shape in shapes]


def template_kernels(code: list[str]) -> list[str]:
    return re.findall(r"(triton_tem_fused_\w+?_\d+)\.run\(", "\n".join(code))


def constexpr(src: str, name: str) -> int:
    """A template kernel's integer ``name : tl.constexpr``."""
    return int(re.search(rf"{name} : tl.constexpr = (\d+)", src).group(1))


def cast_kernels(code: list[str]) -> list[str]:
    return re.findall(r"(triton_poi_fused__to_copy_\d+)\.run\(", "\n".join(code))


def kernel_source(code: list[str], name: str) -> str:
    m = re.search(
        rf"async_compile\.triton\('{name}', '''(.*?)''', device_str='cuda'\)",
        "\n".join(code),
        re.DOTALL,
    )
    if m is None:
        raise AssertionError(f"no kernel {name} in the code")
    return m.group(1)


def comparable(code: list[str]) -> str:
    """Code without what differs between two compiles of the same thing in a process:
    the compile's number, a constant's address (freezing), and the matmul metadata's
    comment lines (there only when the feature is on)."""
    text = re.sub(r"# AOT ID: \['\d+_", "# AOT ID: ['", "\n".join(code))
    text = re.sub(
        r"^(\w+ = None  # device\(.*\)) [0-9a-f]{6,}$", r"\1", text, flags=re.MULTILINE
    )
    return re.sub(r"\n *# matmul_meta: [^\n]*", "", text)


def tensorcore(on: bool = True):
    """config.patch with the feature, and the matmul metadata it decides by, on or off."""
    return inductor_config.patch(autocast_matmul_meta=on, tensorcore_mm_autocast=on)


@contextlib.contextmanager
def no_caches():
    """No FX graph or AOTAutograd cache hit: every compile lowers (and counts) anew."""
    with (
        inductor_config.patch(fx_graph_cache=False),
        functorch_config.patch(enable_autograd_cache=False),
    ):
        yield


class TensorCoreMMTestCase(TestCase):
    # a class's own config entries, on top of the ones every test here runs with
    config = {}

    def setUp(self):
        super().setUp()
        counters.clear()
        self._config = inductor_config.patch(
            # pad_mm would benchmark its padding on the device (get_code runs nothing);
            # the shapes it pads are compute-bound, which the cost model leaves to the
            # stock path
            shape_padding=False,
            benchmark_epilogue_fusion=False,
            **self.config,
        )
        self._config.__enter__()
        self._env = mock.patch.dict(os.environ, {"TORCHINDUCTOR_STRICT_FALLBACKS": "1"})
        self._env.__enter__()

    def tearDown(self):
        self._env.__exit__(None, None, None)
        self._config.__exit__(None, None, None)
        super().tearDown()

    @property
    def counts(self):
        return counters["inductor"]

    def cuda_code(self, fn, *inputs, enabled=True, dynamic=None, strict=True):
        """The generated code (nothing run) of a fresh compile, the feature on or off;
        the inputs are CUDA tensors."""
        torch._dynamo.reset()
        counters.clear()
        with contextlib.ExitStack() as stack:
            stack.enter_context(tensorcore(enabled))
            stack.enter_context(no_caches())
            stack.enter_context(tolerate_dynamic_outputs())
            if not strict:
                stack.enter_context(mock.patch.dict(os.environ))
                os.environ.pop("TORCHINDUCTOR_STRICT_FALLBACKS", None)
            # a graph of extern kernels only comes with an empty kernel module
            return [
                c for c in get_code(torch.compile(fn, dynamic=dynamic), *inputs) if c
            ]

    def compile_and_run(self, fn, *inputs, dynamic=None):
        """(outputs, code) of a fresh compile with the feature on, run on the inputs' device."""
        torch._dynamo.reset()
        with tensorcore(True), no_caches():
            return run_and_get_code(torch.compile(fn, dynamic=dynamic), *inputs)

    def assertTemplate(self, code, kernels=1, casts=0):
        self.assertEqual(len(template_kernels(code)), kernels, "\n".join(code))
        self.assertEqual(len(cast_kernels(code)), casts, "cast kernels")
        self.assertEqual(self.counts["tensorcore_mm_template"], kernels)

    def assertStock(self, code, reason):
        self.assertEqual(template_kernels(code), [])
        self.assertEqual(self.counts["tensorcore_mm_template"], 0)
        self.assertGreaterEqual(self.counts[reason], 1, dict(self.counts))

    def compile_values(self, op, dtype, mnk):
        """The code of ``op`` at ``mnk`` (batch 2), compiled and run; its values checked
        against eager autocast and fp64 (``assertLikeEager``)."""
        inputs = matmul_inputs(op, *mnk, batch=2, device=GPU_TYPE)
        fn = matmul_op(op, dtype)
        out, code = self.compile_and_run(fn, *inputs)
        self.assertLikeEager(out, fn, inputs, lambda *d: emulate_fp64(op, d), dtype)
        return code

    def assertPath(self, code, other=None):
        """One template kernel, or where ``other`` names a counter, a path without one
        that counted it."""
        if other:
            self.assertStock(code, other)
        else:
            self.assertEqual(len(template_kernels(code)), 1, dict(self.counts))

    def assertLikeEager(self, actual, fn, inputs, fn64, dtype):
        """Eager autocast's dtype, and an error against fp64 on the fp32 inputs no worse
        than eager autocast's (5% slack), relative to the output's scale."""
        eager = fn(*inputs)
        ref = fn64(*[t.double() for t in inputs])
        self.assertEqual(actual.dtype, eager.dtype)
        scale = ref.abs().max().clamp_min(1e-30)
        err = ((actual.double() - ref).abs().max() / scale).item()
        eager_err = ((eager.double() - ref).abs().max() / scale).item()
        self.assertLessEqual(
            err, 1.05 * eager_err + 1e-6, f"error {err:.3g}, eager's {eager_err:.3g}"
        )


def linear_problem(m, n, k, x_castable=True, w_castable=True):
    """F.linear of fp32 x, w and bias under autocast, as the cost model sees it."""
    op = planner.Operand
    return planner.Problem(
        "addmm",
        1,
        m,
        n,
        k,
        op(m * k, True, not x_castable),
        op(k * n, True, not w_castable),
        op(n, True),
    )


class TestCostModel(TestCase):
    """The plan and configs, from shapes alone: no compile."""

    def test_plan_per_shape(self):
        T, P = planner.TileConfig, planner.Path
        decode = T(16, 32, 128, 8, 2, 6)
        expected = {
            (16, 4096, 4096): (P.TEMPLATE, True, True, decode),
            # one 128-row tile streams the fp32 weight once
            (128, 4096, 4096): (P.TEMPLATE, False, True, T(128, 32, 128, 8, 4, 4)),
            # several thin tiles an SM: a shallower pipeline (16x4096: one tile an SM)
            (16, 11008, 4096): (
                P.TEMPLATE,
                True,
                True,
                dataclasses.replace(decode, num_stages=3),
            ),
            (16, 4096, 11008): (P.TEMPLATE, True, True, decode),
            # tiles that re-read the operands: stock (max-autotune's 256x128x64 s3 swap)
            (1024, 4096, 4096): (P.STOCK, False, False, None),
            (2048, 4096, 4096): (P.STOCK, False, False, None),
            (4096, 4096, 4096): (P.STOCK, False, False, None),
            (2048, 11008, 4096): (P.STOCK, False, False, None),
            (8192, 8192, 8192): (P.STOCK, False, False, None),
        }
        for mnk, want in expected.items():
            plan = planner.plan(linear_problem(*mnk), H200)
            got = (plan.path, plan.fused_a, plan.fused_b, plan.config)
            # a stock plan to measure names the template to time
            if plan.path is P.STOCK:
                got = (P.STOCK, False, False, None)
            self.assertEqual(got, want, (mnk, plan.describe()))
            if plan.path is P.TEMPLATE:  # the bias cast in its epilogue, as autocast's
                self.assertTrue(plan.fused_bias, mnk)
        # decode: the 16x32 tiles fill the SMs; M=128: the weight's cast pays in the
        # kernel whatever is done with x
        self.assertGreaterEqual(4096 // decode.BLOCK_N, 0.9 * H200.sm_count)
        preds = planner.plan(linear_problem(128, 4096, 4096), H200).predictions
        preds = {p.label: p.seconds for p in preds}
        self.assertLess(preds["template[b]"], preds["template[a]"])

    def test_sixteen_row_tiles_take_two_warps(self):
        # a tile of 16 rows and at most 32 columns runs on mma.sync: 2 warps; 32 rows
        # or 64 columns keep 4
        for (m, n, k), block_n, warps in (
            ((16, 1024, 1024), 16, 2),
            ((8, 1024, 4096), 16, 2),
            ((16, 4096, 4096), 32, 2),
            ((16, 32128, 1024), 32, 2),
            ((32, 1024, 1024), 16, 4),
            ((128, 4096, 4096), 32, 4),
        ):
            config = planner.plan(linear_problem(m, n, k), H200).config
            self.assertEqual(
                (config.BLOCK_N, config.num_warps), (block_n, warps), (m, n, k)
            )

    def test_one_wave_of_wider_tiles(self):
        # one row tile: the widest that leaves 60% of the SMs a tile, not a second,
        # mostly idle wave of narrower ones (11008 columns: 86 tiles of 128, not 172 of
        # 64); 128x64 tiles excepted, and two row tiles fill 90% of them
        widths = {
            (64, 11008, 4096): 128,
            (96, 12288, 4096): 128,
            (64, 6144, 2048): 64,
            (16, 3072, 768): 32,
            (128, 2560, 2560): 32,
            (96, 6144, 2048): 32,
            (192, 11008, 4096): 128,
            (192, 6144, 2048): 64,
        }
        for mnk, width in widths.items():
            cfg = planner.select_configs(linear_problem(*mnk), H200, False, True)[0]
            self.assertEqual(cfg.BLOCK_N, width, (mnk, cfg))

    def test_a_shared_cast_is_not_fused(self):
        # the bf16 weight is needed elsewhere (e.g. saved for backward): it is read, not re-cast
        plan = planner.plan(linear_problem(16, 4096, 4096, w_castable=False), H200)
        self.assertFalse(plan.fused_b)
        self.assertNotIn("template[b]", [p.label for p in plan.predictions])
        self.assertNotIn("template[a,b]", [p.label for p in plan.predictions])

    @parametrize("gpu", ["h200", "h100", "a100", "a10g", "l4"])
    def test_every_config_fits_shared_memory(self, gpu):
        dev = planner.device_model(DEVICE_SPECS[gpu])
        for m in (1, 16, 37, 128, 200, 1024, 4096):
            for fused in ((True, True), (False, True), (True, False)):
                p = linear_problem(m, 4096, 4096)
                configs = planner.select_configs(p, dev, *fused)
                # in 99 KB a fusion may have no tile: the plan takes another, or stock
                if dev.smem_per_block > DEVICE_SPECS["a10g"].smem_per_block:
                    self.assertTrue(configs, (gpu, m, fused))
                for cfg in configs:
                    size = lambda f: 4 if f else 2  # noqa: E731
                    self.assertLessEqual(
                        cfg.smem_bytes(size(fused[0]), size(fused[1])),
                        dev.smem_per_block,
                        (gpu, m, fused, cfg),
                    )
                    self.assertGreaterEqual(
                        min(cfg.BLOCK_M, cfg.BLOCK_N, cfg.BLOCK_K), 16
                    )

    @requires_cuda_sm80
    def test_model_of_this_device(self):
        # from what the device reports: its peaks, scaled to what a copy and cuBLAS reach
        props = torch.cuda.get_device_properties()
        dev = mm_tensorcore.current_device_model(torch.device(GPU_TYPE))
        spec = planner.device_spec(props)
        self.assertEqual(dev.sm_count, props.multi_processor_count)
        self.assertAlmostEqual(dev.copy_bw, planner.COPY_OF_PEAK * spec.dram_bw)
        self.assertGreater(dev.mm_flops, 0)

    def test_models_scale_with_the_device(self):
        h100 = planner.device_model(DEVICE_SPECS["h100"])
        self.assertAlmostEqual(
            H200.copy_bw / h100.copy_bw, 6016 * 3.201 / (5120 * 2.619)
        )
        # same SMs, clock and architecture
        self.assertEqual(H200.mm_flops, h100.mm_flops)
        a100 = planner.device_model(DEVICE_SPECS["a100"])
        self.assertLess(a100.mm_flops, H200.mm_flops / 3)
        # none before bf16 tensor cores (sm_80), nor without a memory clock
        t4 = dataclasses.replace(DEVICE_SPECS["a100"], cc=75)
        self.assertIsNone(planner.device_model(t4))
        self.assertIsNone(
            planner.device_model(dataclasses.replace(t4, cc=90, dram_bw=0))
        )

    def test_forced_path(self):
        # the config names a path by its value, as the plan's log prints it
        with inductor_config.patch(tensorcore_mm_force_path="stock"):
            force = mm_tensorcore._force()
        self.assertIs(force.path, planner.Path.STOCK)
        forced = planner.plan(linear_problem(16, 4096, 4096), H200, force=force)
        self.assertTrue(forced.describe().startswith("stock (forced);"), forced)
        with inductor_config.patch(tensorcore_mm_force_path="cublas"):
            with self.assertRaisesRegex(ValueError, "one of 'stock', 'template'"):
                mm_tensorcore._force()


@plans_as_h200
class TestTensorCoreMMCodegen(TensorCoreMMTestCase):
    """Generated code for the H200's plans (nothing run)."""

    def test_decode(self):
        # M=16: one template kernel reads fp32 x, w and bias, no cast kernel; gelu +
        # residual fused as its epilogue
        def fn(x, w, b, r):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return F.gelu(F.linear(x, w, b), approximate="tanh") + r

        code = self.cuda_code(
            fn, *gpu_randn((16, 4096), (4096, 4096), (4096,), (16, 4096))
        )
        self.assertTemplate(code)

    @inductor_config.patch(downcast_mm_template=False)
    def test_offered_through_choices(self):
        # the template's lowering is the registered contributor's one choice; without
        # the contributor the lowering is stock's
        from torch._inductor import choices

        inputs = gpu_randn((16, 4096), (4096, 4096), (4096,))
        factory = dict(choices.registered_inductor_choices())["tensorcore_mm"]
        choices.unregister_inductor_choices("tensorcore_mm")
        try:
            code = self.cuda_code(linear(), *inputs)
        finally:
            choices.register_inductor_choices("tensorcore_mm", factory)
        self.assertEqual(template_kernels(code), [])
        self.assertEqual(len(cast_kernels(code)), 3)
        self.assertTemplate(self.cuda_code(linear(), *inputs))

    def test_prefill(self):
        # M=128: the weight and bias cast in the template; x by its own kernel, since
        # the 64 column tiles re-read it (cheaper in bf16)
        def fn(x, w, b):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return F.relu(F.linear(x, w, b)) * 2.0

        code = self.cuda_code(fn, *gpu_randn((128, 4096), (4096, 4096), (4096,)))
        self.assertTemplate(code, casts=1)

    @parametrize("bias", [False, True])
    def test_user_written_casts(self, bias):
        # the casts written out instead of autocast's: the same template, the same numerics
        x, w, b = gpu_randn((16, 4096), (4096, 4096), (4096,))
        code = self.cuda_code(user_cast_linear, x, w, b if bias else None)
        self.assertTemplate(code)

    def test_stock_kept(self):
        # M=4096 is compute-bound: separate casts and cuBLAS, as stock
        code = self.cuda_code(linear(), *gpu_randn((4096, 4096), (4096, 4096)))
        self.assertStock(code, "tensorcore_mm_stock:reread")
        self.assertEqual(len(cast_kernels(code)), 2)

    def test_epilogue_reads_the_rounded_value(self):
        def fn(x, w, b):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return F.gelu(F.linear(x, w, b))

        code = self.cuda_code(fn, *gpu_randn((16, 512), (256, 512), (256,)))
        self.assertTemplate(code)
        src = kernel_source(code, template_kernels(code)[0])
        m = re.search(
            r"(tmp\d+) = acc \+ (tmp\d+)\n\s+(tmp\d+) = \1\.to\(tl\.bfloat16\)\n"
            r"\s+(tmp\d+) = \3\.to\(tl\.float32\)\n",
            src,
        )
        self.assertIsNotNone(m, src)
        # the bias as autocast casts it: rounded to bf16 first
        self.assertRegex(src, rf"{m.group(2)} = tmp\d+\.to\(tl\.float32\)")
        tail = src[m.end() :]
        self.assertNotIn("acc", tail, "an epilogue reads the unrounded accumulator")
        FileCheck().check(f"{m.group(4)}").check("libdevice.erf").check("tl.store").run(
            tail
        )

    @parametrize("op", ["mm", "addmm"])
    @parametrize("dtype", [BF16, FP16], name_fn=dtype_name)
    def test_ops(self, op, dtype):
        code = self.cuda_code(
            matmul_op(op, dtype), *matmul_inputs(op, 16, 64, 96, device=GPU_TYPE)
        )
        self.assertTemplate(code)
        src = kernel_source(code, template_kernels(code)[0])
        self.assertIn(f"DOT_DTYPE : tl.constexpr = tl.{dtype_name(dtype)}", src)
        if op == "addmm":  # alpha and beta in the epilogue, before the rounding
            FileCheck().check("tl.full([1], 2.0").check("= acc * ").check(
                "tl.full([1], 0.5"
            ).check(f".to(tl.{dtype_name(dtype)})").run(src)

    @parametrize(
        "mnk",
        [(2, 4096, 4096), (37, 1001, 999), (5, 17, 33), (64, 8, 7)],
        name_fn=lambda mnk: "x".join(map(str, mnk)),
    )
    def test_odd_shapes(self, mnk):
        m, n, k = mnk
        code = self.cuda_code(linear(), *gpu_randn((m, k), (n, k), (n,)))
        self.assertTemplate(code)
        src = kernel_source(code, template_kernels(code)[0])
        even_k = (
            k % int(re.search(r"BLOCK_K : tl.constexpr = (\d+)", src).group(1)) == 0
        )
        self.assertIn(f"EVEN_K : tl.constexpr = {even_k}", src)
        if not even_k:
            self.assertIn("mask=a_mask", src)

    @parametrize("layout", ["w_kn", "w_nk_t", "x_t", "x_3d"])
    def test_operand_layouts(self, layout):
        # transposed and permuted operands reach the template as strided fp32 views
        def fn(x, w):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                if layout == "w_kn":
                    return x @ w  # w [K, N] row-major: N contiguous
                if layout == "w_nk_t":
                    return x @ w.t()  # F.linear's weight: K contiguous
                if layout == "x_t":
                    return x.t() @ w  # x given [K, M]: M contiguous
                return torch.matmul(x, w.t())  # x [B, S, K] viewed as [B*S, K]

        x = {"x_t": (96, 16), "x_3d": (2, 8, 96)}.get(layout, (16, 96))
        w = (96, 64) if layout in ("w_kn", "x_t") else (64, 96)
        x, w = torch.randn(x, device=GPU_TYPE), torch.randn(w, device=GPU_TYPE)
        code = self.cuda_code(fn, x, w)
        self.assertTemplate(code)
        self.assertIn("'arg_A': '*fp32', 'arg_B': '*fp32'", "\n".join(code))

    def test_a_shared_cast_is_read_not_fused(self):
        # x's bf16 cast is also an output: the template reads it and fuses only w's cast
        def fn(x, w):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                xb = x.to(torch.bfloat16)
                return F.linear(xb, w) + xb.sum()

        code = self.cuda_code(fn, *gpu_randn((16, 4096), (4096, 4096)))
        self.assertEqual(len(template_kernels(code)), 1)
        self.assertIn("'arg_A': '*bf16', 'arg_B': '*fp32'", "\n".join(code))


class TestTensorCoreMMFallback(TensorCoreMMTestCase):
    """Everything the template does not take goes to the stock lowering, counted."""

    @requires_cuda_sm80
    @parametrize("case", ["fp64", "int64", "bf16", "zero_alpha_beta"])
    def test_not_taken(self, case):
        # fp64 and integers are not autocast's; bf16 has nothing to cast in the kernel (the
        # backward's matmuls look like this); beta=0 ignores the input, NaNs included, and
        # alpha=0 the product: stock does that
        def scaled(c, x, w):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return torch.addmm(c, x, w.t(), beta=0.0) + torch.addmm(
                    c, x, w.t(), alpha=0.0
                )

        fn, inputs, counter = {
            "fp64": (
                linear(),
                gpu_randn((16, 64), (32, 64), dtype=torch.float64),
                "fallback:dtype:float64",
            ),
            "int64": (
                linear(),
                [torch.randint(0, 9, s, device=GPU_TYPE) for s in ((16, 64), (32, 64))],
                "fallback:dtype:int64",
            ),
            "bf16": (
                linear(),
                gpu_randn((16, 64), (32, 64), dtype=BF16),
                "stock:no_fp32_operand",
            ),
            "zero_alpha_beta": (
                scaled,
                gpu_randn((16, 32), (16, 64), (32, 64)),
                "fallback:arguments",
            ),
        }[case]
        code = self.cuda_code(fn, *inputs)
        self.assertStock(code, f"tensorcore_mm_{counter}")
        if case == "fp64":
            self.assertIn("extern_kernels.mm(", "\n".join(code))

    @requires_cuda_sm80
    def test_fp32_outside_autocast(self):
        # stock path: TF32 exactly as torch.backends.cuda.matmul allows
        code = self.cuda_code(
            lambda x, w: F.linear(x, w), *gpu_randn((16, 64), (32, 64))
        )
        self.assertStock(code, "tensorcore_mm_fallback:not_autocast")
        stock = self.cuda_code(
            lambda x, w: F.linear(x, w), *gpu_randn((16, 64), (32, 64)), enabled=False
        )
        self.assertEqual(comparable(code), comparable(stock))

    @unittest.skipIf(not HAS_CPU, "requires C++ compiler")
    def test_cpu_autocast_runs_stock(self):
        def fn(x, w):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return F.linear(x, w)

        x, w = torch.randn(8, 32), torch.randn(16, 32)
        torch._dynamo.reset()
        with tensorcore(True), inductor_config.patch(fx_graph_cache=False):
            out = torch.compile(fn)(x, w)
        self.assertEqual(self.counts["tensorcore_mm_template"], 0)
        self.assertGreaterEqual(
            self.counts["tensorcore_mm_fallback:device:cpu"], 1, dict(self.counts)
        )
        self.assertEqual(out, fn(x, w))

    @requires_cuda_sm80
    def test_internal_error(self):
        # stock, with one warning; TORCHINDUCTOR_STRICT_FALLBACKS (as in these tests) raises
        inputs = gpu_randn((16, 64), (32, 64))
        with mock.patch.object(planner, "plan", side_effect=RuntimeError("boom")):
            with self.assertRaisesRegex(Exception, "boom"):
                self.cuda_code(linear(), *inputs)
            with self.assertLogs(mm_tensorcore.log, logging.WARNING) as logs:
                code = self.cuda_code(linear(), *inputs, strict=False)
        self.assertEqual(len(logs.records), 1)
        self.assertIn("internal error: RuntimeError: boom", logs.output[0])
        self.assertStock(code, "tensorcore_mm_fallback:internal_error")
        self.assertEqual(
            comparable(code),
            comparable(self.cuda_code(linear(), *inputs, enabled=False)),
        )

    @plans_as_h200
    def test_decisions_log_to_their_artifact(self):
        # a registered artifact
        torch._logging.set_logs(modules={"tensorcore_mm": True})
        self.addCleanup(torch._logging.set_logs)
        with self.assertLogs(mm_tensorcore.__name__, level="DEBUG") as logs:
            self.cuda_code(linear(), *gpu_randn((16, 4096), (4096, 4096), (4096,)))
        FileCheck().check("(1, 16, 4096, 4096)").check(
            "template (predicted faster)"
        ).check("predicted stock=").run("\n".join(logs.output))

    @requires_cuda_sm80
    def test_config_exceeding_shared_memory(self):
        small = dataclasses.replace(H200, smem_per_block=8 * 1024)
        with mock.patch.object(
            mm_tensorcore, "current_device_model", return_value=small
        ):
            code = self.cuda_code(linear(), *gpu_randn((16, 4096), (4096, 4096)))
        self.assertStock(code, "tensorcore_mm_fallback:smem")
        self.assertEqual(len(cast_kernels(code)), 2)


# ---------------------------------------------------------------------------- GPU


# the A10G's cost model keeps this shape on the stock path (the H200's splits its K); its
# values are still checked, against the same criterion
STOCK_BY_COST_MODEL = {(200, 96, 4095)}


class TestTensorCoreMMGPU(TensorCoreMMTestCase):
    """On a CUDA GPU, for the A10G's plans: values against eager autocast and an fp64
    reference, and the path its cost model takes."""

    @plans_as_a10g
    @parametrize("op", ["mm", "addmm"])
    @parametrize("dtype", [BF16, FP16], name_fn=dtype_name)
    # 16x1024x4096: few column tiles for the SMs
    @parametrize(
        "mnk",
        [
            (2, 4096, 4096),
            (3, 1001, 999),
            (16, 4096, 4096),
            (37, 1001, 999),
            (128, 256, 136),
            (200, 96, 4095),
            (16, 1024, 4096),
        ],
        name_fn=lambda mnk: "x".join(map(str, mnk)),
    )
    def test_values(self, op, dtype, mnk):
        stock = mnk in STOCK_BY_COST_MODEL
        code = self.compile_values(op, dtype, mnk)
        self.assertPath(code, "tensorcore_mm_stock:cost_model" if stock else None)

    @requires_cuda_sm80
    @parametrize(
        "mnk",
        [(16, 4096, 4096), (37, 1001, 999)],
        name_fn=lambda mnk: "x".join(map(str, mnk)),
    )
    def test_user_written_casts_values(self, mnk):
        m, n, k = mnk
        inputs = gpu_randn((m, k), (n, k), (n,))
        out, code = self.compile_and_run(user_cast_linear, *inputs)
        self.assertLikeEager(
            out, user_cast_linear, inputs, lambda x, w, b: x @ w.t() + b, BF16
        )

    @plans_as_a10g
    def test_fused_epilogue_values(self):
        def fn(x, w, b, r):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return F.gelu(F.linear(x, w, b), approximate="tanh") + r

        torch.manual_seed(0)
        x, w, b, r = gpu_randn((16, 1024), (512, 1024), (512,), (16, 512))
        out, code = self.compile_and_run(fn, x, w, b, r)
        self.assertEqual(len(template_kernels(code)), 1)
        torch.testing.assert_close(out, fn(x, w, b, r), atol=2**-6, rtol=2**-7)

    @requires_cuda_sm80
    @parametrize("dtype", [BF16, FP16], name_fn=dtype_name)
    def test_training(self, dtype):
        # forward and backward of an MLP with fp32 parameters under autocast
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)
        ).to(GPU_TYPE)
        x = torch.randn(16, 256, device=GPU_TYPE, requires_grad=True)

        def step(m, inp):
            with torch.autocast("cuda", dtype=dtype):
                out = m(inp)
            out.float().square().mean().backward()
            return out

        eager_out = step(model, x)
        eager_grads = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
        model.zero_grad()
        x.grad = None
        torch._dynamo.reset()
        with tensorcore(True):
            out = step(torch.compile(model), x)
        torch.testing.assert_close(out, eager_out, atol=2e-2, rtol=2e-2)
        for got, want in zip(
            [p.grad for p in model.parameters()] + [x.grad], eager_grads
        ):
            torch.testing.assert_close(got, want, atol=2e-2, rtol=5e-2)


def emulate_fp64(op, inputs):
    d = [t.double() for t in inputs]
    if op == "mm":
        return d[0] @ d[1].t()
    if op == "bmm":
        return torch.bmm(d[0], d[1].transpose(1, 2))
    if op == "addmm":
        return 2.0 * (d[1] @ d[2].t()) + 0.5 * d[0]
    return 2.0 * torch.bmm(d[1], d[2].transpose(1, 2)) + 0.5 * d[0]


instantiate_parametrized_tests(TestCostModel)
instantiate_parametrized_tests(TestTensorCoreMMCodegen)
instantiate_parametrized_tests(TestTensorCoreMMFallback)
instantiate_parametrized_tests(TestTensorCoreMMGPU)

if __name__ == "__main__":
    run_tests()
