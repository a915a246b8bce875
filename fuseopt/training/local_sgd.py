"""Local SGD's sync decision, once for both bindings.

Ranks step on their own gradients and average their parameters now and then.
When: every ``period`` steps, and with a drift ``threshold`` also earlier, once
the models may have drifted apart (but not before ``min_period`` steps). The
drift of a rank is ``||w - w_at_last_sync||^2 / ||w_at_last_sync||^2``.

The decision is collective: each rank computes its local drift, one tiny
allreduce takes the maximum, and every rank acts on the same number. A rule
evaluated on local numbers alone could send ranks down different paths and
hang the job. The step counters are the same on every rank, so ranks also
agree on when the drift is measured at all.
"""
from __future__ import annotations

from typing import Callable, Iterable, Optional, Tuple

import numpy as np

from ..api import ops

DRIFT_NAME = "local_sgd.drift"


def relative_drift(squares: Iterable[Tuple[float, float]]) -> float:
    """This rank's drift from (sum of (w - anchor)^2, sum of anchor^2) per tensor."""
    num = den = 0.0
    for diff_sq, anchor_sq in squares:
        num += float(diff_sq)
        den += float(anchor_sq)
    return num / (den or 1.0)


def agreed_drift(local: float) -> float:
    """The largest drift of any rank (collective)."""
    return float(ops.allreduce(np.array([local], np.float64), name=DRIFT_NAME, op=ops.Max)[0])


class SyncRule:
    """Counts steps and says when to sync. ``threshold`` None: every ``period``
    steps only."""

    def __init__(self, period: int, threshold: Optional[float] = None, min_period: int = 1):
        if period < 1:
            raise ValueError("period must be >= 1")
        if min_period < 1:
            raise ValueError("min_period must be >= 1")
        self.period = period
        self.threshold = threshold
        self.min_period = min_period
        self.steps = 0
        self.syncs = 0
        self.since_sync = 0
        self.last_drift = 0.0

    def after_step(self, local_drift: Callable[[], float]) -> bool:
        """Whether to sync after the step just taken (collective when the drift
        is measured; ``local_drift`` computes this rank's)."""
        self.steps += 1
        self.since_sync += 1
        if self.since_sync >= self.period:
            return True
        if self.threshold is None or self.since_sync < self.min_period:
            return False
        self.last_drift = agreed_drift(local_drift())
        return self.last_drift > self.threshold

    def synced(self) -> None:
        self.syncs += 1
        self.since_sync = 0
