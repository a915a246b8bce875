"""Arguments both DistributedOptimizers (torch, TensorFlow) take, checked and
turned into reduction settings in one place, so the bindings cannot drift."""
from __future__ import annotations

from typing import Tuple

from ..base.errors import InvalidArgumentError
from ..api.ops import Average


def check(backward_passes_per_step: int, op: int, gradient_predivide_factor: float) -> None:
    if backward_passes_per_step < 1:
        raise InvalidArgumentError("backward_passes_per_step must be >= 1")
    if gradient_predivide_factor != 1.0 and op != Average:
        raise InvalidArgumentError("gradient_predivide_factor needs op=Average")


def scales(op: int, gradient_predivide_factor: float) -> Tuple[float, float]:
    """(prescale, postscale) of a gradient reduction with ``op``. As Horovod:
    Average divides by the factor before the sum and by size/factor after it
    (the core's Average divides by size); any other op is not scaled."""
    if op != Average:
        return 1.0, 1.0
    return 1.0 / gradient_predivide_factor, gradient_predivide_factor
