# Owner(s): ["module: inductor"]
"""The matmul_meta pass (``config.autocast_matmul_meta``): a MatmulMeta on every
mm/addmm/bmm/baddbmm Inductor lowers.

Detection is tested on the aten graphs Inductor would get (Dynamo + the pass's pre-grad
marks + AOTAutograd with Inductor's decompositions, forward and backward, on CPU: fast,
so parametrised over ops, dtypes and odd shapes); the wiring through Inductor (hooks,
lowering, wrapper comments, cache keys, logging, fallbacks) by compiling on CPU, and in
the CUDA code Inductor generates (``get_code``, which runs nothing); the backward's labels
on a CUDA GPU.
"""

import logging
import os
import re
import subprocess
import sys
import tempfile
from unittest import mock

from functorch.compile import make_boxed_func

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._functorch import config as functorch_config
from torch._functorch.aot_autograd import aot_module_simplified
from torch._inductor import config as inductor_config
from torch._inductor.decomposition import select_decomp_table

from torch._inductor.fx_passes import matmul_meta
from torch._inductor.fx_passes.matmul_meta import (
    cast_source,
    get_matmul_meta,
    MATMUL_META_KEY,
    MatmulMeta,
    recent_matmul_metas,
)
from torch._inductor.test_case import run_tests, TestCase
from torch._inductor.utils import get_code, run_and_get_code
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
    recover_orig_fp32_precision,
)
from torch.testing._internal.inductor_utils import GPU_TYPE
from torch.testing._internal.triton_utils import requires_cuda_and_triton

HALF = (torch.bfloat16, torch.float16)
COMMENT = "matmul_meta:"

GRAPH_SEPARATOR = "\n# ---- next graph ----\n"

# what varies between runs and machines in generated code: (pattern, replacement)
VOLATILE = (
    # compile counter of the process
    (re.compile(r"# AOT ID: \['\d+_(\w+)'\]"), r"# AOT ID: ['<N>_\1']"),
    # cache dir and content hash of the kernel file
    (re.compile(r"# kernel path: \S+"), "# kernel path: <cache>"),
    # hash of the Triton build and ptxas on the machine that compiled
    (re.compile(r"'backend_hash': '[0-9A-F]{64}'"), "'backend_hash': '<backend_hash>'"),
    # a constant's address in the wrapper's comment (freezing's _frozen_param<N>)
    (
        re.compile(r"^(\w+ = None  # device\(.*\)) [0-9a-f]{6,}$", re.MULTILINE),
        r"\1 <addr>",
    ),
)


def golden_code(code):
    """The generated sources of each graph, joined, for ``assertExpected``."""
    text = code if isinstance(code, str) else GRAPH_SEPARATOR.join(code)
    for pattern, replacement in VOLATILE:
        text = pattern.sub(replacement, text)
    return text


class MatmulMetaOnly:
    """Each test runs with matmul_meta alone, fresh counters and no recorded metadata."""

    def setUp(self):
        super().setUp()
        self._features = inductor_config.patch(autocast_matmul_meta=True)
        self._features.__enter__()
        counters.clear()
        matmul_meta.clear_recent_matmul_metas()

    def tearDown(self):
        self._features.__exit__(None, None, None)
        super().tearDown()


def dtype_name(dtype):
    return str(dtype).removeprefix("torch.")


# ---------------------------------------------------------------------------
# Aten graphs as the post-grad pre pass sees them, without lowering


def aten_graphs(fn, *args, backward=True, dynamic=None):
    """[(kind, GraphModule)] of fn's compiled graphs, each with MATMUL_META_KEY set."""
    graphs = []

    def make_compiler(kind):
        def compiler(gm, example_inputs):
            matmul_meta.annotate_matmuls(gm.graph)
            graphs.append((kind, gm))
            return make_boxed_func(gm.forward)

        return compiler

    def backend(gm, example_inputs):
        matmul_meta.annotate_autocast_regions(gm)
        return aot_module_simplified(
            gm,
            example_inputs,
            fw_compiler=make_compiler("forward"),
            bw_compiler=make_compiler("backward"),
            decompositions=select_decomp_table(),
        )

    torch._dynamo.reset()
    with functorch_config.patch(enable_autograd_cache=False):
        out = torch.compile(fn, backend=backend, dynamic=dynamic)(*args)
        if backward:
            outs = out if isinstance(out, (tuple, list)) else (out,)
            sum(o.float().sum() for o in outs).backward()
    return graphs


