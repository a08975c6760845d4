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
registers. One row is rewritten after grad as a reduction over K instead
(``downcast_one_row_reduces``, asked by fx_passes/decompose_downcast_mm.py), whose loads
fuse the cast.
"""

from __future__ import annotations

from typing import Any, TYPE_CHECKING

from torch._inductor import config
from torch._inductor.choices import InductorChoices, register_inductor_choices
from torch._inductor.heuristics.template.downcast_mm import (
    DOWNCAST_OPS,
    downcast_problem_fx,
)
from torch._inductor.kernel.mm import mm_template
from torch._inductor.kernel.mm_downcast_plan import reduces_over_k
from torch._inductor.kernel_inputs import MMKernelInputs
from torch._inductor.select_algorithm import ExternKernelChoice
from torch._inductor.utils import use_triton_template

if TYPE_CHECKING:
    from torch._inductor.kernel_inputs import KernelInputs


def downcast_one_row_reduces(mat1: Any, mat2: Any) -> bool:
    """A matmul of these FX operands (an mm's, an addmm's) is one row over a single-use
    downcast of an fp32 weight: as a reduction over K, the weight is read once, as fp32."""
    if not config.downcast_mm_template:
        return False
    problem = downcast_problem_fx(mat1, mat2)
    return problem is not None and reduces_over_k(problem)


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
        downcast = list(self.get_ktc(kernel_inputs, mm_template, DOWNCAST_OPS[op_name]))
        if not downcast:
            return choices
        if config.max_autotune or config.max_autotune_gemm:
            return choices + downcast
        return downcast

    def _need_to_fix_layout(self, adjusted_choices: list[Any], op_name: str) -> bool:
        # a template chosen in default mode needs its output layout fixed, as under
        # max-autotune
        if any(
            not isinstance(c.template, ExternKernelChoice) for c in adjusted_choices
        ):
            return True
        return super()._need_to_fix_layout(adjusted_choices, op_name)


register_inductor_choices("downcast_mm", DowncastMMChoices)
