"""The plan of a ``tensorcore_mm`` matmul: tile configs and the per-operand cost model.

Under autocast a matmul of fp32 tensors runs as ``cast(x) -> bf16``, ``cast(w) ->
bf16`` and a 16-bit GEMM. The template can instead load an fp32 operand and cast it
in registers. Whether that pays is decided per operand, per shape and per device
(``plan``); the tile configs come from ``select_configs``.

Cost model. Times in seconds. BW is the device's copy bandwidth (bytes read +
written per second), BW_L2 the rate at which SMs read from L2, P cuBLAS's 16-bit
dense rate, L the fixed cost of one kernel in a compiled
graph (launch gap, ramp-up, tail). For B batches of (M, K) @ (K, N) -> (M, N) with
F = 2·B·M·N·K FLOPs, S the set of operands cast in the kernel (read as 4 bytes, the
others as 2), and the tile config's grid_m = ceil(M/BLOCK_M), grid_n = ceil(N/BLOCK_N):

    cast(op)     = numel(op)·(4 + 2)/BW + L          a separate fp32 -> 16-bit kernel
    stock        = Σ_{fp32 op} cast(op) + max(F/P, bytes16/BW) + L
    template(S)  = Σ_{fp32 op ∉ S} cast(op) + max(F/(P·eff(S)), dram/(BW·stream·util),
                                                   l2/BW_L2) + L
    dram         = Σ_op numel(op)·size(op) + out + bias bytes      (each operand once)
    l2           = numel(A)·size(A)·grid_n·r(A) + numel(B)·size(B)·grid_m·r(B) + out bytes
    r(op)        = reread_cast if op ∈ S else 1     (each re-read is cast again: registers,
                                                   and shared memory unless wgmma reads it there)
    util         = min(1, B·grid_m·grid_n / (0.75·SMs))            (idle SMs stream less)

("fp32 op": an operand with an fp32 tensor behind its cast, where that cast has no
other user; a shared cast runs whatever we do, and the template reads its output.)

Fusing an operand's cast saves its cast kernel (a 4-byte read, a 2-byte write and
a launch) and costs 2 extra bytes each of the ``grid_n`` (A) or ``grid_m`` (B) times
the tiles re-read it from L2: it pays for an operand re-read few times, such as the
weight when M fits in one or two row tiles. When the shape is compute-bound the
in-kernel cast slows the main loop instead (``eff``: a cast operand passes through
registers, and a 16-bit copy of it back through shared memory unless it is wgmma's
register operand, A, or B when SWAP_AB), and the separate casts plus cuBLAS win.
``plan`` takes the fastest prediction and keeps the stock path unless the template
is predicted at least ``margin`` faster. One swapped row tile (128x128, or 256x128
past 128 rows) is the exception: there the weight swapped into registers (x cast apart)
and both operands cast in the kernel predict alike, bandwidth-bound, and the swapped
tile, faster when timed, is taken.

One row (M = 1, not batched): the template would run its MMAs 1/16 full and, one
row tile an SM, streams the weight well below the copy rate; ``gemv`` lowers it to a
reduction over K that reads every operand once (fp32 where that drops a cast), rounds
in registers and sums in fp32: ``bytes/(BW·stream_gemv) + L``. Over a [K, N] weight,
and an [N, K] one whose K would leave Inductor's reduction lanes idle (``gemv_nk``),
it is the gemv template.

A matmul whose only reader is a gelu-add (``config.gelu_add_fusion``) carries an
``Epilogue``: stock pays a pointwise kernel that reads the matmul's output back; the
template writes the epilogue's output instead, after its main loop (not hidden at
one block an SM), and may then pay with no operand cast in the kernel (16-bit
operands: ``template[16-bit]``).

A frozen 16-bit weight (``Problem.weight16``: Inductor's freezing folds autocast's cast
of an fp32 parameter into a bf16 constant before this lowering runs) has no cast to fuse,
but cuBLAS streams it at decode well below the copy rate. At M <= 16 (``decode16``) the
stock path is ``max(F/P, bytes16/(BW·stream_cublas16))``, and the gemv reduction (M = 1)
and the thin-tile template read the weight as stored (``stream_gemv16``, ``stream16``).
One row takes the gemv where it is predicted no slower than cuBLAS (one kernel in place
of x's cast and cuBLAS), else stock; never the 16-row template.

Ceilings. ``device_model`` takes a GPU's peaks from what it reports (memory clock x bus
width, SM clock x the architecture's tensor-core rate), scaled to what a device copy
and cuBLAS reach of them; the rates of the terms above are fractions of those, the same
for every GPU.

Where the model is not sure of a win and the weight is streamed once (``Plan.measure``:
a predicted win under ``certain``, any win on an architecture the rates were not measured
on, or a compute-bound main loop), the lowering times the template's kernel against the
16-bit GEMM on the device once, and adds the predicted casts the template saves.

This module decides and nothing else: no Inductor imports. The lowering
(kernel/mm_tensorcore.py) builds the ``Problem`` from the graph, takes the ``Plan`` and
hands its configs to the template's heuristic with the kernel inputs.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any, TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

FP32, HALF = 4, 2


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """What a GPU reports of itself: enough to place a matmul on its roofline."""

    cc: int  # compute capability, e.g. 90
    sm_count: int
    smem_per_block: int  # bytes a block may opt into
    sm_clock: float  # Hz, the SMs' maximum clock
    dram_bw: float  # bytes/s, peak: memory clock x bus width (as get_gpu_dram_gbps)


# Dense 16-bit tensor-core FLOPs per SM per clock, by compute capability: an
# architecture's property (sm_80: 312 TFLOP/s on 108 SMs at 1.41 GHz).
TENSOR_FLOPS_PER_SM_CLOCK = {
    80: 2048,
    86: 1024,
    87: 1024,
    89: 1024,
    90: 4096,
    100: 8192,
}
MIN_CC = 80  # bf16 tensor cores; older parts keep the stock path
CALIBRATED_CC = 90  # the architecture the rates of DeviceModel were measured on
# What a device achieves of its peaks: a device copy of the DRAM peak, cuBLAS's 16-bit
# dense rate on a large GEMM of the tensor-core peak.
COPY_OF_PEAK = 0.877
MM_OF_PEAK = 0.635


@dataclasses.dataclass(frozen=True)
class DeviceModel:
    """What the cost model and the configs need to know of a GPU.

    The ceilings come from the device's own peaks (``device_model``); the rates below
    are fractions of them and of the cost model's terms, the same for every GPU.
    """

    cc: int
    sm_count: int
    smem_per_block: int
    copy_bw: float  # bytes/s, read + written, a device copy
    mm_flops: float  # FLOP/s, cuBLAS 16-bit dense on a large GEMM
    l2_bw: float = 0.0  # bytes/s SMs read from L2; 0: 2.5·copy_bw
    kernel_overhead: float = 3.5e-6  # s per kernel in a compiled graph
    stream: float = 0.65  # fraction of copy_bw the template streams fp32 tiles at
    eff_16bit: float = 0.66  # template compute rate / cuBLAS, both operands 16-bit
    eff_cast_reg: float = (
        0.87  # one operand cast in registers (wgmma's register operand)
    )
    eff_cast_smem: float = (
        0.40  # a cast operand that must go back through shared memory
    )
    margin: float = 0.10  # the template must be predicted this much faster than stock
    margin_compute: float = 0.25  # ... where it is compute-bound (eff is least certain)
    margin_epilogue: float = (
        0.10  # ... where the template is chosen to fuse an Epilogue
    )
    # Predicted at least this much faster and bandwidth-bound, the template is chosen
    # as predicted; a smaller predicted win is measured on the device where the lowering
    # may (``Plan.measure``). Off ``CALIBRATED_CC`` every win is measured.
    certain: float = 1.5
    reread_cast: float = (
        1.5  # L2 bytes of an operand cast in the kernel count this many times
    )
    stream_gemv: float = (
        0.85  # fraction of copy_bw the M = 1 reduction kernel streams at
    )
    # A 16-bit weight stored as such (a frozen constant, ``Problem.weight16``) at decode
    # (M <= DECODE16_M_MAX): the rates at which cuBLAS, the thin-tile template (with at
    # least 1.5 tiles an SM; ``stream16_one_wave`` with fewer) and the gemv reduction
    # stream it, as fractions of copy_bw. 0 for cuBLAS leaves the 16-bit decode path off.
    stream_cublas16: float = 0.66
    stream_cublas16_small: float = (
        0.50  # ... a weight under SMALL_WEIGHT16 bytes; 0: as above
    )
    stream_cublas16_unaligned: float = (
        0.21  # ... M > 1 and output rows not 16-byte aligned (a 50257-word lm_head)
    )
    stream16: float = 0.72
    stream16_one_wave: float = 0.55
    stream_gemv16: float = 0.65
    stream_gemv16_long: float = 0.85  # ... rows of at least GEMV_LONG_K elements
    stream_gemv16_nk: float = 0.66  # ... the gemv template over a wide [N, K] one

    @property
    def l2_rate(self) -> float:
        return self.l2_bw or 2.5 * self.copy_bw


def device_spec(props: Any) -> DeviceSpec:
    """The spec of ``torch.cuda.get_device_properties`` (clocks in kHz, bus in bits)."""
    khz = 1e3
    return DeviceSpec(
        cc=props.major * 10 + props.minor,
        sm_count=props.multi_processor_count,
        smem_per_block=getattr(props, "shared_memory_per_block_optin", 0) or 48 * 1024,
        sm_clock=getattr(props, "clock_rate", 0) * khz,
        # double data rate, bus width in bits
        dram_bw=getattr(props, "memory_clock_rate", 0)
        * khz
        * 2
        * getattr(props, "memory_bus_width", 0)
        / 8,
    )


def device_model(spec: DeviceSpec) -> DeviceModel | None:
    """The model of a device from what it reports, or None (no bf16 tensor cores, or
    no peak reported)."""
    if spec.cc < MIN_CC or spec.dram_bw <= 0 or spec.sm_clock <= 0:
        return None
    # a newer architecture than the table knows: the newest one it does
    known = max(c for c in TENSOR_FLOPS_PER_SM_CLOCK if c <= spec.cc)
    rate = TENSOR_FLOPS_PER_SM_CLOCK.get(spec.cc, TENSOR_FLOPS_PER_SM_CLOCK[known])
    model = DeviceModel(
        cc=spec.cc,
        sm_count=spec.sm_count,
        smem_per_block=spec.smem_per_block,
        copy_bw=COPY_OF_PEAK * spec.dram_bw,
        mm_flops=MM_OF_PEAK * rate * spec.sm_count * spec.sm_clock,
    )
    if spec.cc != CALIBRATED_CC:
        # its pipelines and instructions differ: no predicted win is certain there
        model = dataclasses.replace(model, certain=math.inf)
    return model


@dataclasses.dataclass(frozen=True)
class Operand:
    """One matmul input as the cost model sees it."""

    numel: int
    fp32_source: (
        bool  # an fp32 tensor is cast to the compute dtype in front of the matmul
    )
    cast_shared: bool = False  # that cast has other users: it runs whatever we do

    @property
    def castable(self) -> bool:
        """The template may read the fp32 source and drop the cast kernel."""
        return self.fp32_source and not self.cast_shared


@dataclasses.dataclass(frozen=True)
class Epilogue:
    """A pointwise consumer of the matmul that the template would fuse (gelu(mm) + r).

    Stock runs it as a kernel of its own that reads the matmul's 16-bit output back.
    """

    read_bytes: int  # its other inputs (the residual), each read once
    write_bytes: int  # its output


@dataclasses.dataclass(frozen=True)
class Problem:
    op: str  # mm | addmm | bmm | baddbmm
    batch: int
    m: int
    n: int
    k: int
    a: Operand
    b: Operand
    bias: Operand | None = None
    epilogue: Epilogue | None = None
    # b is a 16-bit weight stored as such (a constant Inductor's freezing folded its
    # autocast cast into): the decode kernels may stream it in place of cuBLAS
    weight16: bool = False
    # b's K is contiguous (F.linear's weight): a few-row tile reads its rows coalesced
    b_k_contiguous: bool = False

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k

    @property
    def operands(self) -> list[Operand]:
        """The inputs the matmul reads: a, b and the bias if any."""
        return [self.a, self.b] + ([self.bias] if self.bias is not None else [])


@dataclasses.dataclass(frozen=True)
class TileConfig:
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    GROUP_M: int
    num_warps: int
    num_stages: int
    SWAP_AB: bool = False
    SPLIT_K: int = 1

    def smem_bytes(self, a_size: int, b_size: int) -> int:
        """Shared memory Triton allocates for this config, rounded up.

        num_stages - 1 tiles of each operand in flight, plus 16-bit copies of cast
        operands that wgmma reads from shared memory, plus 16 KB of headroom; the
        epilogue's layout change reuses the same memory (as Triton compiles for sm_90).
        """
        stage = (
            self.BLOCK_M * self.BLOCK_K * a_size + self.BLOCK_K * self.BLOCK_N * b_size
        )
        recast = 2 * self.BLOCK_K * max(self.BLOCK_M, self.BLOCK_N) * HALF
        return max(
            (self.num_stages - 1) * stage + recast + 16 * 1024,
            self.BLOCK_M * self.BLOCK_N * FP32,
        )

    def kwargs(self) -> dict[str, Any]:
        return dict(
            BLOCK_M=self.BLOCK_M,
            BLOCK_N=self.BLOCK_N,
            BLOCK_K=self.BLOCK_K,
            GROUP_M=self.GROUP_M,
            SWAP_AB=self.SWAP_AB,
            SPLIT_K=self.SPLIT_K,
            num_warps=self.num_warps,
            num_stages=self.num_stages,
        )

    def workspace_bytes(
        self, m: Any, n: Any, ceildiv: Callable[[Any, int], Any] | None = None
    ) -> Any:
        """Split-K's workspace: fp32 partials of every tile, then a semaphore per tile
        (``ceildiv`` of symbolic sizes: the caller's)."""
        if self.SPLIT_K == 1:
            return 0
        ceildiv = ceildiv or _ceildiv
        grid_m, grid_n = ceildiv(m, self.BLOCK_M), ceildiv(n, self.BLOCK_N)
        partials = self.SPLIT_K * grid_m * self.BLOCK_M * grid_n * self.BLOCK_N
        return (partials + grid_m * grid_n) * FP32

    def __str__(self) -> str:
        swap = " swap" if self.SWAP_AB else ""
        split = f" split{self.SPLIT_K}" if self.SPLIT_K > 1 else ""
        return (
            f"{self.BLOCK_M}x{self.BLOCK_N}x{self.BLOCK_K} g{self.GROUP_M} "
            f"w{self.num_warps} s{self.num_stages}{swap}{split}"
        )


def _ceildiv(a: int, b: int) -> int:
    return -(-a // b)


def _pow2_at_least(x: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, 1 << max(0, math.ceil(math.log2(max(1, x))))))


def _tiles(p: Problem, c: TileConfig) -> int:
    return p.batch * math.ceil(p.m / c.BLOCK_M) * math.ceil(p.n / c.BLOCK_N)


def _fits(c: TileConfig, a_size: int, b_size: int, dev: DeviceModel) -> bool:
    return c.smem_bytes(a_size, b_size) <= dev.smem_per_block


def _with_stages(
    c: TileConfig, a_size: int, b_size: int, dev: DeviceModel, most: int, least: int = 2
) -> TileConfig | None:
    """``c`` with the deepest pipeline in [least, most] that fits shared memory."""
    for stages in range(most, least - 1, -1):
        cand = dataclasses.replace(c, num_stages=stages)
        if _fits(cand, a_size, b_size, dev):
            return cand
    return None


@dataclasses.dataclass(frozen=True)
class Force:
    """What tests and measurements force (``config.tensorcore_mm_force_*``): the path,
    the operands (a, b) cast in the kernel, the tile config. None leaves it to the cost
    model."""

    path: Path | None = None
    fused: tuple[bool, bool] | None = None
    config: TileConfig | None = None


NO_FORCE = Force()


def select_configs(
    p: Problem,
    dev: DeviceModel,
    fused_a: bool,
    fused_b: bool,
    exhaustive: bool = False,
    force: Force = NO_FORCE,
) -> list[TileConfig]:
    """Tile configs for ``p``, best first; empty when none fits shared memory.

    Up to 256 rows the problem streams the weight (bandwidth-bound): one or two row
    tiles (one of 256 rows where its tiles fit one wave), and BLOCK_N as wide as
    possible while most SMs still get a tile, with deep pipelines. Beyond, it is
    compute-bound: 128-wide tiles and 8 warps, and when only B is cast in the kernel
    SWAP_AB makes B wgmma's register operand, with 256-row tiles from M = 1024 where
    three stages of them fit shared memory (256x128x64 w8 s3 swap: 208 KB; else
    128x128x64 s4 swap, which max-autotune adds after it).
    ``exhaustive`` (max-autotune) adds neighbouring configs.
    """
    a_size = FP32 if fused_a else HALF
    b_size = FP32 if fused_b else HALF
    if force.config is not None:
        return [force.config] if _fits(force.config, a_size, b_size, dev) else []
    m = max(1, p.m)
    if decode16(p, dev) and not fused_b:
        # a frozen 16-bit weight at decode: its own tiles (``_decode16_config``); the
        # thin-tile design below is max-autotune's alternative
        base = _decode16_config(p, dev)
        variants = [base]
        if exhaustive:
            variants.append(
                TileConfig(16, 64, 128, GROUP_M=8, num_warps=4, num_stages=6)
            )
        most = base.num_stages
    elif m <= 256:
        variants = _streaming_configs(p, dev, a_size, b_size, exhaustive)
        most = variants[0].num_stages
    else:
        variants = _large_m_configs(p, dev, fused_a, fused_b, exhaustive)
        most = 4
    out: list[TileConfig] = []
    for v in variants:
        fitted = _with_stages(v, a_size, b_size, dev, most=most)
        if fitted is not None and fitted not in out:
            out.append(fitted)
    if few_rows(p, dev, b_size):
        rows = [
            c
            for c in dict.fromkeys(_few_rows_configs(p, dev, exhaustive))
            if _fits(c, a_size, b_size, dev)
        ]
        # max-autotune keeps the 16-row tiles as alternatives
        out = rows + out if exhaustive else rows or out
    return out


def _row_tile(
    p: Problem, dev: DeviceModel, a_size: int, b_size: int
) -> tuple[int, int, int, int, bool]:
    """(BLOCK_M, row tiles, BLOCK_N, BLOCK_K, whether one row tile was planned) of a
    tile that streams the weight, up to 256 rows."""
    m = max(1, p.m)
    # an fp32 weight: one row tile up to 128 rows, so it is streamed once
    block_m = _pow2_at_least(m, 16, 128 if b_size == FP32 else 64) if m <= 128 else 128
    grid_m = math.ceil(m / block_m)
    # an fp32 weight streamed by thin row tiles: at most 32 columns a tile, more tiles
    widest = 32 if b_size == FP32 and block_m <= 32 else 128
    widths = [
        w
        for w in (128, 64, 32, 16)
        if w <= min(widest, max(16, _pow2_at_least(p.n, 16, 128)))
    ]
    block_n = widths[-1]
    # the widest tile that still gives every SM one; with one row tile, one that
    # gives 60% of them one (a second, mostly idle wave of narrower tiles costs more
    # than the SMs left idle), but for 128x64 tiles, slower than 128x32 ones
    one_row_tile = p.batch == 1 and grid_m == 1
    for w in widths:
        fill = 0.6 if one_row_tile and (block_m, w) != (128, 64) else 0.9
        if p.batch * grid_m * math.ceil(p.n / w) >= fill * dev.sm_count:
            block_n = w
            break
    # 512-byte fp32 rows per load while tiles are thin; deeper pipelines after
    thin = block_m <= 32 or (b_size == FP32 and block_n <= 32)
    block_k = 128 if max(a_size, b_size) == FP32 and thin else 64
    block_k = min(block_k, _pow2_at_least(p.k, 16, 128))
    # a weight too narrow to give every SM a 16-column tile and K too short to
    # split: two row tiles (the second reads the weight from the L2) where both fit
    # one wave
    if (
        p.batch == 1
        and b_size == FP32
        and grid_m == 1
        and block_m >= 64
        and 2 * math.ceil(p.n / 16) <= dev.sm_count
        and _split_k(p, dev, block_m, block_n, block_k) == 1
    ):
        block_m, grid_m = block_m // 2, 2
    return block_m, grid_m, block_n, block_k, one_row_tile


def _swap(
    p: Problem,
    dev: DeviceModel,
    a_size: int,
    b_size: int,
    block_m: int,
    block_n: int,
    one_row_tile: bool,
) -> tuple[bool, int]:
    """Whether a streaming tile takes the fp32 weight as wgmma's register operand (B
    swapped to A), and the split of K it was swapped for (1: none)."""
    m = max(1, p.m)
    # two 128-row tiles each cast the fp32 weight, or one 128x128 tile streams it:
    # as wgmma's register operand (B swapped to A) it skips the trip back through
    # shared memory
    swap = (
        b_size == FP32
        and a_size == HALF
        and (m > 128 or (one_row_tile and (block_m, block_n) == (128, 128)))
    )
    # one 128-row tile over a long K and a weight narrower than 64-column tiles can
    # fill the SMs with: narrower tiles re-read x's tile from the L2 (twice the
    # weight's bytes at 32 columns), so swapped 64-column tiles, K split to fill them
    swap_split = (
        _swap_split(p, dev)
        if b_size == FP32 and a_size == HALF and one_row_tile and block_m == 128
        else 1
    )
    return swap or swap_split > 1, swap_split


def _streaming_configs(
    p: Problem, dev: DeviceModel, a_size: int, b_size: int, exhaustive: bool
) -> list[TileConfig]:
    """Up to 256 rows: the tile that streams the weight (``_row_tile``), its warps,
    stages and K split, then with ``exhaustive`` its neighbours."""
    m = max(1, p.m)
    block_m, grid_m, block_n, block_k, one_row_tile = _row_tile(p, dev, a_size, b_size)
    swap, swap_split = _swap(p, dev, a_size, b_size, block_m, block_n, one_row_tile)
    if swap:
        block_n, block_k = max(64, block_n), min(block_k, 64)
    # past 128 rows, one 256x128 tile streams the weight once where two 128-row tiles
    # read it twice, if its tiles give most SMs one, fit one wave and get 3 stages
    tall = TileConfig(256, 128, 64, 8, num_warps=8, num_stages=3, SWAP_AB=True)
    if (
        swap
        and m > 128
        and p.batch == 1
        and 0.6 * dev.sm_count <= math.ceil(p.n / 128) <= dev.sm_count
        and _fits(tall, a_size, b_size, dev)
    ):
        block_m, block_n = 256, 128
    # 4 warps up to 128x64 tiles; 2 for a 16-row tile of at most 32 columns (too
    # small for a warp group's wgmma, it runs on mma.sync: fewer threads idle)
    warps = 8 if block_m * block_n > 128 * 64 else 4
    if block_m == 16 and block_n <= 32:
        warps = 2
    if swap:  # the deepest pipeline that fits at 64 columns; a fourth stage of
        # 128 columns was slower than three
        split, stages = swap_split, 6 if block_n == 64 else 3
    else:
        split = _split_k(p, dev, block_m, block_n, block_k)
        # thin tiles streaming an fp32 weight, several tiles an SM: 3 stages let
        # them share it; one tile an SM needs the deep pipeline
        tiles = p.batch * grid_m * math.ceil(p.n / block_n) * split
        shared_sm = b_size == FP32 and block_m <= 32 and tiles >= 2 * dev.sm_count
        stages = 3 if shared_sm else 6
    base = TileConfig(
        block_m,
        block_n,
        block_k,
        GROUP_M=8,
        num_warps=warps,
        num_stages=stages,
        SWAP_AB=swap,
        SPLIT_K=split,
    )
    if not exhaustive:
        return [base]
    return [base, *_streaming_neighbours(p, base)]


def _streaming_neighbours(p: Problem, base: TileConfig) -> list[TileConfig]:
    """max-autotune's alternatives to a streaming tile: half and twice as wide, half
    as deep, swapped the other way, split the other way, the other warp count."""
    block_n, block_k = base.BLOCK_N, base.BLOCK_K
    variants = [
        dataclasses.replace(base, BLOCK_N=max(16, block_n // 2)),
        dataclasses.replace(base, BLOCK_N=min(128, block_n * 2)),
        dataclasses.replace(base, BLOCK_K=max(32, block_k // 2)),
        dataclasses.replace(
            base, SWAP_AB=not base.SWAP_AB, SPLIT_K=1, BLOCK_N=max(64, block_n)
        ),
    ]
    if p.batch == 1:
        variants.append(dataclasses.replace(base, SPLIT_K=1 if base.SPLIT_K > 1 else 2))
    other_warps = 8 if base.num_warps == 4 else 4
    variants.append(dataclasses.replace(base, num_warps=other_warps))
    return variants


def _large_m_configs(
    p: Problem, dev: DeviceModel, fused_a: bool, fused_b: bool, exhaustive: bool
) -> list[TileConfig]:
    """Past 256 rows (compute-bound): 128-wide tiles and 8 warps, 256 columns for a
    wide 16-bit GEMM, and only the weight cast in the kernel swapped to wgmma's
    register operand, in 256-row tiles from M = 1024."""
    a_size = FP32 if fused_a else HALF
    b_size = FP32 if fused_b else HALF
    m = max(1, p.m)
    swap = fused_b and not fused_a
    wide = p.n >= 4096 and m >= 1024 and not (fused_a or fused_b)
    base = TileConfig(
        128,
        256 if wide else 128,
        64,
        GROUP_M=8,
        num_warps=8,
        num_stages=4,
        SWAP_AB=swap,
    )
    variants = [base]
    # only the weight cast in the kernel, as wgmma's register operand: 256-row tiles
    # halve the times its fp32 tiles are re-read, with at least 3 stages
    if swap and m >= 1024:
        tall = _with_stages(
            dataclasses.replace(base, BLOCK_M=256),
            a_size,
            b_size,
            dev,
            most=4,
            least=3,
        )
        if tall is not None:  # default mode yields one config
            variants = [tall] + variants if exhaustive else [tall]
    if exhaustive:
        variants += [
            dataclasses.replace(base, BLOCK_N=64, num_warps=4),
            dataclasses.replace(base, BLOCK_K=32),
            dataclasses.replace(base, SWAP_AB=not swap),
            dataclasses.replace(base, BLOCK_M=64, num_warps=4),
        ]
    return variants


# M up to which a tile of fewer rows than tl.dot takes (the products on the CUDA cores)
# streams an fp32 weight: each element is loaded once for every row, where a 16-row tile
# rounds it for wgmma through shared memory
FEW_ROWS_M_MAX = 4


def few_rows(p: Problem, dev: DeviceModel, b_size: int) -> bool:
    """2 rows, or up to 4 where 16-column tiles would leave SMs idle (with more, the
    tensor cores of the 16-row tiles keep up with the weight and the CUDA cores do not)."""
    if not (b_size == FP32 and p.b_k_contiguous and p.batch == 1):
        return False
    if not 2 <= p.m <= FEW_ROWS_M_MAX:
        return False
    return p.m <= 2 or math.ceil(p.n / 16) < 0.9 * dev.sm_count


def _few_rows_configs(
    p: Problem, dev: DeviceModel, exhaustive: bool
) -> list[TileConfig]:
    rows = 2 if p.m <= 2 else 4
    # under 4 programs an SM, each keeps more of the weight in flight
    deep = math.ceil(p.n / rows) < 4 * dev.sm_count
    block_k = _pow2_at_least(p.k, 16, 1024 if deep else 512)
    base = TileConfig(rows, rows, block_k, GROUP_M=8, num_warps=4, num_stages=3)
    if not exhaustive:
        return [base]
    return [
        base,
        dataclasses.replace(base, BLOCK_N=max(2, rows // 2)),
        dataclasses.replace(base, BLOCK_K=max(16, block_k // 2)),
        dataclasses.replace(base, num_warps=8),
    ]


def _decode16_config(p: Problem, dev: DeviceModel) -> TileConfig:
    """The tile of a frozen 16-bit weight at decode (``decode16``): 16 rows, 128 deep.

    128 columns a tile where that still gives most SMs one (a 32 KB slab of the weight
    a stage keeps one tile an SM streaming), else 64 columns with K split until there
    are about two tiles an SM.
    """
    block_k = min(128, _pow2_at_least(p.k, 16, 128))
    wide = math.ceil(p.n / 128) >= 0.75 * dev.sm_count
    block_n = 128 if wide else 64
    split = 1
    if not wide:
        tiles = math.ceil(p.n / block_n)
        k_steps = math.ceil(p.k / block_k)
        while split < 4 and tiles * split < 1.5 * dev.sm_count and k_steps >= 8 * split:
            split *= 2
    return TileConfig(
        16,
        block_n,
        block_k,
        GROUP_M=8,
        num_warps=4,
        num_stages=4 if wide else 3,
        SPLIT_K=split,
    )


MAX_SPLIT_K = 8
# bytes of fp32 partials, zeroed with the semaphores each call
MAX_SPLIT_PARTIALS = 8 << 20


def _split_k(
    p: Problem, dev: DeviceModel, block_m: int, block_n: int, block_k: int
) -> int:
    """Split K when the tiles alone would leave SMs idle (small M and N; not batched)."""
    tiles = p.batch * math.ceil(max(1, p.m) / block_m) * math.ceil(p.n / block_n)
    if p.batch != 1 or tiles >= 0.75 * dev.sm_count:
        return 1
    k_steps = math.ceil(p.k / block_k)
    split = 1
    # one wave of programs (a second wave costs more than the split saves), and at
    # least 8 steps of K a split (fewer do not pay for zeroing the workspace)
    while (
        split < MAX_SPLIT_K
        and tiles * split * 2 <= dev.sm_count
        and k_steps >= 8 * split * 2
    ):
        split *= 2
    cfg = TileConfig(block_m, block_n, block_k, 8, 4, 2, SPLIT_K=split)
    while split > 1 and cfg.workspace_bytes(p.m, p.n) > MAX_SPLIT_PARTIALS:
        split //= 2
        cfg = dataclasses.replace(cfg, SPLIT_K=split)
    return split


# K from which swapped 64-column tiles with K split pay for the partials and the
# workspace's zeroing (at K = 4096 the unsplit 32-column tiles ran faster)
SWAP_SPLIT_K_MIN = 5120
SWAP_SPLIT_MAX = 4  # 6 or 8 ways ran slower than stock
SWAP_SPLIT_FILL = 0.55


def _swap_split(p: Problem, dev: DeviceModel) -> int:
    """The split of K for one row tile of swapped 128x64 tiles (``select_configs``): of
    2 to ``SWAP_SPLIT_MAX`` ways, the one whose waves of programs leave the fewest SMs
    idle, if that fills more than the tiles alone and at least ``SWAP_SPLIT_FILL``;
    else 1."""
    tiles = math.ceil(p.n / 64)
    if p.batch != 1 or p.k < SWAP_SPLIT_K_MIN or tiles > dev.sm_count:
        return 1

    def fill(split: int) -> float:
        programs = tiles * split
        return programs / (math.ceil(programs / dev.sm_count) * dev.sm_count)

    split = max(range(2, SWAP_SPLIT_MAX + 1), key=lambda s: (fill(s), -s))
    cfg = TileConfig(128, 64, 64, 8, 4, 2, SWAP_AB=True, SPLIT_K=split)
    if (
        fill(split) <= fill(1)
        or fill(split) < SWAP_SPLIT_FILL
        or cfg.workspace_bytes(p.m, p.n) > MAX_SPLIT_PARTIALS
    ):
        return 1
    return split


@dataclasses.dataclass(frozen=True)
class Prediction:
    label: str  # "stock" or "template[a,b]" (the operands cast in the kernel)
    seconds: float
    fused_a: bool = False
    fused_b: bool = False
    config: TileConfig | None = None


class StockReason(enum.Enum):
    """Why a plan keeps the stock path, where the lowering counts the reasons apart."""

    SMEM = "smem"  # no tile config fits shared memory
    REREAD = "reread"  # tiles re-read the operands (``REREAD``)
    DYNAMIC_M = "dynamic_m_range"  # no config holds up over a symbolic M's range


class Path(str, enum.Enum):
    """How a plan runs the matmul."""

    STOCK = "stock"  # Inductor's lowering: the operands' casts, then the 16-bit GEMM
    TEMPLATE = "template"  # the template, casting the fused operands in the kernel
    GEMV = "gemv"  # one row: a reduction over K reading each operand once


@dataclasses.dataclass(frozen=True)
class Plan:
    path: Path
    reason: str
    fused_a: bool = False
    fused_b: bool = False
    fused_bias: bool = False
    config: TileConfig | None = None
    predictions: tuple[Prediction, ...] = ()
    # uncertain: the template (``config``, operands as above) and the stock path are
    # timed on the device and the faster taken; ``path`` is the prediction's choice
    measure: bool = False
    stock_reason: StockReason | None = None

    def describe(self) -> str:
        rows = ", ".join(f"{q.label}={q.seconds * 1e6:.1f}us" for q in self.predictions)
        cfg = f" config {self.config}" if self.config else ""
        how = ", to measure" if self.measure else ""
        return f"{self.path.value} ({self.reason}{how}){cfg}; predicted {rows}"


def cast_seconds(op: Operand, dev: DeviceModel) -> float:
    """A separate fp32 -> 16-bit cast kernel of ``op``."""
    return op.numel * (FP32 + HALF) / dev.copy_bw + dev.kernel_overhead


def _template_terms(
    p: Problem, dev: DeviceModel, fused_a: bool, fused_b: bool, config: TileConfig
) -> dict[str, float]:
    """The terms of ``template(S)`` in the module docstring, in seconds."""
    casts = sum(
        cast_seconds(op, dev)
        for op, fused in ((p.a, fused_a), (p.b, fused_b))
        if op.castable and not fused
    )
    grid_m = math.ceil(p.m / config.BLOCK_M)
    grid_n = math.ceil(p.n / config.BLOCK_N)
    out_bytes = p.batch * p.m * p.n * HALF
    dram = l2 = out_bytes
    for op, fused, reads in ((p.a, fused_a, grid_n), (p.b, fused_b, grid_m)):
        size = FP32 if fused else HALF
        dram += op.numel * size
        l2 += op.numel * size * reads * (dev.reread_cast if fused else 1.0)
    if p.bias is not None:
        dram += p.bias.numel * (FP32 if p.bias.castable else HALF)
    epilogue = 0.0
    if p.epilogue is not None:
        # the epilogue's output replaces the matmul's, written with its residual read
        # after the main loop: at one block an SM that traffic is not hidden
        dram -= out_bytes
        l2 -= out_bytes
        epilogue = (p.epilogue.read_bytes + p.epilogue.write_bytes) / dev.copy_bw
    overhead = dev.kernel_overhead
    ws = config.workspace_bytes(p.m, p.n)
    if ws:  # partials written and read once; the workspace zeroed by one more launch
        dram += 2 * ws
        l2 += 2 * ws
        overhead += dev.kernel_overhead + ws / dev.copy_bw
    util = min(1.0, _tiles(p, config) * config.SPLIT_K / (0.75 * dev.sm_count))
    if fused_a and fused_b:
        eff = dev.eff_cast_smem
    elif fused_a or fused_b:
        # the register operand is A, or B when swapped
        in_regs = (fused_a and not config.SWAP_AB) or (fused_b and config.SWAP_AB)
        eff = dev.eff_cast_reg if in_regs else dev.eff_cast_smem
    else:
        eff = dev.eff_16bit
    stream = dev.stream
    if decode16(p, dev) and not fused_b:
        # one thin tile an SM streams its slab of the weight alone, slower than several;
        # a 128-wide tile an SM streams as fast as several (``_decode16_config``)
        programs = _tiles(p, config) * config.SPLIT_K
        many = programs >= 1.5 * dev.sm_count or (
            config.BLOCK_N >= 128 and programs >= 0.75 * dev.sm_count
        )
        stream = dev.stream16 if many else dev.stream16_one_wave
    return dict(
        casts=casts,
        compute=p.flops / (dev.mm_flops * eff),
        dram=dram / (dev.copy_bw * stream * util),
        l2=l2 / dev.l2_rate,
        epilogue=epilogue,
        overhead=overhead,
    )


def _epilogue_kernel_time(p: Problem, dev: DeviceModel) -> float:
    """Stock's separate epilogue kernel: the matmul's output read back, residual, output."""
    if p.epilogue is None:
        return 0.0
    e = p.epilogue
    moved = p.batch * p.m * p.n * HALF + e.read_bytes + e.write_bytes
    return moved / dev.copy_bw + dev.kernel_overhead


def predict(
    p: Problem,
    dev: DeviceModel,
    fused_a: bool | None = None,
    fused_b: bool | None = None,
    config: TileConfig | None = None,
) -> float:
    """Predicted seconds: the stock path when ``fused_a`` is None, else the template."""
    if fused_a is None:
        ops = p.operands
        casts = sum(cast_seconds(op, dev) for op in ops if op.castable)
        bytes16 = sum(op.numel for op in ops) * HALF + p.batch * p.m * p.n * HALF
        stream = 1.0
        if decode16(p, dev):
            # cuBLAS streams small 16-bit weights at decode slower than large ones
            small = p.b.numel * HALF < SMALL_WEIGHT16 and dev.stream_cublas16_small > 0
            stream = dev.stream_cublas16_small if small else dev.stream_cublas16
            if p.m > 1 and p.n % 8:
                # unaligned rows: cuBLAS takes kernels without vector loads
                stream = dev.stream_cublas16_unaligned
        return (
            casts
            + max(p.flops / dev.mm_flops, bytes16 / (dev.copy_bw * stream))
            + dev.kernel_overhead
            + _epilogue_kernel_time(p, dev)
        )
    assert config is not None and fused_b is not None
    t = _template_terms(p, dev, fused_a, fused_b, config)
    return (
        t["casts"]
        + max(t["compute"], t["dram"], t["l2"])
        + t["epilogue"]
        + t["overhead"]
    )


def predict_gemv(p: Problem, dev: DeviceModel) -> float:
    """M = 1 as a reduction over K (``gemv``): every operand read once, as it is stored."""
    ops = p.operands
    casts = sum(
        cast_seconds(op, dev) for op in ops if op.fp32_source and op.cast_shared
    )
    read = sum(op.numel * (FP32 if op.castable else HALF) for op in ops)
    stream = dev.stream_gemv
    if decode16(p, dev) and p.b_k_contiguous and gemv16_nk(p.k, p.n, dev):
        stream = dev.stream_gemv16_nk
    elif decode16(p, dev):
        # a program a row (Inductor's INNER reduction config): short bf16 rows stream less
        stream = dev.stream_gemv16_long if p.k >= GEMV_LONG_K else dev.stream_gemv16
    return casts + (read + p.n * HALF) / (dev.copy_bw * stream) + dev.kernel_overhead


@dataclasses.dataclass(frozen=True)
class GemvConfig:
    """A config of the gemv template (one row times a [K, N] weight, or an [N, K] one
    read transposed): programs of BLOCK_N columns and ROWS rows, a [BLOCK_K, BLOCK_N]
    slab of the weight a step."""

    BLOCK_N: int
    BLOCK_K: int
    ROWS: int  # a multiple of BLOCK_K
    num_warps: int
    num_stages: int = 1


# 16 KB of fp32 weight in flight a program, one load a step (Inductor's outer-reduction
# config holds 2 KB, too little to stream at the copy rate); ROWS per shape, gemv_rows
GEMV_CONFIG = GemvConfig(BLOCK_N=32, BLOCK_K=128, ROWS=128, num_warps=4)
# max-autotune's alternatives, within 5-10% of it where measured
GEMV_NEIGHBOURS = (
    GemvConfig(BLOCK_N=32, BLOCK_K=64, ROWS=128, num_warps=4),
    GemvConfig(BLOCK_N=16, BLOCK_K=64, ROWS=128, num_warps=4),
)
# the deepest splits first: fewer partial sums, as long as the programs fill the SMs
GEMV_ROWS = (512, 256, 128)
GEMV_PROGRAMS_PER_SM = 3
# an [N, K] fp32 weight (F.linear's, K contiguous) where Inductor's inner reduction
# leaves lanes idle (``gemv_nk``): a program sums two whole rows of it, 512 deep a step
GEMV_NK_CONFIG = GemvConfig(BLOCK_N=2, BLOCK_K=512, ROWS=512, num_warps=4, num_stages=2)
GEMV_NK_NEIGHBOURS = (
    GemvConfig(BLOCK_N=4, BLOCK_K=256, ROWS=512, num_warps=4, num_stages=2),
    GemvConfig(BLOCK_N=8, BLOCK_K=128, ROWS=512, num_warps=4, num_stages=2),
)


# the share of its lanes Inductor's inner reduction may leave idle on an [N, K] weight
# before the gemv template takes it, and the columns an SM it then needs (two a program):
# with 37.5% idle (K = 1280, 2560) an lm_head ran faster through the template; with
# 22-25% idle (K = 768, 1536, 1600, 3072), or a narrower weight, the reduction kept up
GEMV_NK_IDLE = 0.3
GEMV_NK_COLUMNS_PER_SM = 48


def gemv_nk(k: int, n: int, dev: DeviceModel) -> bool:
    """Whether one row over an [N, K] fp32 weight takes the gemv template: where
    Inductor's reduction (a row a program, looping over K in blocks of 2048 past 1024)
    would leave more than ``GEMV_NK_IDLE`` of its lanes past K (K = 1280: 768 of
    2048), over a weight wide enough for many programs an SM (an lm_head)."""
    block = _pow2_at_least(k, 1, 2048)
    idle = 1 - k / (_ceildiv(k, block) * block)
    return (
        k > 1024 and idle > GEMV_NK_IDLE and n >= GEMV_NK_COLUMNS_PER_SM * dev.sm_count
    )


# A 16-bit [N, K] weight (frozen, or a kept cast): the gemv template streams it as
# cuBLAS does, or faster, and Inductor's inner reduction slower, where the weight is
# wide enough for the template's programs to fill the SMs (at 2K columns and fewer the
# reduction kept up). A program sums 8 rows, 512 deep a step (256 where that divides a
# short K). Measured slower: rows of 256-deep steps past 4K, and 1024-deep steps where
# x is 16-bit (its load's layout slows the weight's).
GEMV16_NK_COLUMNS_PER_SM = 24
GEMV16_NK_CONFIG = GemvConfig(BLOCK_N=8, BLOCK_K=512, ROWS=512, num_warps=4)
GEMV16_NK_SHORT_K = 4096
GEMV16_NK_NEIGHBOURS = (
    GemvConfig(BLOCK_N=16, BLOCK_K=256, ROWS=512, num_warps=4),
    GemvConfig(BLOCK_N=8, BLOCK_K=512, ROWS=512, num_warps=8),
)


def gemv16_nk(k: int, n: int, dev: DeviceModel) -> bool:
    """Whether one row over a 16-bit [N, K] weight takes the gemv template."""
    steps = k % 512 == 0 or (k % 256 == 0 and k <= GEMV16_NK_SHORT_K)
    return steps and n >= GEMV16_NK_COLUMNS_PER_SM * dev.sm_count


def gemv16_nk_configs(k: int, autotune: bool = False) -> list[GemvConfig]:
    """The gemv template's configs over a 16-bit [N, K] weight: one split, and under
    max-autotune its neighbours."""
    configs = [GEMV16_NK_CONFIG, *(GEMV16_NK_NEIGHBOURS if autotune else ())]
    if k % 512:  # a short K of 256-deep steps
        configs = [dataclasses.replace(GEMV16_NK_CONFIG, BLOCK_K=256)]
    return [dataclasses.replace(c, ROWS=k) for c in configs]


# A small 16-bit [K, N] weight (GPT-2's Conv1D, frozen or a kept cast): the gemv template
# streams it within ~10% of cuBLAS either way, and its launch costs the host less than
# cuBLAS's call (an addmm), which a decode step waits on. A program sums 32 columns, 256
# deep a step; K is split in 512 rows past 2K, else where the columns leave fewer than
# half the SMs a program. Larger weights keep cuBLAS, 10% faster there.
GEMV16_KN_CONFIG = GemvConfig(BLOCK_N=32, BLOCK_K=256, ROWS=256, num_warps=4)
GEMV16_KN_NEIGHBOURS = (
    GemvConfig(BLOCK_N=32, BLOCK_K=128, ROWS=256, num_warps=4),
    GemvConfig(BLOCK_N=64, BLOCK_K=128, ROWS=256, num_warps=4),
)
GEMV16_KN_SPLIT_K = 2048


def gemv16_kn(p: Problem) -> bool:
    """Whether one row over a 16-bit [K, N] weight takes the gemv template."""
    return not p.b_k_contiguous and p.b.numel * HALF < SMALL_WEIGHT16


def gemv16_kn_configs(
    k: int, n: int, dev: DeviceModel, autotune: bool = False
) -> list[GemvConfig]:
    """The gemv template's configs over a small 16-bit [K, N] weight, which split K alike."""
    step = GEMV16_KN_CONFIG.BLOCK_K
    if k > GEMV16_KN_SPLIT_K:
        rows = 2 * step
    elif _ceildiv(n, GEMV16_KN_CONFIG.BLOCK_N) * 2 >= dev.sm_count:
        rows = _ceildiv(k, step) * step
    else:
        rows = step
    configs = (GEMV16_KN_CONFIG, *(GEMV16_KN_NEIGHBOURS if autotune else ()))
    return [dataclasses.replace(c, ROWS=rows) for c in configs]


def gemv_rows(k: int, n: int, dev: DeviceModel) -> int:
    """Rows a program of the gemv template sums over a [K, N] weight: the most that
    leave GEMV_PROGRAMS_PER_SM programs an SM, so that fewer partial sums are written
    and added while the programs still fill the device."""
    columns = _ceildiv(n, GEMV_CONFIG.BLOCK_N)
    for rows in GEMV_ROWS:
        if columns * _ceildiv(k, rows) >= GEMV_PROGRAMS_PER_SM * dev.sm_count:
            return rows
    return GEMV_ROWS[-1]


def gemv_configs(
    k: int, n: int, dev: DeviceModel, k_contiguous: bool = False, autotune: bool = False
) -> list[GemvConfig]:
    """The gemv template's configs (its neighbours too under max-autotune), which split
    K alike (``gemv_rows``). Over a K-contiguous weight ROWS spans K: one split, no
    partial sums to add."""
    if not k_contiguous:
        rows = gemv_rows(k, n, dev)
        configs = (GEMV_CONFIG, *(GEMV_NEIGHBOURS if autotune else ()))
        return [dataclasses.replace(c, ROWS=rows) for c in configs]
    configs = (GEMV_NK_CONFIG, *(GEMV_NK_NEIGHBOURS if autotune else ()))
    step = max(c.BLOCK_K for c in (GEMV_NK_CONFIG, *GEMV_NK_NEIGHBOURS))
    return [dataclasses.replace(c, ROWS=_ceildiv(k, step) * step) for c in configs]


def gemv_template_configs(
    k: int,
    n: int,
    dev: DeviceModel,
    weight16: bool,
    k_contiguous: bool,
    autotune: bool = False,
) -> list[GemvConfig]:
    """The gemv template's configs for one row over a K x N weight read in 16 bits or
    fp32, K contiguous ([N, K], F.linear's) or not; [] where Inductor's inner reduction
    serves: a narrow 16-bit [N, K] weight, or an fp32 one whose rows leave its lanes busy."""
    if weight16 and not k_contiguous:
        return gemv16_kn_configs(k, n, dev, autotune)
    if weight16 and gemv16_nk(k, n, dev):
        return gemv16_nk_configs(k, autotune)
    if not k_contiguous or (not weight16 and gemv_nk(k, n, dev)):
        return gemv_configs(k, n, dev, k_contiguous, autotune)
    return []


# M up to which a 16-bit weight (``Problem.weight16``) may take the decode kernels
DECODE16_M_MAX = 16
GEMV_LONG_K = 8192
SMALL_WEIGHT16 = 64 << 20  # bytes


def decode16(p: Problem, dev: DeviceModel) -> bool:
    """A 16-bit stored weight streamed at decode, where the device has cuBLAS's rate.

    cuBLAS reads such a weight (Inductor's freezing makes one of every fp32 parameter
    under autocast) well below the copy rate at M <= 16; the gemv reduction (M=1) and the
    thin-tile template
    stream it with no cast to fuse. Not batched and nothing to fuse after it.
    """
    return (
        p.weight16
        and dev.stream_cublas16 > 0
        and p.batch == 1
        and p.m <= DECODE16_M_MAX
        and p.epilogue is None
    )


def gemv_applies(p: Problem) -> bool:
    """One row, not batched, nothing to fuse after it: a dot per column beats tiles."""
    return p.m == 1 and p.batch == 1 and p.epilogue is None


def compute_bound(
    p: Problem, dev: DeviceModel, fused_a: bool, fused_b: bool, config: TileConfig
) -> bool:
    t = _template_terms(p, dev, fused_a, fused_b, config)
    return t["compute"] >= max(t["dram"], t["l2"])


REREAD = "tiles re-read the operands"


def plan(
    p: Problem, dev: DeviceModel, allow_gemv: bool = True, force: Force = NO_FORCE
) -> Plan:
    """The fastest predicted way to run ``p``: the stock path, the template or (one
    row, ``allow_gemv``) the gemv reduction."""
    stock = Prediction("stock", predict(p, dev))
    options = _cast_options(p, dev)
    if force.path is Path.STOCK:
        return Plan(Path.STOCK, "forced", predictions=(stock,))
    gemv = (
        Prediction("gemv", predict_gemv(p, dev))
        if allow_gemv and gemv_applies(p)
        else None
    )
    if force.path is Path.GEMV and gemv is not None:
        return Plan(Path.GEMV, "forced", predictions=(stock, gemv))
    if force.fused is not None:
        options = [f for f in options if f == tuple(force.fused)]
    if not options:
        return Plan(
            Path.STOCK, "no operand to cast in the kernel", predictions=(stock,)
        )
    preds = (stock, *_template_predictions(p, dev, options, force))
    if len(preds) == 1:
        return Plan(
            Path.STOCK,
            "smem: no tile config fits shared memory",
            predictions=preds,
            stock_reason=StockReason.SMEM,
        )
    best = _best_template(p, preds[1:])
    if gemv is not None and force.path is not Path.TEMPLATE:
        gemv_plan = _gemv_plan(p, dev, gemv, stock, best, preds)
        if gemv_plan is not None:
            return gemv_plan
    fused_bias = p.bias is not None and p.bias.castable
    if force.path is Path.TEMPLATE:
        return Plan(
            Path.TEMPLATE,
            "forced",
            best.fused_a,
            best.fused_b,
            fused_bias,
            best.config,
            preds,
        )
    return _predicted_plan(p, dev, stock, best, fused_bias, preds)


def _cast_options(p: Problem, dev: DeviceModel) -> list[tuple[bool, bool]]:
    """The (a, b) cast in the kernel of each template variant worth predicting."""
    options = []
    for fused_a in (True, False) if p.a.castable else (False,):
        for fused_b in (True, False) if p.b.castable else (False,):
            # with no cast in the kernel the template pays only by fusing an epilogue,
            # or by streaming a 16-bit weight faster than cuBLAS at decode
            if fused_a or fused_b or p.epilogue is not None or decode16(p, dev):
                options.append((fused_a, fused_b))
    return options


def _template_predictions(
    p: Problem, dev: DeviceModel, options: list[tuple[bool, bool]], force: Force
) -> list[Prediction]:
    """The template's prediction at its first config, for each option that has a
    config fitting shared memory."""
    preds = []
    for fused_a, fused_b in options:
        configs = select_configs(p, dev, fused_a, fused_b, force=force)
        if not configs:
            continue
        cfg = configs[0]
        label = (
            "template["
            + (
                ",".join(n for n, f in (("a", fused_a), ("b", fused_b)) if f)
                or "16-bit"
            )
            + "]"
        )
        preds.append(
            Prediction(
                label, predict(p, dev, fused_a, fused_b, cfg), fused_a, fused_b, cfg
            )
        )
    return preds


def _best_template(p: Problem, templates: tuple[Prediction, ...]) -> Prediction:
    """The fastest predicted template variant, among those the model underrates
    where there are any."""
    # one swapped row tile, where the model cannot tell it from both operands cast
    swapped = [q for q in templates if q.config.SWAP_AB and p.m <= q.config.BLOCK_M]
    # a row tile of 64 or more rows that casts x in the kernel loads x's fp32 tile, as
    # large as the weight's and re-read by every column tile, at each stage: cast apart,
    # a weight of 2048 or more columns or rows streams through a deeper pipeline, which
    # the model does not see (a smaller weight, or one narrower than x is tall, keeps x
    # in the kernel)
    apart = [
        q
        for q in templates
        if q.fused_b
        and not q.fused_a
        and q.config.BLOCK_M >= 64
        and p.m <= min(256, p.n)
        and max(p.n, p.k) >= 2048
    ]
    return min(swapped or apart or templates, key=lambda q: q.seconds)


def _gemv_plan(
    p: Problem,
    dev: DeviceModel,
    gemv: Prediction,
    stock: Prediction,
    best: Prediction,
    preds: tuple[Prediction, ...],
) -> Plan | None:
    """The plan where the gemv decides it; None where the template's tiles may still
    win."""
    if decode16(p, dev):
        # one row of a frozen weight: the gemv where it streams no slower than cuBLAS (one
        # kernel for x's cast and cuBLAS), never a 16-row tile; over a large weight
        # stored [K, N] cuBLAS is faster (``gemv16_kn``)
        kn_ok = p.b_k_contiguous or gemv16_kn(p)
        if kn_ok and gemv.seconds <= stock.seconds:
            return Plan(
                Path.GEMV, "predicted no slower, one kernel", predictions=(*preds, gemv)
            )
        return Plan(Path.STOCK, "cost model: no clear win", predictions=(*preds, gemv))
    clear = gemv.seconds <= stock.seconds * (1.0 - dev.margin)
    if gemv.seconds < best.seconds and clear:
        return Plan(Path.GEMV, "predicted faster", predictions=(*preds, gemv))
    return None


def _predicted_plan(
    p: Problem,
    dev: DeviceModel,
    stock: Prediction,
    best: Prediction,
    fused_bias: bool,
    preds: tuple[Prediction, ...],
) -> Plan:
    """The template where ``best`` is predicted faster than stock by the margin its
    kind needs; else stock, keeping ``best`` where max-autotune or a timing may still
    choose it."""
    assert best.config is not None
    bound = compute_bound(p, dev, best.fused_a, best.fused_b, best.config)
    if p.epilogue is not None:
        margin = dev.margin_epilogue
    elif bound:
        margin = dev.margin_compute
    else:
        margin = dev.margin
    speedup = stock.seconds / best.seconds
    # Where tiles re-read the operands (more than two row tiles) the main loop's rate and
    # the re-reads decide, which neither the model nor a timing of the kernel alone
    # predicts (templates predicted and timed faster ran slower than stock in models).
    # Stock, which max-autotune may still benchmark against the template (``config``).
    if p.epilogue is None and math.ceil(p.m / best.config.BLOCK_M) > 2:
        return Plan(
            Path.STOCK,
            REREAD,
            best.fused_a,
            best.fused_b,
            fused_bias,
            best.config,
            preds,
            stock_reason=StockReason.REREAD,
        )
    # Sure of a large win where the weight is streamed once; a smaller one, or a
    # compute-bound main loop, is measured on the device where the lowering can. An
    # epilogue's saving is not in the template's timing alone: predicted only.
    measure = p.epilogue is None and speedup >= 1.0 and (bound or speedup < dev.certain)
    if best.seconds <= stock.seconds * (1.0 - margin):
        return Plan(
            Path.TEMPLATE,
            "predicted faster",
            best.fused_a,
            best.fused_b,
            fused_bias,
            best.config,
            preds,
            measure,
        )
    if measure:
        return Plan(
            Path.STOCK,
            "cost model: no clear win",
            best.fused_a,
            best.fused_b,
            fused_bias,
            best.config,
            preds,
            measure,
        )
    return Plan(Path.STOCK, "cost model: no clear win", predictions=preds)


def at_m(p: Problem, m: int) -> Problem:
    """``p`` with ``m`` rows."""
    scale = m / max(1, p.m)
    q = dataclasses.replace(
        p, m=m, a=dataclasses.replace(p.a, numel=int(p.a.numel * scale))
    )
    # its tensors grow with M (a broadcast residual is overcounted)
    if p.epilogue is not None:
        q = dataclasses.replace(
            q,
            epilogue=Epilogue(
                int(p.epilogue.read_bytes * scale), int(p.epilogue.write_bytes * scale)
            ),
        )
    return q


def plan_dynamic_m(
    p: Problem,
    dev: DeviceModel,
    m_max: int,
    tolerance: float = 1.25,
    force: Force = NO_FORCE,
) -> Plan:
    """The plan for a symbolic M: one kernel serves every M up to ``m_max``.

    Among the configs for the size hint (``p.m``) and for ``m_max``, the one whose
    worse end is best: at the hint the template must win by the usual margin, at
    ``m_max`` it may be at most ``tolerance`` times slower than the stock path
    (a decode-shaped tile running a prefill would be far slower: then stock).
    """
    # a reduction over K for one row would run every larger M row by row: never here
    base = plan(p, dev, allow_gemv=False, force=force)
    if base.path is not Path.TEMPLATE or m_max <= p.m or force.path or force.config:
        return base
    # every operand set the hint considered: casting x in the kernel pays at small M only
    options = dict.fromkeys(
        (q.fused_a, q.fused_b) for q in base.predictions if q.label != "stock"
    )
    best, best_worst = range_config(p, dev, m_max, list(options), tolerance)
    if best is None or best_worst > 1.0:
        return Plan(
            Path.STOCK,
            f"dynamic M up to {m_max}: no config holds up",
            predictions=base.predictions,
            stock_reason=StockReason.DYNAMIC_M,
        )
    fa, fb, cfg = best
    return dataclasses.replace(
        base, fused_a=fa, fused_b=fb, config=cfg, reason=f"dynamic M up to {m_max}"
    )


def range_config(
    p: Problem,
    dev: DeviceModel,
    m_max: int,
    options: list[tuple[bool, bool]],
    tolerance: float,
) -> tuple[tuple[bool, bool, TileConfig] | None, float]:
    """The operands cast in the kernel and the config, among ``options`` and the configs
    for ``p.m`` and for ``m_max``, whose worse end is best, and that end's ratio: its time
    at ``p.m`` over the stock path's less the usual margin, at ``m_max`` over
    ``tolerance`` times the stock path's."""
    big = at_m(p, m_max)
    stock_small, stock_big = predict(p, dev), predict(big, dev)
    best, best_worst = None, math.inf
    for fa, fb in options:
        for cfg in select_configs(p, dev, fa, fb) + select_configs(big, dev, fa, fb):
            if cfg.BLOCK_M < 16 and m_max > cfg.BLOCK_M:
                continue  # more rows: each few-row tile would read the weight again
            small = predict(p, dev, fa, fb, cfg) / (stock_small * (1.0 - dev.margin))
            large = predict(big, dev, fa, fb, cfg) / (stock_big * tolerance)
            if max(small, large) < best_worst:
                best, best_worst = (fa, fb, cfg), max(small, large)
    return best, best_worst


# where a symbolic M's range may split, the range up to a split getting a kernel of its
# own, picked at run time
M_SPLITS = (16, 64, 256)


def dynamic_m_splits(
    p: Problem, dev: DeviceModel, m_min: int, m_max: int, force: Force = NO_FORCE
) -> list[tuple[int, Plan]]:
    """Each split S of ``M_SPLITS`` (``m_min <= S < m_max``) for which one config wins at
    every M from ``m_min`` to S (by the usual margin at ``m_min``, outright at S), with
    that plan, smallest first.

    A decode batch that varies keeps a kernel tuned to its range (``dynamic_m_kernels``).
    """
    if force.path or force.config:
        return []
    low = at_m(p, max(1, m_min))
    plans = [
        (split, plan_dynamic_m(low, dev, split, tolerance=1.0, force=force))
        for split in M_SPLITS
        if low.m <= split < m_max
    ]
    return [(split, q) for split, q in plans if q.path is Path.TEMPLATE]


def dynamic_m_kernels(
    p: Problem, dev: DeviceModel, m_min: int, m_max: int, force: Force = NO_FORCE
) -> list[tuple[int, Plan]]:
    """The kernels a symbolic M picks among at run time, each with the largest M it
    serves (the last ``m_max``), smallest first; [] where no split lies at or above the
    hint (``p.m``): then ``plan_dynamic_m`` serves the whole range, or stock.

    Every kernel reads the same operands (the hint's split casts them), since one graph
    holds them all. Above the largest split the template serves too, with the config
    planned for ``m_max``: a kernel cannot hand a run to the stock path.
    """
    own = next(
        (q for s, q in dynamic_m_splits(p, dev, m_min, m_max, force) if s >= p.m), None
    )
    if own is None:
        return []
    # x cast apart where casting it in the kernel would make a prefill-sized M slower
    # than stock by more than the tolerance; failing both, the nearer to stock
    options = [
        _dispatch_ranges(p, dev, m_min, m_max, own, fused)
        for fused in dict.fromkeys([(own.fused_a, own.fused_b), (False, own.fused_b)])
    ]
    options = [o for o in options if o[0]]
    if not options:
        return []
    near = [o for o in options if o[1] <= DISPATCH_TOLERANCE]
    ranges = (near or sorted(options, key=lambda o: o[1]))[0][0]
    if len({q.config.SPLIT_K > 1 for _, q in ranges}) > 1:
        # the kernels share the call's arguments: a split-K workspace for all or none
        ranges = [
            (
                bound,
                dataclasses.replace(q, config=dataclasses.replace(q.config, SPLIT_K=1)),
            )
            for bound, q in ranges
        ]
    kernels: list[tuple[int, Plan]] = []
    for bound, q in ranges:
        if kernels and kernels[-1][1].config == q.config:
            q = kernels.pop()[1]  # one kernel for both ranges
        kernels.append((bound, q))
    return kernels


# how much slower than the stock path a kernel above the splits may be predicted at
# either end of its range, since a kernel cannot hand a prefill-sized M to cuBLAS; the
# fused operands that keep within it are preferred
DISPATCH_TOLERANCE = 1.3
TOP_SPLITS = (256, 1024, 4096)


def _dispatch_ranges(
    p: Problem,
    dev: DeviceModel,
    m_min: int,
    m_max: int,
    own: Plan,
    fused: tuple[bool, bool],
) -> tuple[list[tuple[int, Plan]], float]:
    """The splits' plans with the operands ``fused`` cast in the kernel, then ranges
    above them to ``m_max``; and the worst predicted ratio to stock's time of those
    ranges' kernels at their ends ([] where no config serves one)."""
    splits = dynamic_m_splits(p, dev, m_min, m_max, Force(fused=fused))
    if not splits or splits[-1][0] >= m_max:
        return [], math.inf
    ranges, worst_of_all = list(splits), 0.0
    # above the splits, a kernel per range of 4x, each config near stock at both ends
    bounds = [b for b in TOP_SPLITS if splits[-1][0] < b < m_max] + [m_max]
    for upper in bounds:
        lower = ranges[-1][0] + 1
        best, worst = range_config(at_m(p, lower), dev, upper, [fused], tolerance=1.0)
        if best is None:
            return [], math.inf
        worst_of_all = max(worst_of_all, worst)
        reason = f"dynamic M from {lower} to {upper}"
        top = dataclasses.replace(
            own, config=best[2], fused_a=fused[0], fused_b=fused[1], reason=reason
        )
        ranges.append((upper, top))
    return ranges, worst_of_all


def dispatch_hints(bounds: list[int]) -> list[int]:
    """A size hint per kernel of ``bounds`` (the largest M each serves, ascending) such
    that the hint nearest M in log2, as Inductor's size-hint multi-kernel dispatches,
    is that of the kernel whose range holds M: adjacent hints h, h' meet at
    sqrt(h·h'), between bound and bound + 1."""
    hints = [bounds[0]]
    for bound in bounds[:-1]:
        # the smallest h' with h·h' > (bound + 1/2)²; h <= bound keeps it below bound + 1
        hints.append(int((bound + 0.5) ** 2 / hints[-1]) + 1)
    return hints


def template_configs(
    the_plan: Plan,
    p: Problem,
    dev: DeviceModel,
    exhaustive: bool,
    force: Force = NO_FORCE,
) -> list[TileConfig]:
    """The configs the template's heuristic yields for ``the_plan``: its own, then under
    max-autotune (``exhaustive``) its neighbours for Inductor to benchmark."""
    assert the_plan.config is not None
    configs = [the_plan.config]
    if exhaustive:
        configs += [
            c
            for c in select_configs(
                p, dev, the_plan.fused_a, the_plan.fused_b, exhaustive=True, force=force
            )
            if c not in configs
        ]
    return configs
