"""The training-side view of communication: how much of it was hidden.

fuseopt's background thread reports how long it spent running collectives
(``communication_s`` in :func:`fuseopt.metrics`). The framework bindings
record how long the training thread itself sat waiting for gradient
reductions (``exposed_wait_s``: ``optimizer.step()``/``synchronize()`` in
PyTorch, the gradient allreduce inside the train step in TensorFlow), and
how much of the collectives' time fell inside those waits. The rest ran while
the framework computed::

    hidden_s = communication_s - communication during waits
    overlap_efficiency = hidden_s / communication_s

1.0 means every collective ran under backward compute; 0.0 means the
training thread was waiting through all of them. ``exposed_wait_s`` also
holds negotiation and waiting for slower ranks, so it can exceed the
communication time. Both bindings feed one meter per process,
:data:`GRADIENTS`.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional
import threading
import time
from contextlib import contextmanager

from ..core import world
from ..base.log import report_logger
from ..base.metrics_math import add_rates, efficiency

_COUNTERS = ("communication_s", "negotiation_s", "bytes", "collectives", "tensors",
             "cache_hits", "cache_misses", "stalls")


def _communication_s():
    return world.metrics()["communication_s"] if world.is_initialized() else 0.0


class OverlapMeter:
    def __init__(self):
        self._lock = threading.Lock()
        self._exposed_s = 0.0
        self._comm_in_waits_s = 0.0
        self._steps = 0
        self._base = None  # fuseopt.metrics() at the start of the window
        # Since the process started; never reset (fuseoptrun --metrics-summary).
        self.total_exposed_s = 0.0
        self.total_comm_in_waits_s = 0.0

    @contextmanager
    def waiting(self):
        """Wrap the training thread's blocking wait for gradient reductions."""
        self._start_window()
        comm = _communication_s()
        t = time.perf_counter()
        try:
            yield
        finally:
            waited = time.perf_counter() - t
            comm = _communication_s() - comm
            with self._lock:
                self._exposed_s += waited
                self._comm_in_waits_s += comm
                self.total_exposed_s += waited
                self.total_comm_in_waits_s += comm
                self._steps += 1

    def _start_window(self):
        if self._base is None:
            if world.is_initialized():
                self._base = {k: world.metrics()[k] for k in _COUNTERS}

    def report(self, reset=False):
        """This window's figures as a dict (see the module docstring); with
        ``reset``, the next window starts now."""
        now = world.metrics()
        base = self._base or {k: 0 for k in _COUNTERS}
        with self._lock:
            out = {k: now[k] - base[k] for k in _COUNTERS}
            out["gradient_waits"] = self._steps
            out["exposed_wait_s"] = self._exposed_s
            in_waits = self._comm_in_waits_s
            if reset:
                self._exposed_s, self._comm_in_waits_s, self._steps = 0.0, 0.0, 0
                self._base = {k: now[k] for k in _COUNTERS}
        out["hidden_s"], out["overlap_efficiency"] = efficiency(out["communication_s"], in_waits)
        return add_rates(out, no_lookups=None)


def format_report(r, prefix="fuseopt"):
    """One log line for a report dict."""
    eff = r["overlap_efficiency"]
    hit = r["cache_hit_rate"]
    return ("%s: %.1f MB in %d collectives (mean bucket %.0f KB), communication %.3f s, "
            "negotiation %.3f s, waited %.3f s in %d gradient waits, overlap efficiency %s, "
            "cache hit rate %s, stalls %d"
            % (prefix, r["bytes"] / 1e6, r["collectives"], r["mean_bucket_bytes"] / 1e3,
               r["communication_s"], r["negotiation_s"], r["exposed_wait_s"],
               r["gradient_waits"], "n/a" if eff is None else "%.0f%%" % (100 * eff),
               "n/a" if hit is None else "%.0f%%" % (100 * hit), r["stalls"]))


def log_epoch(epoch: Optional[int] = None,
              log_fn: Optional[Callable[[str], Any]] = report_logger.info, reset: bool = True,
              meter: Any = None) -> Dict[str, Any]:
    """Logs (on rank 0) and returns this rank's report for the window since
    the last call: the per-epoch helper behind ``fuseopt.torch.log_metrics``
    and the Keras ``MetricsCallback``. By default the line is an INFO record
    of the ``fuseopt.report`` logger (fuseopt/base/log.py); ``log_fn=None`` only
    returns the report."""
    report = (meter or GRADIENTS).report(reset=reset)
    if log_fn is not None and world.rank() == 0:
        log_fn(format_report(report, "fuseopt" if epoch is None else "fuseopt epoch %s" % epoch))
    return report


#: The process's meter for gradient reductions (both bindings feed it).
GRADIENTS = OverlapMeter()