def metas_of(graphs, kind=None):
    """[(kind, node, MatmulMeta)] of every matmul node, in graph order."""
    found = []
    for graph_kind, gm in graphs:
        if kind is not None and graph_kind != kind:
            continue
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target in matmul_meta.MATMUL_OPS:
                found.append((graph_kind, node, node.meta.get(MATMUL_META_KEY)))
    return found


def cpu_leaf(*size, dtype=torch.float32):
    return torch.randn(*size, dtype=dtype).requires_grad_()


# Each builds (fn, args, forward op) with odd sizes: M=7, K=13, N=5, batch 3.
def case_mm(dtype):
    def fn(x, w):
        with torch.autocast("cpu", dtype=dtype):
            return x @ w

    return fn, (cpu_leaf(7, 13), cpu_leaf(13, 5)), "mm"


def case_linear(dtype):
    def fn(x, w, b):
        with torch.autocast("cpu", dtype=dtype):
            return F.linear(x, w, b)

    return fn, (cpu_leaf(7, 13), cpu_leaf(5, 13), cpu_leaf(5)), "addmm"


def case_bmm(dtype):
    def fn(x, w):
        with torch.autocast("cpu", dtype=dtype):
            return x @ w

    return fn, (cpu_leaf(3, 7, 13), cpu_leaf(3, 13, 5)), "bmm"


def case_baddbmm(dtype):
    def fn(b, x, w):
        with torch.autocast("cpu", dtype=dtype):
            return torch.baddbmm(b, x, w)

    return fn, (cpu_leaf(3, 7, 5), cpu_leaf(3, 7, 13), cpu_leaf(3, 13, 5)), "baddbmm"


CASES = {"mm": case_mm, "linear": case_linear, "bmm": case_bmm, "baddbmm": case_baddbmm}


