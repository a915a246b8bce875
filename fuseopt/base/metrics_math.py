"""Arithmetic on metrics counters, with no native core and no state: the
runtime, the overlap meter and fuseoptrun's summary table all derive their
rates here, so that the three agree."""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple


def add_rates(counters: Dict[str, Any], no_lookups: Optional[float]) -> Dict[str, Any]:
    """Adds ``mean_bucket_bytes`` and ``cache_hit_rate`` (``no_lookups`` when
    nothing was looked up) to a dict of metrics counters or their deltas."""
    c = counters
    c["mean_bucket_bytes"] = c["bytes"] / c["collectives"] if c["collectives"] else 0.0
    lookups = c["cache_hits"] + c["cache_misses"]
    c["cache_hit_rate"] = c["cache_hits"] / lookups if lookups else no_lookups
    return c


def efficiency(communication_s: float, comm_in_waits_s: float) -> Tuple[float, Optional[float]]:
    """(hidden_s, overlap_efficiency): the communication time that fell
    outside the training thread's waits, and its share of all communication
    (None without communication)."""
    hidden = max(0.0, communication_s - comm_in_waits_s)
    return hidden, (hidden / communication_s if communication_s > 0 else None)
