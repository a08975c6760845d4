"""Autocast matmuls of fp32 weights on the mm template in default mode (``config.downcast_mm_template``).

Under autocast the weight of a decode-sized ``F.linear`` is an fp32 parameter cast to 16
bits in front of the matmul. Stock Inductor runs the cast as a kernel of its own and, in
default mode, the 16-bit GEMM on cuBLAS, which reads the copy back: 8 bytes moved per
weight element where the matmul needs 4. ``DowncastMMChoices``, an ``InductorChoices``
contributor, offers the Triton mm template instead where each of its row tiles spans M
(heuristics/template/downcast_mm.py, kernel/mm_downcast_plan.py): alone in default mode,
so nothing is benchmarked, beside the other choices under max-autotune. The scheduler
then fuses the cast into the template's load of the weight as a prologue
(``config.prologue_fusion_downcast``): the weight is read once, as fp32, and cast in
registers. Before lowering, fx_passes/decompose_downcast_mm.py rewrites what
``downcast_rewrite`` says: one row as a reduction over K, whose loads fuse the cast; more
rows than one row tile spans as ``w @ x.t()``, transposed back, where the weight is the
template's A operand and its column tiles span x's rows. A symbolic M that may pass one
row tile gets a kernel per range of M (``mm_downcast_plan.dispatch``), and Inductor's
size-hint multi-kernel runs the one of M's range, with no guard on M. A bmm or
baddbmm of a batch of such weights (experts at decode) gets the bmm template where it
loads its operands through ``load_input`` (``config.bmm_prologue_fusion``), so that the
cast fuses the same way.
"""

from __future__ import annotations

import copy
import functools
import math
import operator
from typing import Any, TYPE_CHECKING

from torch._dynamo.utils import counters
from torch._inductor import config, ir
from torch._inductor.choices import InductorChoices, register_inductor_choices
from torch._inductor.heuristics.template.downcast_mm import (
    BMM_OPS,
    downcast_device,
    DOWNCAST_OPS,
    downcast_problem,
    downcast_problem_fx,
)
from torch._inductor.ir import ChoiceCaller, FixedLayout
from torch._inductor.kernel.bmm import bmm_template
from torch._inductor.kernel.mm import mm_template
from torch._inductor.kernel.mm_downcast_plan import Rewrite, rewrite
from torch._inductor.kernel_inputs import MMKernelInputs
from torch._inductor.select_algorithm import ExternKernelChoice
from torch._inductor.utils import use_triton_template
from torch._inductor.virtualized import V

if TYPE_CHECKING:
    from torch._inductor.kernel_inputs import KernelInputs


def downcast_rewrite(mat1: Any, mat2: Any) -> Rewrite | None:
    """How to rewrite a matmul of these FX operands (an mm's, an addmm's) over a
    single-use downcast of an fp32 weight, so that the weight is read once, as fp32."""
    if not config.downcast_mm_template:
        return None
    problem = downcast_problem_fx(mat1, mat2)
    if problem is None:
        return None
    how = rewrite(problem, downcast_device(mat2.meta["val"].device))
    if how is Rewrite.SWAP and (config.max_autotune or config.max_autotune_gemm):
        # max-autotune times its choices in the row-major output layout of the
        # lowering; a swapped matmul's, written column-major, would not fit it
        return None
    return how


def _column_major(layout: Any) -> bool:
    return (
        isinstance(layout, FixedLayout)
        and len(layout.size) == 2
        and list(layout.stride) == [1, layout.size[0]]
    )


class SizeHintDispatch(ChoiceCaller):
    """The mm template's kernels for a symbolic M, one per range of M, keyed by each
    range's size hint; Inductor's size-hint multi-kernel runs the kernel whose hint is
    nearest M in log2. The plan chose them: nothing is timed, and nothing guards M."""

    def __init__(self, callers: dict[int | None, Any]) -> None:
        own = callers[None]
        super().__init__(own.name, own.input_nodes, own.layout, "size-hint dispatch")
        self.callers = callers

    def pick(self, hint: int | None) -> Any:
        """The caller the multi-kernel runs at M = ``hint`` (None: the size hint)."""
        if hint is None:
            return self.callers[None]
        return self.callers[_nearest(self.callers, hint)]

    def output_node(self) -> ir.TensorBox:
        choices = list(dict.fromkeys(self.callers.values()))
        buffer = ir.MultiTemplateBuffer(
            self.layout,
            self.input_nodes,
            lambda hint_override=None: {self.pick(hint_override): 0.0},
            choices,
            functools.reduce(operator.or_, (c.allowed_prologue_inps for c in choices)),
        )
        buffer.finalize_as_triton_callers(self.callers)
        # chosen here: the scheduler fuses into it without benchmarking choices
        buffer.planned_choices = True
        counters["inductor"]["downcast_mm_size_hint_dispatch"] += 1
        return ir.TensorBox.create(buffer)