class TestMatmulMetaDetection(MatmulMetaOnly, TestCase):
    """What MatmulMeta says, on forward and backward aten graphs (CPU autocast)."""

    def tearDown(self):
        self.assertEqual(self.fallbacks(), {})
        super().tearDown()

    @staticmethod
    def fallbacks():
        return {
            k: v
            for k, v in counters["inductor"].items()
            if k.startswith("matmul_meta_fallback")
        }

    def assertAutocast(self, meta, dtype, device="cpu"):
        self.assertIsInstance(meta, MatmulMeta)
        self.assertEqual(meta.source, "autocast")
        self.assertEqual(meta.autocast_dtype, dtype)
        self.assertEqual(meta.autocast_device, device)
        self.assertEqual(meta.compute_dtypes[:2], (dtype, dtype))
        self.assertEqual(meta.accumulate_dtype, torch.float32)
        self.assertTrue(meta.allow_tensor_core)

    def assertNotAutocast(self, meta, source, compute):
        self.assertIsInstance(meta, MatmulMeta)
        self.assertEqual(meta.source, source)
        self.assertIsNone(meta.autocast_dtype)
        self.assertIsNone(meta.autocast_device)
        self.assertEqual(meta.compute_dtypes[:2], (compute, compute))

    @parametrize("case", list(CASES))
    @parametrize("dtype", HALF, name_fn=dtype_name)
    def test_autocast_forward_and_backward(self, case, dtype):
        fn, args, op = CASES[case](dtype)
        found = metas_of(aten_graphs(fn, *args))
        forward = [m for kind, _, m in found if kind == "forward"]
        backward = [m for kind, _, m in found if kind == "backward"]
        self.assertEqual([m.op for m in forward], [op])
        meta = forward[0]
        self.assertAutocast(meta, dtype)
        # the fp32 leaves are what autocast cast; the bias/input too
        self.assertEqual(meta.input_dtypes, (torch.float32,) * len(meta.compute_dtypes))
        self.assertEqual(meta.compute_dtypes, (dtype,) * len(meta.compute_dtypes))
        self.assertEqual(meta.output_dtype, dtype)
        # grad of both matmul operands: two matmuls, labelled by the forward's region
        self.assertEqual(len(backward), 2)
        for m in backward:
            self.assertAutocast(m, dtype)

    def test_nested_disabled_region(self):
        def fn(x, w, v):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                a = x @ w
                with torch.autocast("cpu", enabled=False):
                    b = x @ v
            return a, b

        graphs = aten_graphs(fn, cpu_leaf(7, 13), cpu_leaf(13, 5), cpu_leaf(13, 3))
        by_width = {}
        for kind, node, meta in metas_of(graphs):
            by_width.setdefault(node.meta["val"].shape[-1], []).append((kind, meta))
        self.assertAutocast(by_width[5][0][1], torch.bfloat16)
        # x @ v: 3 wide forward; its backward: grad_x 13 wide, grad_v 3 wide
        disabled = [m for kind, m in by_width[3]] + [
            m for kind, m in by_width[13] if m.compute_dtypes[0] == torch.float32
        ]
        self.assertEqual(len(disabled), 3)
        for meta in disabled:
            self.assertNotAutocast(meta, "none", torch.float32)
            self.assertEqual(meta.input_dtypes, (torch.float32, torch.float32))
            self.assertFalse(meta.allow_tensor_core)  # fp32 on CPU: no claim

    @parametrize("dtype", HALF, name_fn=dtype_name)
    def test_user_cast_is_not_autocast(self, dtype):
        def fn(x, w):
            return x.to(dtype) @ w.to(dtype)

        found = metas_of(aten_graphs(fn, cpu_leaf(7, 13), cpu_leaf(13, 5)))
        kinds = [kind for kind, _, _ in found]
        self.assertEqual(kinds, ["forward", "backward", "backward"])
        forward = found[0][2]
        self.assertNotAutocast(forward, "user_cast", dtype)
        self.assertEqual(forward.input_dtypes, (torch.float32, torch.float32))
        self.assertTrue(forward.allow_tensor_core)
        for _, _, meta in found[1:]:
            self.assertIsNone(meta.autocast_dtype)
            self.assertNotEqual(meta.source, "autocast")

    def test_fp64_and_integers_in_region(self):
        def fn(x, w, i, j):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return x @ w, i @ j

        args = (
            cpu_leaf(7, 13, dtype=torch.float64),
            cpu_leaf(13, 5, dtype=torch.float64),
            torch.randint(-3, 3, (7, 13)),
            torch.randint(-3, 3, (13, 5)),
        )
        found = metas_of(aten_graphs(fn, *args, backward=False))
        # by the matmul's dtype: the graph's order of the two is not Dynamo's contract
        by_dtype = {node.meta["val"].dtype: m for _, node, m in found}
        self.assertEqual(len(found), 2)
        fp64, int64 = by_dtype[torch.float64], by_dtype[torch.int64]
        # autocast leaves fp64 alone: no autocast dtype although inside the region
        self.assertNotAutocast(fp64, "none", torch.float64)
        self.assertEqual(fp64.accumulate_dtype, torch.float64)
        self.assertFalse(fp64.allow_tensor_core)
        self.assertNotAutocast(int64, "none", torch.int64)
        self.assertEqual(int64.accumulate_dtype, torch.int64)
        self.assertFalse(int64.allow_tensor_core)

    @parametrize("dtype", HALF, name_fn=dtype_name)
    def test_ambient_autocast(self, dtype):
        # the compiled function is called inside the region: no marker in Dynamo's graph
        def fn(x, w, b):
            return F.linear(x, w, b)

        with torch.autocast("cpu", dtype=dtype):
            found = metas_of(
                aten_graphs(fn, cpu_leaf(7, 13), cpu_leaf(5, 13), cpu_leaf(5))
            )
        self.assertEqual(len(found), 3)
        for _, _, meta in found:
            self.assertAutocast(meta, dtype)

    def test_graph_break_inside_region(self):
        def fn(x, w, v):
            with torch.autocast("cpu", dtype=torch.float16):
                a = x @ w
                torch._dynamo.graph_break()
                return a @ v

        graphs = aten_graphs(fn, cpu_leaf(7, 13), cpu_leaf(13, 5), cpu_leaf(5, 3))
        self.assertEqual([k for k, _ in graphs].count("forward"), 2)
        found = metas_of(graphs)
        self.assertEqual(len(found), 6)
        for _, _, meta in found:
            self.assertAutocast(meta, torch.float16)

    def test_several_regions_in_one_graph(self):
        def fn(x, w):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                a = x @ w
            b = x @ w
            with torch.autocast("cpu", dtype=torch.float16):
                c = x @ w
            return a, b, c

        graphs = aten_graphs(
            fn, cpu_leaf(7, 13), cpu_leaf(13, 5), backward=False, dynamic=True
        )
        self.assertEqual([kind for kind, _ in graphs].count("forward"), 1)
        a, b, c = (m for _, _, m in metas_of(graphs, "forward"))
        self.assertAutocast(a, torch.bfloat16)
        self.assertNotAutocast(b, "none", torch.float32)
        self.assertAutocast(c, torch.float16)

    def test_checkpoint_body_inherits_region(self):
        def block(x, w):
            return torch.relu(x @ w)

        def fn(x, w):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return torch.utils.checkpoint.checkpoint(
                    block, x, w, use_reentrant=False
                )

        found = metas_of(aten_graphs(fn, cpu_leaf(7, 13), cpu_leaf(13, 5)))
        # forward, its recomputation and the two gradient matmuls
        self.assertGreaterEqual(len(found), 3)
        self.assertIn("backward", [kind for kind, _, _ in found])
        for _, _, meta in found:
            self.assertAutocast(meta, torch.bfloat16)

    @recover_orig_fp32_precision
    def test_fp32_tensor_core_follows_matmul_precision(self):
        # (set_float32_matmul_precision cannot put back the backends' "none": the
        # decorator restores their fp32_precision flags)
        for setting, allowed in (("highest", False), ("high", True), ("medium", True)):
            torch.set_float32_matmul_precision(setting)
            self.assertEqual(
                matmul_meta._fp32_tensor_core_allowed("cuda"), allowed, setting
            )
            self.assertFalse(matmul_meta._fp32_tensor_core_allowed("cpu"))

    def test_cast_source_and_get_matmul_meta(self):
        fn, args, _ = case_linear(torch.bfloat16)
        ((_, gm),) = aten_graphs(fn, *args, backward=False)
        ((_, addmm, meta),) = metas_of([("forward", gm)])
        self.assertIs(get_matmul_meta(addmm), meta)
        # the inputs by their shapes (the order of the graph's placeholders may differ)
        placeholders = {
            tuple(n.meta["val"].shape): n
            for n in gm.graph.nodes
            if n.op == "placeholder"
        }
        x, w, bias = (placeholders[shape] for shape in ((7, 13), (5, 13), (5,)))
        # cast_source indexes node.args: addmm(bias, x, permute(cast(w)))
        self.assertIs(cast_source(addmm, 0), bias)
        self.assertIs(cast_source(addmm, 1), x)
        self.assertIsNone(cast_source(addmm, 2))  # a permute: not looked through
        self.assertIs(cast_source(addmm.args[2], 0), w)
        self.assertIsNone(cast_source(addmm, 3))
        self.assertIsNone(get_matmul_meta(addmm.args[2]))
        # a stale MatmulMeta of another op (a rewritten node) is not trusted
        addmm.meta[MATMUL_META_KEY] = MatmulMeta(
            "mm", None, None, "none", (), (), torch.float32, torch.float32, False
        )
        self.assertEqual(get_matmul_meta(addmm), meta)


