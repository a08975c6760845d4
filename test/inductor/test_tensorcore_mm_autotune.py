# Owner(s): ["module: inductor"]
"""``config.tensorcore_mm_autocast`` under max-autotune: the plan's neighbouring configs
and the stock path (separate casts + the aten matmul, as a subgraph of the same fp32
inputs) are autotuned with the plan's own config.

The configs as plain Python for three GPUs' properties; the choices for an H200's
plan (nothing run); on any CUDA GPU with sm_80, swapped and split tiles' values and a
template that fails to load.
"""

from __future__ import annotations

import contextlib
import dataclasses
from unittest import mock

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.kernel import mm_tensorcore, mm_tensorcore_plan as planner
from torch._inductor.test_case import run_tests, TestCase
from torch._inductor.utils import is_big_gpu
from torch.testing import FileCheck
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
)


try:
    from .test_tensorcore_mm import (
        BF16,
        constexpr,
        DEVICE_SPECS,
        gpu_randn,
        kernel_source,
        linear,
        linear_problem,
        plans_as_a10g,
        plans_as_h200,
        requires_cuda_sm80,
        template_kernels,
        TensorCoreMMTestCase,
    )
except ImportError:
    from test_tensorcore_mm import (
        BF16,
        constexpr,
        DEVICE_SPECS,
        gpu_randn,
        kernel_source,
        linear,
        linear_problem,
        plans_as_a10g,
        plans_as_h200,
        requires_cuda_sm80,
        template_kernels,
        TensorCoreMMTestCase,
    )


NO_BINARY = "Triton Error [CUDA]: CUDA_ERROR_NO_BINARY_FOR_GPU"


