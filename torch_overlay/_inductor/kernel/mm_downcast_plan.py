"""Mm template configs for a memory-bound matmul whose weight is an fp32 -> 16-bit cast.

Plain Python: no Inductor import. Under autocast (or with a hand-written ``w.to(bf16)``)
the weight of a decode-sized matmul is an fp32 tensor cast to 16 bits in front of it:
stock Inductor writes the 16-bit copy in a kernel of its own and reads it back in the
GEMM, 8 bytes moved per weight element where the matmul needs 4. Where each row tile of
the template spans every row (M at most ``MAX_ROWS``), the template reads the weight once,
so prologue fusion can load it as fp32 and cast it in registers. Up to ``MAX_SWAPPED_ROWS``
the matmul is swapped (``rewrite``): as ``w @ x.t()`` the weight is the A operand, whose
column tiles span x's rows. ``plan`` says whether to offer the mm template for such a
matmul, and with which tile configs; ``rewrite`` which matmuls to rewrite first;
``dispatch`` which kernels a symbolic M picks among at run time.
"""

from __future__ import annotations

import dataclasses
import enum
import math


# rows up to which one row tile spans M: the template reads the weight once, which is
# where the downcast prologue fuses (Scheduler.check_prologue_fusion_heuristics_fusable)
MAX_ROWS = 128
# rows of x up to which the weight, swapped into A, is read about once: one column tile
# of the widest (256) spans them, or two of 128 read it at once, the second from the L2;
# wgmma reads the A operand's cast from registers, where B's goes back through shared
# memory
MAX_SWAPPED_ROWS = 256
# the smallest weight (elements) measured to gain: below it the cast kernel is cheap and
# the GEMM launch-bound
MIN_WEIGHT_NUMEL = 1024 * 4096
# column tiles per SM from which 64-column tiles fill the SMs well enough
WIDE_TILES_PER_SM = 1.5
# 128-row tiles: the least share of the SMs their column tiles must occupy, since each
# tile streams its columns alone: fewer leave the SMs idle for the whole read
MIN_SM_SHARE = 0.6
# the widest [K, N] weight one row reduces over: up to it Inductor splits K across
# programs; wider, each program reads whole columns, at a speed its run-time tuned tile
# decides, where the template's is steadier
KN_MAX_COLUMNS = 8192
# the largest M of each row range a symbolic M up to MAX_ROWS gets a kernel for: decode
# tiles for few rows, where a 128-row tile would leave most of each MMA idle
DISPATCH_BOUNDS = (16, 64, MAX_ROWS)
# an M that nothing bounds
M_UNBOUNDED = 2**63 - 1


class Rewrite(enum.Enum):
    """How the graph is rewritten before lowering, so that the weight is read once."""

    REDUCE_OVER_K = "one row: a reduction over K, whose loads fuse the cast"
    SWAP = "x's rows past one row tile: w @ x.t(), transposed back"


class Decline(enum.Enum):
    """Why the mm template is not offered; the stock choices stand."""

    NOT_A_DOWNCAST = "neither operand is a single-use fp32 -> 16-bit cast"
    EMPTY = "no rows: nothing to read"
    TOO_MANY_ROWS = "x's rows may exceed one tile: the weight would be re-read"
    FEW_TILES = "too few tiles to keep the SMs busy"
    SMALL_WEIGHT = "the weight is too small for its cast kernel to matter"
    NO_FIT = "no tile config fits shared memory"


@dataclasses.dataclass(frozen=True)
class DowncastMM:
    """One matmul as the plan sees it: ``[M, K] @ [K, N]``, the weight cast from fp32:
    B (``x @ w``), or A (``w @ x.t()``, swapped: M counts the weight's rows, N x's); a
    bmm's ``batch`` of them, each with a weight of its own, in one grid."""

    m_max: int  # the largest M the kernel must serve (M itself where static)
    n: int
    k: int
    weight_downcast: bool  # B is an fp32 tensor cast in front, used once
    a_downcast: bool = False  # A is one (a swapped matmul's weight)
    x_itemsize: int = 2  # x as the template loads it (its cast stays a kernel apart)
    k_contiguous: bool = False  # the weight (B) is [N, K] in memory (F.linear's)
    m_hint: int = 0  # a symbolic M's size hint; 0 where M is static
    batch: int = 1  # matmuls of these sizes (a bmm's batch), each its own weight

    @property
    def weight_is_a(self) -> bool:
        """The template reads the weight as A: A is the downcast, and B is not one
        whose row tile spans M."""
        return self.a_downcast and not (self.weight_downcast and self.m_max <= MAX_ROWS)

    def swapped(self) -> DowncastMM:
        """``w @ x.t()`` of this ``x @ w``."""
        return dataclasses.replace(
            self,
            m_max=self.n,
            n=self.m_max,
            weight_downcast=self.a_downcast,
            a_downcast=self.weight_downcast,
            k_contiguous=False,
        )


