"""The value criterion for 16-bit autocast matmuls, one implementation for the GPU value
tests of test/test_tensorcore_mm_numerics.py (so they cannot disagree).

``references`` computes what an output is judged against, ``compare`` measures it and
``verdict`` decides. The definition is at ``compare``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Callable

import torch

BF16, FP16 = torch.bfloat16, torch.float16
MANTISSA = {BF16: 8, FP16: 11}  # significand bits, the implicit one included
# fraction of elements allowed to be neither the correctly rounded value, nor a rounding
# explained by fp32 summation error, nor eager's (fp32 reductions) value: a correct
# fp32-accumulating kernel has ~0 of them; operands not rounded to 16 bits, a rounding
# too many or too few, or 16-bit partial sums give 10-50%
MAX_MISMATCH = 0.02
# the fp32 summation error allowed per element, in fp32 units (2^-24) of the sum of the
# magnitudes of its terms: H200 tensor cores (wgmma) and cuBLAS reach ~4 at K=4096 (fp16
# outputs near 0 off their correctly rounded value by up to 1.9e-5 with a magnitude sum
# of 82); a 16-bit accumulation is off by ~2^13 of them
ACC_FP32_UNITS = 16.0
# (a): the error against fp64 of the fp32 inputs may exceed eager autocast's by this much
ERR_SLACK = 1.05


@contextlib.contextmanager
def fp32_reductions():
    """Eager cuBLAS with fp32 reductions only: no reduced-precision (16-bit) split-K
    partials, which torch allows by default for fp16 and bf16 GEMMs."""
    m = torch.backends.cuda.matmul
    saved = (m.allow_bf16_reduced_precision_reduction, m.allow_fp16_reduced_precision_reduction)
    m.allow_bf16_reduced_precision_reduction = False
    m.allow_fp16_reduced_precision_reduction = False
    try:
        yield
    finally:
        m.allow_bf16_reduced_precision_reduction, m.allow_fp16_reduced_precision_reduction = saved


@dataclasses.dataclass
class Refs:
    eager: torch.Tensor  # eager autocast, torch's defaults
    eager_fp32: torch.Tensor  # eager autocast with fp32 reductions only
    ref: torch.Tensor  # fp64 on the fp32 inputs
    exact: torch.Tensor  # fp64 on the inputs rounded to the autocast dtype (not rounded)
    ideal: torch.Tensor  # ``exact`` rounded once to the autocast dtype
    magnitude: torch.Tensor  # fp64 on |rounded inputs|: the sum of |terms| per element


def references(run: Callable, fn64: Callable, inputs: list, dtype) -> Refs:
    """``run``: the function under autocast (eager); ``fn64``: the same in plain fp64,
    with non-negative alpha/beta and epilogues that keep |terms| summed when given
    non-negative inputs (matmuls, relu, scaling by a positive constant)."""
    eager = run(*inputs)
    with fp32_reductions():
        eager_fp32 = run(*inputs)
    ref = fn64(*[t.double() for t in inputs])
    rounded = [t.to(dtype).double() for t in inputs]
    exact = fn64(*rounded)
    magnitude = fn64(*[t.abs() for t in rounded]).abs()
    return Refs(eager, eager_fp32, ref, exact, exact.to(dtype), magnitude)


def ulp_at(v: torch.Tensor, dtype, floor: float = 0.0) -> torch.Tensor:
    """One unit in the last place of ``dtype`` at |v| (fp64, subnormals and 0 included),
    at least ``floor``."""
    _, e = torch.frexp(v.abs())  # |v| = f * 2^e, 0.5 <= f < 1
    emin = math.frexp(torch.finfo(dtype).tiny)[1]  # frexp exponent of the smallest normal
    e = torch.where(v == 0, torch.full_like(e, emin), e.clamp_min(emin))
    return torch.ldexp(torch.ones_like(v), e - MANTISSA[dtype]).clamp_min(floor)


def compare(out: torch.Tensor, r: Refs, dtype) -> dict:
    """(a) errors against fp64, (b) distance to the correctly rounded value.

    The reference of (b) is ``ideal``: the exact result on the inputs rounded to the
    autocast dtype (what autocast computes), rounded once. Not eager: cuBLAS with
    reduced-precision reductions turned off still leaves its results several 16-bit
    units off ``ideal`` at some shapes (H200: 5% of the elements at 37x1001x999 bf16),
    and any two fp32 summation orders round differently near zero.

    Per element, the tolerance is one 16-bit unit in the last place at the larger
    magnitude of ``out`` and ``ideal`` (a step across a power of two counts as one; at
    least the ulp at 2^-10 of the output's scale) plus ``acc``, the fp32 summation
    error allowed: ACC_FP32_UNITS * 2^-24 * the sum of the magnitudes of the element's
    terms (``magnitude``). ``acc`` is far below a unit except near 0, where
    cancellation leaves the summation error of terms of the scale's size.

    A mismatch is an element that is none of: ``ideal``; a 16-bit rounding of a value
    within ``acc`` of the exact one (a summation order crossing a rounding boundary);
    eager autocast's value with fp32 reductions. Passing (``verdict``) means: every
    element within tolerance, at most MAX_MISMATCH of them mismatches, and (a) the
    error against fp64 on the fp32 inputs no worse than eager autocast's (torch's
    defaults) with ERR_SLACK. Operands not rounded to 16 bits, an extra or a missing
    rounding, or 16-bit accumulation fail (TestValueCriterion in
    test/test_tensorcore_mm_numerics.py).
    """
    out64 = out.double()
    es, ideal, exact = r.eager_fp32.double(), r.ideal.double(), r.exact
    scale = r.ref.abs().max().clamp_min(1e-30).item()
    floor = ulp_at(torch.tensor(scale * 2**-10, dtype=torch.float64), dtype).item()
    acc = ACC_FP32_UNITS * 2.0**-24 * r.magnitude
    unit = ulp_at(torch.maximum(out64.abs(), ideal.abs()), dtype, floor)
    diff = (out64 - ideal).abs()
    lo, hi = (exact - acc).to(dtype).double(), (exact + acc).to(dtype).double()

    def explained(v):
        return (v == ideal) | ((v >= lo) & (v <= hi))

    mismatch = ~explained(out64) & (out64 != es)
    eager64 = r.eager.double()
    return dict(
        dtype_ok=out.dtype == r.eager.dtype,
        ulps=(diff / (unit + acc)).max().item(),  # the per-element tolerance is 1.0
        ulps_ideal=(diff / unit).max().item(),
        mismatch=mismatch.double().mean().item(),
        eager_off=(~explained(es)).double().mean().item(),
        ulps_default=((out64 - eager64).abs()
                      / ulp_at(torch.maximum(out64.abs(), eager64.abs()), dtype, floor)).max().item(),
        mismatch_default=(out64 != eager64).double().mean().item(),
        err=(out64 - r.ref).abs().max().item() / scale,
        eager_err=(eager64 - r.ref).abs().max().item() / scale,
        eager_fp32_err=(es - r.ref).abs().max().item() / scale,
    )


def verdict(c: dict) -> bool:
    """(a) error vs fp64 no worse than eager autocast's (torch's defaults), and (b)."""
    return (c["dtype_ok"] and c["ulps"] <= 1.0 + 1e-9 and c["mismatch"] <= MAX_MISMATCH
            and c["err"] <= ERR_SLACK * c["eager_err"] + 1e-6)