@contextlib.contextmanager
def no_template_binary():
    """Loading a template kernel fails as on a driver with no binary for it; yields the
    names of the kernels refused."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    make_launchers = CachingAutotuner._make_launchers
    refused = []

    def refuse(self):
        name = self.fn.__name__
        if name.startswith(("triton_tensorcore", "triton_tem_")):
            refused.append(name)
            raise RuntimeError(NO_BINARY)
        return make_launchers(self)

    with mock.patch.object(CachingAutotuner, "_make_launchers", refuse):
        yield refused


class TestAutotuneConfigs(TestCase):
    @parametrize("gpu", ["h200", "h100", "a100", "a10g", "l4"])
    def test_every_config_fits_shared_memory(self, gpu):
        dev = planner.device_model(DEVICE_SPECS[gpu])
        for m in (1, 16, 37, 128, 200, 1024, 4096):
            for fused in ((True, True), (False, True), (True, False)):
                p = linear_problem(m, 4096, 4096)
                configs = planner.select_configs(p, dev, *fused, exhaustive=True)
                # in 99 KB a fusion may have one tile or none
                if dev.smem_per_block > DEVICE_SPECS["a10g"].smem_per_block:
                    self.assertGreater(len(configs), 1, (gpu, m, fused))
                for cfg in configs:
                    size = lambda f: 4 if f else 2  # noqa: E731
                    self.assertLessEqual(
                        cfg.smem_bytes(size(fused[0]), size(fused[1])),
                        dev.smem_per_block,
                        (gpu, m, fused, cfg),
                    )

    def test_other_warp_count(self):
        # beside the default's warps, the other count of its tile: 4 for a 16-row tile's
        # 2, 8 for 4
        dev = planner.device_model(DEVICE_SPECS["h100"])
        for m, warps, other in ((16, 2, 4), (128, 4, 8)):
            configs = planner.select_configs(
                linear_problem(m, 1024, 1024), dev, True, True, exhaustive=True
            )
            self.assertEqual(configs[0].num_warps, warps)
            self.assertIn(dataclasses.replace(configs[0], num_warps=other), configs)

    def test_compute_bound_configs(self):
        # only the weight cast in the kernel: SWAP_AB makes it wgmma's register operand,
        # and from M = 1024 256-row tiles halve the times its tiles are re-read
        dev = planner.device_model(DEVICE_SPECS["h200"])
        p = linear_problem(1024, 4096, 4096)
        (cfg,) = planner.select_configs(p, dev, False, True)
        self.assertEqual((cfg.BLOCK_M, cfg.BLOCK_N, cfg.SWAP_AB), (256, 128, True))
        exhaustive = planner.select_configs(p, dev, False, True, exhaustive=True)
        self.assertEqual(exhaustive[0], cfg)
        self.assertIn(False, {c.SWAP_AB for c in exhaustive})
        # the activation cast too: A stays the register operand
        self.assertFalse(
            any(c.SWAP_AB for c in planner.select_configs(p, dev, True, True))
        )

    def test_two_row_tiles_swap(self):
        # M = 129-256: two 128-row tiles each cast the weight; swapped, in registers
        dev = planner.device_model(DEVICE_SPECS["h100"])
        for m, n, swap, block_n in [
            (256, 14336, True, 128),
            (200, 4096, True, 64),
            (128, 4096, False, 32),
        ]:
            (cfg,) = planner.select_configs(
                linear_problem(m, n, 4096), dev, False, True
            )
            self.assertEqual(
                (cfg.SWAP_AB, cfg.BLOCK_N, cfg.SPLIT_K), (swap, block_n, 1)
            )
            exhaustive = planner.select_configs(
                linear_problem(m, n, 4096), dev, False, True, exhaustive=True
            )
            self.assertEqual({c.SWAP_AB for c in exhaustive}, {True, False})
        # two 64-row tiles of a narrow weight (M = 128, K too short to split) stay thin
        # and unswapped
        (cfg,) = planner.select_configs(
            linear_problem(128, 1024, 1024), dev, False, True
        )
        self.assertEqual((cfg.BLOCK_M, cfg.BLOCK_N, cfg.SWAP_AB), (64, 16, False))
        # the swapped tile's pipeline: as deep as fits at 64 columns, 3 stages at 128
        depth = {}
        for gpu in ("h100", "a100"):
            for n in (4096, 14336):
                (cfg,) = planner.select_configs(
                    linear_problem(256, n, 4096),
                    planner.device_model(DEVICE_SPECS[gpu]),
                    False,
                    True,
                )
                depth[gpu, cfg.BLOCK_N] = cfg.num_stages
        self.assertEqual(
            depth,
            {("h100", 64): 6, ("h100", 128): 3, ("a100", 64): 4, ("a100", 128): 3},
        )
        # a K shorter than the swapped tile's 64 keeps the tile's depth to K
        (cfg,) = planner.select_configs(linear_problem(256, 4096, 32), dev, False, True)
        self.assertEqual((cfg.SWAP_AB, cfg.BLOCK_K), (True, 32))
        # x cast in the kernel too: A stays the register operand
        (cfg,) = planner.select_configs(
            linear_problem(256, 4096, 4096), dev, True, True
        )
        self.assertFalse(cfg.SWAP_AB)

    def test_one_wide_row_tile_swaps(self):
        # M = 65-128 over 128-column tiles: x cast apart and the weight swapped into
        # registers, not both cast in the kernel; narrower or 64-row tiles unchanged
        for gpu in ("h200", "h100"):
            dev = planner.device_model(DEVICE_SPECS[gpu])
            for m, n, swap in [
                (96, 11008, True),
                (128, 14336, True),
                (128, 4096, False),
                (64, 11008, False),
            ]:
                plan = planner.plan(linear_problem(m, n, 4096), dev)
                cfg = plan.config
                self.assertEqual(plan.path, planner.Path.TEMPLATE, (gpu, m, n))
                self.assertEqual(cfg.SWAP_AB, swap, (gpu, m, n))
                if swap:
                    self.assertEqual(
                        (plan.fused_a, cfg.BLOCK_M, cfg.BLOCK_N, cfg.num_warps),
                        (False, 128, 128, 8),
                    )

    def test_tall_row_tile_streams_the_weight_once(self):
        # M = 129-256: one 256x128 swapped tile where its tiles give most SMs one and fit
        # one wave, else two 128-row tiles
        for gpu in ("h200", "h100"):
            dev = planner.device_model(DEVICE_SPECS[gpu])
            for m, n, k, block_m in [
                (256, 11008, 4096, 256),
                (160, 14336, 4096, 256),
                (256, 18944, 3584, 128),
                (256, 4096, 4096, 128),
            ]:
                plan = planner.plan(linear_problem(m, n, k), dev)
                cfg = plan.config
                self.assertEqual(plan.path, planner.Path.TEMPLATE, (gpu, m, n))
                self.assertEqual(
                    (plan.fused_a, cfg.SWAP_AB, cfg.BLOCK_M), (False, True, block_m)
                )
                if block_m == 256:
                    self.assertEqual((cfg.BLOCK_N, cfg.num_warps), (128, 8))
        # with an A100's shared memory three stages of it do not fit: two row tiles
        small = dataclasses.replace(DEVICE_SPECS["h100"], smem_per_block=166912)
        plan = planner.plan(
            linear_problem(256, 11008, 4096), planner.device_model(small)
        )
        self.assertEqual(plan.config.BLOCK_M, 128, plan.describe())

    def test_x_cast_apart_from_64_rows(self):
        # a row tile of 64 or more rows casts only a weight of 2048 or more columns or
        # rows in the kernel, with the deeper pipeline that leaves; 32-row tiles, small
        # weights and weights narrower than x is tall cast x in the kernel too
        for gpu in ("h200", "h100"):
            dev = planner.device_model(DEVICE_SPECS[gpu])
            for m, n, k, fused_a in [
                (64, 4096, 4096, False),
                (48, 14336, 4096, False),
                (96, 2560, 2560, False),
                (96, 1024, 4096, False),
                (32, 4096, 4096, True),
                (96, 1024, 1024, True),
                (200, 96, 4095, True),
            ]:
                plan = planner.plan(linear_problem(m, n, k), dev)
                self.assertEqual(plan.path, planner.Path.TEMPLATE, (gpu, m, n, k))
                self.assertEqual(
                    (plan.fused_a, plan.fused_b), (fused_a, True), plan.describe()
                )
                if not fused_a:
                    # as deep as select_configs gives it: 4-6 stages, never 2
                    deepest = planner.select_configs(
                        linear_problem(m, n, k), dev, False, True
                    )[0]
                    self.assertEqual(plan.config, deepest)
                    self.assertGreaterEqual(plan.config.num_stages, 4, plan.describe())

    def test_swapped_split_tiles_over_a_long_k(self):
        # one 128-row tile over K >= 5120 and a weight too narrow for 64-column tiles to
        # fill the SMs: swapped 128x64 tiles, K split 2-4 ways by the fill of the waves;
        # a short K, 64-row tiles, wide weights and weights too narrow even so keep theirs
        T = planner.TileConfig
        swapped = [
            ((96, 1536, 6144), 4),
            ((128, 2048, 8192), 4),
            ((128, 1280, 5120), 4),
            ((128, 4096, 14336), 2),
            ((128, 5120, 13824), 3),
        ]
        kept = [
            ((128, 4096, 4096), T(128, 32, 128, 8, 4, 4)),
            ((128, 1024, 8192), None),
            ((64, 4096, 14336), T(64, 32, 128, 8, 4, 6)),
            ((128, 11008, 4096), T(128, 128, 64, 8, 8, 3, SWAP_AB=True)),
        ]
        for gpu in ("h200", "h100"):
            dev = planner.device_model(DEVICE_SPECS[gpu])
            for (m, n, k), split in swapped:
                p = linear_problem(m, n, k)
                want = T(128, 64, 64, 8, 4, 6, SWAP_AB=True, SPLIT_K=split)
                self.assertEqual(
                    planner.select_configs(p, dev, False, True)[0], want, (gpu, m, n, k)
                )
                plan = planner.plan(p, dev)
                if plan.config is not None:  # timed or taken: this config
                    self.assertEqual(plan.config, want, plan.describe())
            for (m, n, k), config in kept:
                got = planner.select_configs(linear_problem(m, n, k), dev, False, True)[
                    0
                ]
                self.assertFalse(got.SWAP_AB and got.SPLIT_K > 1, (gpu, m, n, k, got))
                if config is not None:
                    self.assertEqual(got, config, (gpu, m, n, k))


SWAP = dict(
    BLOCK_M=16,
    BLOCK_N=64,
    BLOCK_K=32,
    GROUP_M=8,
    num_warps=4,
    num_stages=3,
    SWAP_AB=True,
)
# the H200's swapped split tile (128x64x64 s6) at the depth every CI GPU's shared
# memory holds
SWAPPED_SPLIT = dict(
    BLOCK_M=128,
    BLOCK_N=64,
    BLOCK_K=64,
    GROUP_M=8,
    num_warps=4,
    num_stages=2,
    SWAP_AB=True,
)


class TestForcedConfigs(TestCase):
    def test_forced_configs_fit_every_gpu(self):
        # the values tests launch these on any CI GPU: the A10G's shared memory, the
        # least, holds them with both operands read as fp32
        smem = DEVICE_SPECS["a10g"].smem_per_block
        for config in (SWAP, SWAPPED_SPLIT):
            for split_k in (1, 2, 3, 4):
                tile = planner.TileConfig(**config, SPLIT_K=split_k)
                self.assertLessEqual(tile.smem_bytes(4, 4), smem, tile)


class TestTensorCoreMMAutotune(TensorCoreMMTestCase):
    def choices_offered(self, dynamic, **config):
        """The choices each template lowering of a 16x512 @ 512x256 linear offers under
        max-autotune with ``config`` (its batch dim marked dynamic if ``dynamic``), the
        first taken without benchmarking."""
        x, w, b = gpu_randn((16, 512), (256, 512), (256,))
        if dynamic:
            torch._dynamo.mark_dynamic(x, 0)
        seen = []

        def pick_first(name, choices, *args, **kwargs):
            seen.append(list(choices))
            return choices[0].output_node(), choices[0]

        with (
            inductor_config.patch(max_autotune=True, **config),
            mock.patch.object(mm_tensorcore, "autotune_select_algorithm", pick_first),
        ):
            self.cuda_code(linear(), x, w, b)
        return seen

    @plans_as_h200
    def test_max_autotune_adds_configs_and_the_stock_path(self):
        from torch._inductor.codegen.subgraph import SubgraphChoiceCaller
        from torch._inductor.select_algorithm import TritonTemplateCaller

        (choices,) = self.choices_offered(False, max_autotune_gemm_backends="TRITON")
        templates = [c for c in choices if isinstance(c, TritonTemplateCaller)]
        self.assertGreater(len(templates), 1)
        self.assertTrue(
            all(c.name.startswith("triton_tensorcore_mm") for c in templates)
        )
        self.assertEqual(sum(isinstance(c, SubgraphChoiceCaller) for c in choices), 1)

    @plans_as_h200
    def test_max_autotune_dynamic_m_takes_the_planned_kernels(self):
        # a symbolic M: the plan's kernel per range of M, picked at run time; nothing is
        # benchmarked (the stock path's subgraph would specialize M, and a kernel's time
        # at the size hint says nothing of the other ranges)
        self.assertEqual(
            self.choices_offered(True, max_autotune_gemm_backends="TRITON"), []
        )
        self.assertEqual(counters["inductor"]["tensorcore_mm_dynamic_m_dispatch"], 1)
        self.assertEqual(counters["inductor"]["tensorcore_mm_template"], 1)

    @plans_as_h200
    @parametrize("dynamic", [False, True])
    def test_split_k_under_max_autotune_needs_a_static_m(self, dynamic):
        # the autotuner allocates a choice's workspace by its count, which a symbolic M
        # leaves symbolic: there the split config is not offered, and the stock lowering
        # runs (a forced split config has no neighbour; the stock backends, ATen alone,
        # leave nothing to benchmark)
        seen = self.choices_offered(
            dynamic,
            max_autotune_gemm_backends="ATEN",
            tensorcore_mm_force_config=dict(SWAP, SPLIT_K=2),
        )
        choices = [c for cs in seen for c in cs]
        self.assertEqual(
            any(getattr(c, "workspace_arg", None) for c in choices), not dynamic
        )
        self.assertEqual(
            counters["inductor"]["tensorcore_mm_fallback:no_config"], int(dynamic)
        )

    @plans_as_h200
    @inductor_config.patch(tensorcore_mm_force_config=SWAP)
    def test_swap_ab(self):
        # C^T = B^T A^T: the weight's tile is dot's first operand; the tile stored transposed
        code = self.cuda_code(linear(), *gpu_randn((16, 512), (256, 512), (256,)))
        self.assertTemplate(code)
        src = kernel_source(code, template_kernels(code)[0])
        FileCheck().check("SWAP_AB : tl.constexpr = True").check("tl.dot(b.to(").run(
            src
        )

    @plans_as_h200
    @parametrize("m", [128, 200])
    def test_one_row_tile_swapped_code(self, m):
        # one row tile: the template swaps, x cast by a kernel of its own
        code = self.cuda_code(linear(), *gpu_randn((m, 4096), (11008, 4096), (11008,)))
        self.assertTemplate(code, casts=1)
        src = kernel_source(code, template_kernels(code)[0])
        self.assertGreaterEqual(constexpr(src, "BLOCK_M"), m)
        self.assertIn("SWAP_AB : tl.constexpr = True", src)

    @plans_as_h200
    @parametrize("m, casts", [(64, 1), (32, 0)])
    def test_x_cast_apart_code(self, m, casts):
        # from 64 rows x is cast by a kernel of its own; a 32-row tile casts both in the
        # kernel. Either way one row tile spans M
        code = self.cuda_code(linear(), *gpu_randn((m, 4096), (4096, 4096), (4096,)))
        self.assertTemplate(code, casts=casts)
        src = kernel_source(code, template_kernels(code)[0])
        self.assertGreaterEqual(constexpr(src, "BLOCK_M"), m)
        x_type = "bf16" if casts else "fp32"
        self.assertIn(f"'arg_A': '*{x_type}', 'arg_B': '*fp32'", "\n".join(code))

    @plans_as_h200
    def test_swapped_split_code(self):
        # 96 x 1536 x 6144: x cast by a kernel of its own, one swapped row tile, K split
        # with the partials in a workspace
        code = self.cuda_code(linear(), *gpu_randn((96, 6144), (1536, 6144), (1536,)))
        self.assertTemplate(code, casts=1)
        src = kernel_source(code, template_kernels(code)[0])
        self.assertGreaterEqual(constexpr(src, "BLOCK_M"), 96)
        self.assertIn("SWAP_AB : tl.constexpr = True", src)
        self.assertGreater(constexpr(src, "SPLIT_K"), 1)
        self.assertRegex("\n".join(code), r"workspace_\d+\.zero_\(\)")

    @plans_as_a10g
    @parametrize("n, split_k", [(1500, 4), (5000, 3)])
    def test_swapped_split_values(self, n, split_k):
        # odd N and K past the last whole step, three and four splits
        x, w, b = gpu_randn((97, 5121), (n, 5121), (n,))
        with inductor_config.patch(
            tensorcore_mm_force_config=dict(SWAPPED_SPLIT, SPLIT_K=split_k),
            tensorcore_mm_force_path="template",
        ):
            out, code = self.compile_and_run(linear(), x, w, b)
        src = kernel_source(code, template_kernels(code)[0])
        FileCheck().check("SWAP_AB : tl.constexpr = True").check(
            f"SPLIT_K : tl.constexpr = {split_k}"
        ).run(src)
        self.assertLikeEager(
            out, linear(), (x, w, b), lambda x, w, b: x @ w.t() + b, BF16
        )

    @requires_cuda_sm80
    @parametrize("split_k", [1, 2])
    def test_swap_ab_values(self, split_k):
        # split-K's partial sums of a swapped tile are [BLOCK_N, BLOCK_M]
        x, w, b = gpu_randn((37, 999), (1001, 999), (1001,))
        with inductor_config.patch(
            tensorcore_mm_force_config=dict(SWAP, SPLIT_K=split_k),
            tensorcore_mm_force_path="template",
        ):
            out, code = self.compile_and_run(linear(), x, w, b)
        self.assertEqual(len(template_kernels(code)), 1)
        self.assertLikeEager(
            out, linear(), (x, w, b), lambda x, w, b: x @ w.t() + b, BF16
        )

    @requires_cuda_sm80
    @parametrize("benchmark_epilogue_fusion", [False, True])
    def test_kernel_failing_to_load_under_max_autotune(self, benchmark_epilogue_fusion):
        if not is_big_gpu():
            self.skipTest("max-autotune's GEMM templates need a big GPU")

        # autotuning drops the choices that fail to compile or load: the stock path's wins
        def fn(x, w, b):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return F.relu(F.linear(x, w, b))  # an epilogue to fuse and benchmark

        x, w, b = gpu_randn((16, 512), (256, 512), (256,))
        with (
            inductor_config.patch(
                max_autotune=True,
                max_autotune_gemm_backends="TRITON",
                benchmark_epilogue_fusion=benchmark_epilogue_fusion,
            ),
            no_template_binary() as refused,
        ):
            out, code = self.compile_and_run(fn, x, w, b)
        self.assertTrue(refused)
        self.assertEqual(template_kernels(code), [])
        torch.testing.assert_close(out, fn(x, w, b), atol=2**-6, rtol=2**-7)


instantiate_parametrized_tests(TestAutotuneConfigs)
instantiate_parametrized_tests(TestTensorCoreMMAutotune)

if __name__ == "__main__":
    run_tests()