@dataclasses.dataclass(frozen=True)
class Device:
    sm_count: int
    smem_per_block: int  # bytes a program may use (the opt-in maximum)
    cc: int = 90  # compute capability: from 90, wgmma


# below sm_90, mma.sync's accumulator of a 256-column tile spills: x's rows in tiles of
# 128 columns there
WGMMA_CC = 90


@dataclasses.dataclass(frozen=True)
class TileConfig:
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    num_warps: int
    num_stages: int
    GROUP_M: int = 8

    def smem_bytes(self, a_itemsize: int, b_itemsize: int = 4) -> int:
        """Shared memory Triton allocates: a tile of each operand per stage in flight
        (the weight as fp32), the 16-bit copies tl.dot reads, and headroom."""
        stage = (
            self.BLOCK_M * self.BLOCK_K * a_itemsize
            + self.BLOCK_K * self.BLOCK_N * b_itemsize
        )
        recast = 2 * self.BLOCK_K * max(self.BLOCK_M, self.BLOCK_N) * 2
        return (self.num_stages - 1) * stage + recast + 16 * 1024

    def kwargs(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Plan:
    """The configs to offer, best first; none where ``decline`` says why."""

    configs: tuple[TileConfig, ...] = ()
    decline: Decline | None = None


# 128-row tiles by width: thin ones take a deep K step, wide ones 8 warps
TALL_TILES = {
    128: TileConfig(128, 128, 64, 8, 4),
    64: TileConfig(128, 64, 64, 4, 4),
    32: TileConfig(128, 32, 128, 4, 4),
}


def _tall(p: DowncastMM, dev: Device) -> list[TileConfig]:
    """65-128 rows: the widest 128-row tile whose column tiles fill one wave, then the
    others; 64 columns first where every width takes more than one wave."""
    tiles = {w: p.batch * math.ceil(p.n / w) for w in TALL_TILES}
    one_wave = [w for w in TALL_TILES if tiles[w] <= dev.sm_count]
    busy = [w for w in one_wave if tiles[w] >= MIN_SM_SHARE * dev.sm_count]
    if one_wave and not busy:
        return []  # even 32-column tiles leave most SMs idle
    best = busy[0] if busy else 64
    return [TALL_TILES[best]] + [c for w, c in TALL_TILES.items() if w != best]


# the weight as A, by the column tiles over x's rows: 128 weight rows spanning them,
# 64 in two tiles that share the weight through the L2, 64 spanning them
WEIGHT_ROW_TILES = (
    TileConfig(128, 256, 64, 8, 3),
    TileConfig(64, 128, 64, 4, 6),
    TileConfig(64, 256, 64, 4, 4),
)


def _weight_rows(p: DowncastMM, dev: Device) -> list[TileConfig]:
    """The weight as A (``p.m_max`` rows, x's ``p.n``): 128-row tiles where they fill
    one wave, then pairs of 64-row tiles where those do, else 64-row tiles in waves;
    none where even the pairs leave most SMs idle."""
    span = 16
    while span < p.n:
        span *= 2
    if dev.cc < WGMMA_CC:
        span = min(span, 128)
    wide, paired, narrow = (
        dataclasses.replace(c, BLOCK_N=min(c.BLOCK_N, span)) for c in WEIGHT_ROW_TILES
    )

    def grid(c: TileConfig) -> int:
        return math.ceil(p.m_max / c.BLOCK_M) * math.ceil(p.n / c.BLOCK_N)

    if MIN_SM_SHARE * dev.sm_count <= grid(wide) <= dev.sm_count:
        best = wide
    elif grid(paired) < MIN_SM_SHARE * dev.sm_count:
        return []
    elif grid(paired) <= dev.sm_count:
        best = paired
    else:
        best = narrow
    return [best] + [c for c in (wide, paired, narrow) if c != best]


def _preferred(p: DowncastMM, dev: Device) -> list[TileConfig]:
    """Decode tiles, best first: narrow columns until the weight's column tiles fill
    the SMs, a deep K step to keep enough fp32 bytes in flight."""
    if p.m_max <= 16:
        return [TileConfig(16, 32, 256, 4, 3), TileConfig(16, 64, 128, 4, 4)]
    if p.m_max > 64:
        return _tall(p, dev)
    narrow, wide = TileConfig(64, 32, 128, 4, 5), TileConfig(64, 64, 128, 4, 4)
    if p.batch * p.n / wide.BLOCK_N >= WIDE_TILES_PER_SM * dev.sm_count:
        return [wide, narrow]
    return [narrow, wide]


def _fitted(cfg: TileConfig, p: DowncastMM, dev: Device) -> TileConfig | None:
    """``cfg`` with as many stages as fit (two at least), its K step halved while even
    two do not; None where nothing fits."""
    sizes = (4, p.x_itemsize) if p.weight_is_a else (p.x_itemsize, 4)
    while cfg.BLOCK_K >= 32:
        for stages in range(cfg.num_stages, 1, -1):
            fitted = dataclasses.replace(cfg, num_stages=stages)
            if fitted.smem_bytes(*sizes) <= dev.smem_per_block:
                return fitted
        cfg = dataclasses.replace(cfg, BLOCK_K=cfg.BLOCK_K // 2)
    return None


def reduces_over_k(p: DowncastMM) -> bool:
    """One row: a reduction over K, whose loads fuse the cast like any pointwise, streams
    the weight faster than a 16-row template tile that leaves 15 rows of each MMA idle,
    over an [N, K] weight (each output a dot product of one weight row read in order) as
    over a [K, N] one up to ``KN_MAX_COLUMNS`` (K split, each program reading rows of N in
    order). One kernel where stock runs two (the cast, the GEMM): a gain at any size."""
    fits = p.k_contiguous or p.n <= KN_MAX_COLUMNS
    return p.weight_downcast and p.m_max == 1 and fits


def rewrite(p: DowncastMM, dev: Device) -> Rewrite | None:
    """How to rewrite ``x @ w`` before lowering: one row as a reduction over K; past
    ``MAX_ROWS`` rows, swapped where the swapped matmul has a plan; else as it is."""
    if reduces_over_k(p):
        return Rewrite.REDUCE_OVER_K
    if p.weight_downcast and p.m_max > MAX_ROWS and plan(p.swapped(), dev).configs:
        return Rewrite.SWAP
    return None


def plan(p: DowncastMM, dev: Device, *, neighbours: bool = False) -> Plan:
    """The mm template's configs for ``p``: the best alone (default mode, nothing to
    benchmark), or with ``neighbours`` every decode tile that fits (max-autotune)."""
    if not (p.weight_downcast or p.a_downcast):
        return Plan(decline=Decline.NOT_A_DOWNCAST)
    rows, weight_rows = (p.n, p.m_max) if p.weight_is_a else (p.m_max, p.n)
    if rows < 1:
        return Plan(decline=Decline.EMPTY)
    if rows > (MAX_SWAPPED_ROWS if p.weight_is_a else MAX_ROWS):
        return Plan(decline=Decline.TOO_MANY_ROWS)
    if p.batch * weight_rows * p.k < MIN_WEIGHT_NUMEL:
        return Plan(decline=Decline.SMALL_WEIGHT)
    preferred = _weight_rows(p, dev) if p.weight_is_a else _preferred(p, dev)
    if not preferred:
        return Plan(decline=Decline.FEW_TILES)
    fitted = [c for c in (_fitted(c, p, dev) for c in preferred) if c]
    if not fitted:
        return Plan(decline=Decline.NO_FIT)
    return Plan(configs=tuple(dict.fromkeys(fitted)) if neighbours else (fitted[0],))


def dispatch_hints(bounds: tuple[int, ...]) -> tuple[int, ...]:
    """A size hint per row range (``bounds``: the largest M of each, ascending; the last
    range is open) such that the hint nearest M in log2, which Inductor's size-hint
    multi-kernel picks (the lower on a tie), is that of M's range: adjacent hints
    h < h' meet at sqrt(h h'), so b² <= h h' < (b + 1)² for the bound b between them."""
    for first in range(bounds[0], 0, -1):
        hints = [first]
        for b in bounds[:-1]:
            nxt = -(-(b * b) // hints[-1])
            if nxt <= hints[-1] or hints[-1] * nxt >= (b + 1) ** 2:
                break
            hints.append(nxt)
        else:
            return tuple(hints)
    raise ValueError(f"no size hints separate the ranges {bounds}")


@dataclasses.dataclass(frozen=True)
class Kernel:
    """One kernel of a symbolic M: the rows up to ``bound`` past the previous kernel's,
    picked at run time through its size ``hint``."""

    bound: int
    hint: int
    config: TileConfig


def dispatch(p: DowncastMM, dev: Device) -> tuple[Kernel, ...]:
    """A symbolic M of at most ``MAX_ROWS`` rows: a kernel per range of
    ``DISPATCH_BOUNDS``, each with the config planned for its rows. None where a range
    holding M's hint declines, or one kernel would serve them all. Past ``MAX_ROWS``
    none: there each row tile casts the weight again, and the GEMM is compute-bound,
    where the stock path's cuBLAS on the 16-bit copy is faster."""
    if not p.weight_downcast or p.weight_is_a or not p.m_hint or p.m_max > MAX_ROWS:
        return ()
    ranges, lower = [], 0
    for bound in DISPATCH_BOUNDS:
        rows = min(bound, p.m_max)
        configs = plan(dataclasses.replace(p, m_max=rows, m_hint=0), dev).configs
        if configs:
            ranges.append((rows, configs[0]))
        elif lower < p.m_hint <= bound:
            return ()  # M's own range declines
        if rows == p.m_max:
            break
        lower = bound
    if len(ranges) < 2 or ranges[-1][0] < p.m_max:
        return ()
    hints = dispatch_hints(tuple(bound for bound, _ in ranges))
    return tuple(Kernel(b, h, c) for (b, c), h in zip(ranges, hints))
