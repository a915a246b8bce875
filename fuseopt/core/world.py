"""The world this process runs in: its one default native context, its place
in the job (rank, size, node), and that context's settings and counters.

Requests, operations, the overlap meter and the bindings read it; only
:mod:`fuseopt.api.runtime` (init/shutdown) changes it.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from ..base._native import ffi, lib
from ..base.errors import NotInitializedError, check
from ..base.metrics_math import add_rates

_ctx = None
_info: Dict[str, Any] = {}
_settings: Optional[Dict[str, Any]] = None
_was_shut_down = False


def attach(ctx, info: Dict[str, Any], settings: Dict[str, Any]) -> None:
    """Called by init() once the native context runs."""
    global _ctx, _info, _settings
    _ctx, _info, _settings = ctx, dict(info), settings


def detach():
    """Called by shutdown(): forgets the context and returns it (or None)."""
    global _ctx, _was_shut_down
    ctx, _ctx = _ctx, None
    if ctx is not None:
        _was_shut_down = True
    return ctx


def set_homogeneous(value: bool) -> None:
    _info["homogeneous"] = value


def is_initialized() -> bool:
    """Whether ``init()`` has run on this rank and ``shutdown()`` has not."""
    return _ctx is not None


def context():
    """The native context, or NotInitializedError."""
    ctx = _ctx
    if ctx is None:
        raise NotInitializedError(
            "fuseopt has been shut down; call fuseopt.init() again to use it" if _was_shut_down
            else "fuseopt has not been initialized: call fuseopt.init() first")
    return ctx


def _topology(key):
    context()
    return _info[key]


def rank() -> int:
    """This process's rank in the job, 0..size()-1."""
    return _topology("rank")


def size() -> int:
    """Number of ranks in the job."""
    return _topology("size")


def local_rank() -> int:
    """Rank among the processes on this node."""
    return _topology("local_rank")


def local_size() -> int:
    """Number of ranks on this node."""
    return _topology("local_size")


def cross_rank() -> int:
    """Index of this node among the nodes."""
    return _topology("cross_rank")


def cross_size() -> int:
    """Number of nodes."""
    return _topology("cross_size")


def homogeneous() -> bool:
    """Whether every node runs the same number of ranks (see is_homogeneous)."""
    return _topology("homogeneous")


def settings() -> Dict[str, Any]:
    """The knob values this rank was initialized with, as a dict."""
    context()
    return dict(_settings or {})


def metrics() -> Dict[str, Any]:
    """Counters since ``init()`` on this rank, as a dict.

    ``tensors`` completed in ``collectives`` (fused buckets, one collective
    call each) carrying ``bytes`` of this rank's data; ``mean_bucket_bytes``;
    ``rounds`` of negotiation, ``full_negotiations`` among them (the rest were
    answered by the response cache: ``cache_hit_rate`` of enqueued tensors);
    ``negotiation_s`` and ``communication_s``, the background thread's time
    negotiating and running collectives; ``stalls`` warned about; the
    ``fusion_threshold_bytes`` and ``cycle_time_ms`` in use now and the
    ``autotune`` state ("off", "tuning" or "done")."""
    return read_metrics(context())


_AUTOTUNE_STATES = {lib.FUSEOPT_AUTOTUNE_OFF: "off", lib.FUSEOPT_AUTOTUNE_TUNING: "tuning",
                    lib.FUSEOPT_AUTOTUNE_DONE: "done"}


def read_metrics(ctx) -> Dict[str, Any]:
    """metrics() of a given context (shutdown() reads them on its way out)."""
    raw = ffi.new("fuseopt_metrics_t*")
    raw.struct_size = ffi.sizeof("fuseopt_metrics_t")
    check(lib.fuseopt_metrics(ctx, raw))
    out: Dict[str, Any] = {k: int(getattr(raw, k)) for k in (
        "rounds", "full_negotiations", "cache_hits", "cache_misses", "tensors", "collectives",
        "bytes", "stalls")}
    out["fusion_threshold_bytes"] = int(raw.fusion_threshold_bytes)
    out["cycle_time_ms"] = raw.cycle_time_us / 1000.0
    out["autotune"] = _AUTOTUNE_STATES[raw.autotune_state]
    out["negotiation_s"] = float(raw.negotiation_s)
    out["communication_s"] = float(raw.execution_s)
    return add_rates(out, no_lookups=0.0)


def pending_handles() -> int:
    """Handles issued and not yet waited on (for leak checks)."""
    count = ffi.new("int64_t*")
    check(lib.fuseopt_pending_handles(context(), count))
    return int(count[0])