def _nearest(hints: Any, m: int) -> int:
    """The hint nearest ``m`` in log2, the lower on a tie, as ``SizeHintMultiKernelCall``
    picks."""
    hints = sorted(h for h in hints if h is not None)
    return min(hints, key=lambda h: (abs(math.log2(h) - math.log2(max(m, 1))), h))


def _size_hint_dispatch(
    kernel_inputs: MMKernelInputs, downcast: list[Any], hints: list[int]
) -> Any:
    """One choice: the kernels of ``downcast`` (one per size hint of ``hints``) as a
    ``SizeHintDispatch``; None where a kernel cannot be made."""
    layout = kernel_inputs.output_layout(flexible=False)
    for ktc in downcast:
        ktc.layout = layout
        if hasattr(ktc, "_choice"):
            del ktc._choice
    callers: dict[int | None, Any] = dict(zip(hints, (k.choice for k in downcast)))
    if any(c is None for c in callers.values()):
        return None
    m_hint = V.graph.sizevars.optimization_hint(kernel_inputs.mnk_symbolic()[0])
    own = _nearest(hints, m_hint)
    callers[None] = callers[own]
    ktc = copy.copy(downcast[hints.index(own)])
    ktc._choice = SizeHintDispatch(callers)
    return ktc


class DowncastMMChoices(InductorChoices):
    """Offers the mm template where the weight is a downcast the template can fuse."""

    def uuid(self) -> tuple[str, int]:
        return ("downcast_mm", 1)

    def _finalize_template_configs(
        self,
        template_choices: dict[str, Any],
        kernel_inputs: KernelInputs,
        templates: list[Any],
        op_name: str,
        kwarg_overrides: dict[str, dict[str, Any]] | None = None,
    ) -> list[Any]:
        choices = super()._finalize_template_configs(
            template_choices, kernel_inputs, templates, op_name, kwarg_overrides
        )
        if (
            not (config.downcast_mm_template and config.prologue_fusion_downcast)
            or op_name not in DOWNCAST_OPS
            or not isinstance(kernel_inputs, MMKernelInputs)
            or kernel_inputs.device_type != "cuda"
            # an fp32 result (mm's out_dtype) is not the 16-bit matmul the template runs
            or kernel_inputs.out_dtype() != kernel_inputs.mat1mat2()[1].get_dtype()
            or not use_triton_template(
                kernel_inputs.output_layout(), check_max_autotune=False
            )
        ):
            return choices
        template = bmm_template if op_name in BMM_OPS else mm_template
        downcast = list(self.get_ktc(kernel_inputs, template, DOWNCAST_OPS[op_name]))
        if not downcast:
            return choices
        hints = [ktc.params.to_kwargs().get("hint_override") for ktc in downcast]
        if hints[0] is not None:
            # a symbolic M: a kernel per range of M, one choice (default mode only)
            dispatch = _size_hint_dispatch(kernel_inputs, downcast, hints)
            return [dispatch] if dispatch is not None else choices
        autotune = config.max_autotune or config.max_autotune_gemm
        offered = choices + downcast if autotune else downcast
        problem = downcast_problem(kernel_inputs, op_name)
        if problem is not None and problem.weight_is_a and not autotune:
            # swapped, w @ x.t(): written column-major, its transpose is x @ w's
            # row-major output, which the rewrite's .t() then views without a copy
            layout = kernel_inputs.output_layout(flexible=False)
            transposed = FixedLayout(
                layout.device, layout.dtype, layout.size, [1, layout.size[0]]
            )
            for ktc in offered:
                ktc.layout = transposed
                if hasattr(ktc, "_choice"):
                    del ktc._choice
        return offered

    def _need_to_fix_layout(self, adjusted_choices: list[Any], op_name: str) -> bool:
        if adjusted_choices and all(_column_major(c.layout) for c in adjusted_choices):
            return False  # fixed already: the swapped matmul's
        if any(
            isinstance(getattr(c, "_choice", None), SizeHintDispatch)
            for c in adjusted_choices
        ):
            return False  # fixed already: each kernel's of a size-hint dispatch
        # a template chosen in default mode needs its output layout fixed, as under
        # max-autotune
        if any(
            not isinstance(c.template, ExternKernelChoice) for c in adjusted_choices
        ):
            return True
        return super()._need_to_fix_layout(adjusted_choices, op_name)


register_inductor_choices("downcast_mm", DowncastMMChoices)