# ---------------------------------------------------------------------------
# Through Inductor


# what the subprocess of test_torch_logs_env prints where its torch has no flag
NO_FLAG = "no config.autocast_matmul_meta"


def comment_lines(code):
    """The matmul_meta comments of each graph's wrapper, graphs separated."""
    graphs = [code] if isinstance(code, str) else code
    return GRAPH_SEPARATOR.join(
        "\n".join(line.strip() for line in c.splitlines() if COMMENT in line)
        for c in graphs
    )


def without_comments(code):
    return "\n".join(
        line for line in golden_code(code).splitlines() if COMMENT not in line
    )


def autocast_training_step(x, w, b, y, v):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = F.linear(x, w, b)
        return torch.bmm(h.view(3, 7, 5), v) + y


def training_args():
    torch.manual_seed(0)
    return (
        cpu_leaf(21, 13),
        cpu_leaf(5, 13),
        cpu_leaf(5),
        cpu_leaf(3, 7, 4),
        cpu_leaf(3, 5, 4),
    )


class TestMatmulMetaInductor(MatmulMetaOnly, TestCase):
    """Hooks, lowering, wrapper comments, cache keys, logs and fallbacks, on CPU."""

    def fallbacks(self):
        return {
            k: v
            for k, v in counters["inductor"].items()
            if k.startswith("matmul_meta_fallback")
        }

    def compile_training(self):
        args = training_args()
        ref_args = [a.detach().clone().requires_grad_() for a in args]
        compiled = torch.compile(autocast_training_step)

        def step():
            out = compiled(*args)
            out.float().sum().backward()
            return out

        with functorch_config.patch(force_non_lazy_backward_lowering=True):
            out, code = run_and_get_code(step)
        ref = autocast_training_step(*ref_args)
        ref.float().sum().backward()
        self.assertEqual(out, ref, atol=2e-2, rtol=2e-2)
        for a, r in zip(args, ref_args):
            self.assertEqual(a.grad, r.grad, atol=5e-2, rtol=5e-2)
        return code

    def test_cpu_training_comments(self):
        code = self.compile_training()
        self.assertEqual(len(code), 2)  # forward, backward
        self.assertExpected(golden_code(comment_lines(code)))
        records = recent_matmul_metas()
        self.assertEqual([r.graph for r in records], ["forward", "backward"])
        self.assertEqual([m.op for m in records[0].metas], ["addmm", "bmm"])
        self.assertEqual(len(records[1].metas), 4)
        for record, c in zip(records, code):
            self.assertEqual(c.count(COMMENT), len(record.metas))
            for meta in record.metas:
                self.assertEqual(
                    (meta.source, meta.autocast_dtype, meta.autocast_device),
                    ("autocast", torch.bfloat16, "cpu"),
                )
                self.assertIn(f"# {COMMENT} {meta.describe()}", c)
        self.assertEqual(counters["inductor"]["matmul_meta_lowered"], 6)
        self.assertEqual(self.fallbacks(), {})

    def test_stock_code_unchanged_but_comments(self):
        def fn(x, w, v):
            # pointwise kernels before and after the matmuls: comments must not move code
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return (torch.relu(x) @ w).sin() @ v

        args = (torch.randn(7, 13), torch.randn(13, 5), torch.randn(5, 3))
        with inductor_config.patch(fx_graph_cache=False):
            out, code = run_and_get_code(torch.compile(fn), *args)
            inductor_config.autocast_matmul_meta = False
            torch._dynamo.reset()
            stock_out, stock_code = run_and_get_code(torch.compile(fn), *args)
        self.assertEqual(code[0].count(COMMENT), 2)
        self.assertEqual(stock_code[0].count(COMMENT), 0)
        self.assertEqual(without_comments(code), without_comments(stock_code))
        self.assertEqual(out, stock_out)

    def test_fx_graph_cache_key_covers_autocast(self):
        # bf16 operands: autocast casts nothing, so both aten graphs are the same
        def in_region(x, w):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return x @ w

        def plain(x, w):
            return x @ w

        args = (
            torch.randn(7, 13, dtype=torch.bfloat16),
            torch.randn(13, 5, dtype=torch.bfloat16),
        )
        lines = []
        with (
            inductor_config.patch(fx_graph_cache=True),
            functorch_config.patch(enable_autograd_cache=False),
        ):
            for fn in (in_region, plain):
                torch._dynamo.reset()
                _, code = run_and_get_code(torch.compile(fn), *args)
                lines.append(comment_lines(code))
        self.assertIn("source=autocast", lines[0])
        self.assertIn("source=none", lines[1])
        self.assertEqual(counters["inductor"]["fxgraph_cache_miss"], 2)
        self.assertEqual(counters["inductor"]["fxgraph_cache_hit"], 0)

    def test_user_pre_grad_pass_still_runs(self):
        seen = []

        def user_pass(graph):
            seen.append(len(graph.nodes))

        def fn(x, w):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return x @ w

        args = (
            torch.randn(7, 13, dtype=torch.bfloat16),
            torch.randn(13, 5, dtype=torch.bfloat16),
        )
        with inductor_config.patch(pre_grad_custom_pass=user_pass):
            _, code = run_and_get_code(torch.compile(fn), *args)
        self.assertEqual(len(seen), 1)
        self.assertIn("source=autocast", comment_lines(code))

    def test_region_error_falls_back(self):
        fn, args, _ = case_linear(torch.bfloat16)
        args = [a.detach() for a in args]
        with (
            mock.patch.object(
                matmul_meta, "_entered", side_effect=RuntimeError("boom")
            ),
            mock.patch.dict(os.environ, {"TORCHINDUCTOR_STRICT_FALLBACKS": "0"}),
        ):
            out, code = run_and_get_code(torch.compile(fn), *args)
        self.assertEqual(out, fn(*args))
        self.assertEqual(
            counters["inductor"]["matmul_meta_fallback:autocast_regions"], 1
        )
        # no region read: never an autocast claim
        self.assertIn("source=user_cast", comment_lines(code))
        self.assertNotIn("source=autocast", comment_lines(code))

    def test_attach_error_falls_back(self):
        fn, _, _ = case_bmm(torch.bfloat16)
        # bf16 operands: no cast kernel, only the extern bmm (a C++ compile costs seconds)
        args = (
            torch.randn(3, 7, 13, dtype=torch.bfloat16),
            torch.randn(3, 13, 5, dtype=torch.bfloat16),
        )
        with (
            mock.patch.object(matmul_meta, "_record", side_effect=RuntimeError("boom")),
            mock.patch.dict(os.environ, {"TORCHINDUCTOR_STRICT_FALLBACKS": "0"}),
            self.assertLogs(matmul_meta.log, logging.WARNING) as logs,
        ):
            out, code = run_and_get_code(torch.compile(fn), *args)
        self.assertEqual(out, fn(*args))
        # the lowering's attach, the codegen's comment
        self.assertEqual(len(logs.records), 2)
        self.assertIn("internal error: RuntimeError: boom", logs.output[0])
        self.assertEqual(counters["inductor"]["matmul_meta_fallback:attach"], 1)
        self.assertEqual(counters["inductor"]["matmul_meta_fallback:comment"], 1)

    def test_flag_off_leaves_nothing(self):
        inductor_config.autocast_matmul_meta = False
        fn, args, _ = case_mm(torch.bfloat16)
        args = [a.detach() for a in args]
        _, code = run_and_get_code(torch.compile(fn), *args)
        self.assertNotIn(COMMENT, code[0])
        self.assertEqual(recent_matmul_metas(), [])
        self.assertEqual(
            {k: v for k, v in counters["inductor"].items() if "matmul_meta" in k}, {}
        )

    def test_log_artifact(self):
        fn, args, _ = case_baddbmm(torch.bfloat16)
        args = [a.detach() for a in args]
        artifact = "torch._inductor.fx_passes.matmul_meta.__matmul_meta"
        try:
            torch._logging.set_logs(modules={"matmul_meta": True})
            with self.assertLogs(artifact, logging.DEBUG) as logs:
                torch.compile(fn)(*args)
        finally:
            torch._logging.set_logs()
        self.assertEqual(len(logs.output), 1)
        self.assertIn(
            "inference graph, node baddbmm: baddbmm autocast=bfloat16 autocast_device=cpu "
            "source=autocast",
            logs.output[0],
        )

    def test_torch_logs_env(self):
        # a fresh process: TORCH_LOGS is read, and its artifact names checked, when torch is
        # imported
        script = (
            "import sys\n"
            "import torch\n"
            "import torch._inductor.compile_fx  # Inductor loaded before its config is read\n"
            "from torch._inductor import config\n"
            "if not hasattr(config, 'autocast_matmul_meta'):\n"
            f"    print({NO_FLAG!r})\n"
            "    sys.exit(0)\n"
            "config.autocast_matmul_meta = True\n"
            "def f(x, w):\n"
            "    with torch.autocast('cpu', dtype=torch.float16):\n"
            "        return x @ w\n"
            "x, w = torch.randn(7, 13).half(), torch.randn(13, 5).half()\n"
            "torch.compile(f)(x, w)\n"
        )
        with tempfile.TemporaryDirectory() as cache_dir:
            env = dict(
                os.environ, TORCH_LOGS="matmul_meta", TORCHINDUCTOR_CACHE_DIR=cache_dir
            )
            proc = subprocess.run(
                [sys.executable, "-c", script],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
        self.assertEqual(proc.returncode, 0, proc.stderr)
        if NO_FLAG in proc.stdout.splitlines():
            self.skipTest(
                "a fresh Python process has no torch._inductor.config."
                "autocast_matmul_meta: its torch does not carry this change"
            )
        self.assertIn(
            "matmul_meta: inference graph, node mm: mm autocast=float16 "
            "autocast_device=cpu source=autocast",
            proc.stderr,
        )


# ---------------------------------------------------------------------------
# CUDA code


def autocast_linear(x, w, b):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return F.linear(x, w, b)


def cuda_code(fn, *args):
    """The wrapper (and kernel) sources Inductor generates for fn, without running them."""
    # upstream appends an empty kernel module for graphs of extern kernels only
    return [code for code in get_code(torch.compile(fn), *args) if code]


@requires_cuda_and_triton
class TestMatmulMetaCUDACodegen(MatmulMetaOnly, TestCase):
    def setUp(self):
        super().setUp()
        # pad_mm would time padded and unpadded odd-sized matmuls on the device: the
        # code would depend on a benchmark. No cache: each get_code is a fresh compile
        self.codegen_config = inductor_config.patch(
            shape_padding=False, fx_graph_cache=False, fx_graph_remote_cache=False
        )
        self.codegen_config.__enter__()
        self.no_autograd_cache = functorch_config.patch(enable_autograd_cache=False)
        self.no_autograd_cache.__enter__()

    def tearDown(self):
        self.no_autograd_cache.__exit__(None, None, None)
        self.codegen_config.__exit__(None, None, None)
        super().tearDown()

    def test_autocast_linear(self):
        # odd sizes; fp32 x, w, b under bf16 autocast: addmm of the three casts
        args = (
            torch.randn(33, 100, device=GPU_TYPE),
            torch.randn(75, 100, device=GPU_TYPE),
            torch.randn(75, device=GPU_TYPE),
        )
        code = cuda_code(autocast_linear, *args)
        self.assertEqual(
            comment_lines(code),
            "# matmul_meta: addmm autocast=bfloat16 autocast_device=cuda source=autocast "
            "in=(float32, float32, float32) compute=(bfloat16, bfloat16, bfloat16) out=bfloat16 "
            "acc=float32 tensor_core=True",
        )
        inductor_config.autocast_matmul_meta = False
        torch._dynamo.reset()
        stock = cuda_code(autocast_linear, *args)
        self.assertEqual(without_comments(code), without_comments(stock))

    @recover_orig_fp32_precision
    def cuda_code_at_high_precision(self, fn, *args):
        torch.set_float32_matmul_precision("high")  # TF32 allowed: recorded at compile
        return cuda_code(fn, *args)

    def test_cpu_autocast_and_fp32_precision_on_cuda(self):
        def fn(x, w, v):
            # CPU autocast does not touch CUDA matmuls; a CUDA region does
            with torch.autocast("cpu", dtype=torch.bfloat16):
                a = x @ w
                with torch.autocast("cuda", dtype=torch.float16):
                    b = x @ v
            # one output: get_code's stand-in for the compiled module returns nothing
            return torch.cat([a, b.float()], dim=1)

        args = (
            torch.randn(17, 40, device=GPU_TYPE),
            torch.randn(40, 24, device=GPU_TYPE),
            torch.randn(40, 8, device=GPU_TYPE),
        )
        code = self.cuda_code_at_high_precision(fn, *args)
        self.assertExpected(golden_code(comment_lines(code)))
        lines = comment_lines(code).splitlines()
        self.assertEqual(len(lines), 2)
        self.assertIn(
            "mm autocast=None autocast_device=None source=none in=(float32, float32) "
            "compute=(float32, float32) out=float32 acc=float32 tensor_core=True",
            lines[0],
        )
        self.assertIn(
            "mm autocast=float16 autocast_device=cuda source=autocast", lines[1]
        )


# ---------------------------------------------------------------------------
# The backward on a real GPU


@requires_cuda_and_triton
class TestMatmulMetaGPU(MatmulMetaOnly, TestCase):
    @parametrize("dtype", HALF, name_fn=dtype_name)
    def test_cuda_training_backward_labelled(self, dtype):
        def step(x, w, b, v):
            with torch.autocast("cuda", dtype=dtype):
                h = F.linear(x, w, b)
                with torch.autocast("cuda", enabled=False):
                    g = x @ v
            return h, g

        torch.manual_seed(0)
        args = [
            torch.randn(*s, device="cuda", requires_grad=True)
            for s in ((33, 100), (75, 100), (75,), (100, 9))
        ]
        ref_args = [a.detach().clone().requires_grad_() for a in args]

        def run():
            h, g = torch.compile(step)(*args)
            (h.float().sum() + g.sum()).backward()
            return h, g

        with functorch_config.patch(force_non_lazy_backward_lowering=True):
            (h, g), code = run_and_get_code(run)
        rh, rg = step(*ref_args)
        (rh.float().sum() + rg.sum()).backward()
        self.assertEqual(h, rh, atol=2e-2, rtol=2e-2)
        self.assertEqual(g, rg)
        for a, r in zip(args, ref_args):
            self.assertEqual(a.grad, r.grad, atol=5e-2, rtol=5e-2)
        records = recent_matmul_metas(2)
        self.assertEqual([r.graph for r in records], ["forward", "backward"])
        forward, backward = records
        sources = sorted((m.source, m.autocast_dtype == dtype) for m in forward.metas)
        self.assertEqual(sources, [("autocast", True), ("none", False)])
        autocast_bwd = [m for m in backward.metas if m.source == "autocast"]
        self.assertEqual(len(autocast_bwd), 2)
        for m in autocast_bwd:
            self.assertEqual((m.autocast_dtype, m.autocast_device), (dtype, "cuda"))
            self.assertEqual(m.compute_dtypes[:2], (dtype, dtype))
        for m in backward.metas:
            if m.source != "autocast":
                self.assertEqual(m.compute_dtypes[:2], (torch.float32, torch.float32))
        self.assertEqual(
            sum(c.count(COMMENT) for c in code),
            len(forward.metas) + len(backward.metas),
        )


instantiate_parametrized_tests(TestMatmulMetaDetection)
instantiate_parametrized_tests(TestMatmulMetaGPU)

if __name__ == "__main__":
    run_tests()
