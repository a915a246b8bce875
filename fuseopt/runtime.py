"""Lifecycle of the process's one default context: init, shutdown, topology.

The native core takes an explicit context; this module holds the single one
that Python users see, the way ``hvd.init()`` does.
"""
from __future__ import annotations

from typing import Any, Dict
import atexit
import os
import threading

from . import _launch_notes, _peer_watch
from . import config as _config
from . import horovod_env as _horovod_env
from . import log as _log
from .launcher import records as _records
from ._native import ffi, lib
from .errors import InvalidArgumentError, NotInitializedError, check

_lock = threading.Lock()
_ctx = None
_info = None
_settings = None
_was_shut_down = False
_watch = None


def init(**settings: Any) -> None:
    """Starts fuseopt on this rank. Collective: every rank must call it.

    Keyword arguments override ``FUSEOPT_*`` environment variables; see
    ``fuseopt.config.KNOBS`` (e.g. ``fusion_threshold=4 << 20``). Calling it
    again while initialized does nothing. Without a launcher the process is a
    world of size 1. If another rank fails before or during its init(), this
    one raises RankFailedError naming it (under fuseoptrun, within a second;
    otherwise after ``FUSEOPT_INIT_TIMEOUT_S``).
    """
    global _ctx, _info, _settings, _watch
    with _lock:
        # Horovod's variables become their FUSEOPT_* twins in this process's
        # environment, so that every reader (config, timeline) sees them.
        translated, notices = _horovod_env.translate(os.environ)
        os.environ.update(translated)
        _log.apply_environment_level()
        cfg = _config.build_config(settings)  # a bad setting raises even when already running
        if _ctx is not None:
            return
        aborter = _Aborter()
        watch = _peer_watch.start(aborter)
        out = ffi.new("fuseopt_ctx_t**")
        try:
            check(lib.fuseopt_init(cfg, out))
        except BaseException:
            if watch is not None:
                watch.stop()
            raise
        info = ffi.new("fuseopt_comm_info_t*")
        check(lib.fuseopt_comm_info(out[0], info))
        _ctx, _settings, _watch = out[0], _config.describe(cfg), watch
        _info = {k: getattr(info, k) for k in
                 ("rank", "size", "local_rank", "local_size", "cross_rank", "cross_size")}
        _launch_notes.set_state(_records.RUNNING)
        aborter.attach(out[0])
        _log.set_rank(_info["rank"])
    _refuse_lone_srun_task(_info["size"])
    if _info["rank"] == 0:
        for notice in notices:
            _log.logger.warning("%s", notice)
    from .timeline import start_from_environment
    start_from_environment()
    _info["homogeneous"] = _agree_homogeneous()


def _refuse_lone_srun_task(size):
    """srun without a PMI the mpich wheel speaks (its default --mpi=none)
    starts N processes that each initialise MPI as a world of one: N
    independent jobs that all call themselves rank 0, training N copies
    without a word. Slurm says how many tasks it started; MPI must agree."""
    tasks = os.environ.get("SLURM_STEP_NUM_TASKS", "")
    launched_by_mpi = any(v in os.environ for v in ("PMI_RANK", "PMI_FD", "PMIX_RANK",
                                                    "OMPI_COMM_WORLD_RANK"))
    if size == 1 and tasks.isdigit() and int(tasks) > 1 and not launched_by_mpi:
        shutdown()
        raise InvalidArgumentError(
            "srun started %s tasks, but MPI initialised each as a world of 1 (no PMI reached "
            "it): launch with 'srun --mpi=pmi2 ...' (docs/scaling.md)" % tasks)


def _agree_homogeneous():
    """Collective, once per init: whether every node runs as many ranks."""
    if _info["size"] == 1:
        return True
    from .objects import allgather_object
    counts = allgather_object(_info["local_size"], name="fuseopt.init.local_sizes")
    return len(set(counts)) == 1


class _Aborter:
    """What the peer watch calls with its news: it cancels an init() still
    waiting for its peers, or aborts the running context. Under one lock, so
    that news arriving just as init() returns is not lost between the two."""

    def __init__(self):
        self._lock = threading.Lock()
        self._ctx = None
        self._message = None

    def __call__(self, message):
        with self._lock:
            self._message = message
            ctx = self._ctx
        raw = message.encode("utf-8", "replace")
        if ctx is None:
            lib.fuseopt_cancel_init(lib.FUSEOPT_RANK_FAILED, raw)
        else:
            lib.fuseopt_abort(ctx, lib.FUSEOPT_RANK_FAILED, raw)

    def attach(self, ctx):
        with self._lock:
            self._ctx = ctx
            message = self._message
        if message is not None:
            lib.fuseopt_abort(ctx, lib.FUSEOPT_RANK_FAILED, message.encode("utf-8", "replace"))


def shutdown() -> None:
    """Stops fuseopt on this rank (collective). Pending operations fail with
    ShutDownError. Safe to call twice; init() may be called again afterwards."""
    global _ctx, _was_shut_down, _watch
    with _lock:
        ctx, _ctx = _ctx, None
        watch, _watch = _watch, None
        if watch is not None:
            watch.stop()
        if ctx is not None:
            _was_shut_down = True
            _leave_metrics(ctx)
            try:
                check(lib.fuseopt_shutdown(ctx))
            finally:
                _launch_notes.set_state(_records.SHUT_DOWN)
            from .requests import forget_orphans
            forget_orphans()


atexit.register(shutdown)


def _leave_metrics(ctx):
    """For ``fuseoptrun --metrics-summary``; never in the way of shutting down."""
    if os.environ.get("FUSEOPT_METRICS_SUMMARY") != "1":  # launcher.metrics_summary.ENV
        return
    from .launcher.metrics_summary import write_rank_metrics
    from .overlap import GRADIENTS
    try:
        write_rank_metrics(_info["rank"], dict(_read_metrics(ctx),
                                               exposed_wait_s=GRADIENTS.total_exposed_s,
                                               comm_in_waits_s=GRADIENTS.total_comm_in_waits_s))
    except Exception:
        pass


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


def homogeneous():
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
    return _read_metrics(context())


def _read_metrics(ctx):
    raw = ffi.new("fuseopt_metrics_t*")
    raw.struct_size = ffi.sizeof("fuseopt_metrics_t")
    check(lib.fuseopt_metrics(ctx, raw))
    out = {k: int(getattr(raw, k)) for k in ("rounds", "full_negotiations", "cache_hits",
                                             "cache_misses", "tensors", "collectives", "bytes",
                                             "stalls")}
    out["fusion_threshold_bytes"] = int(raw.fusion_threshold_bytes)
    out["cycle_time_ms"] = raw.cycle_time_us / 1000.0
    out["autotune"] = ("off", "tuning", "done")[raw.autotune_state]
    out["negotiation_s"] = float(raw.negotiation_s)
    out["communication_s"] = float(raw.execution_s)
    return add_rates(out, no_lookups=0.0)


def add_rates(counters, no_lookups):
    """Adds ``mean_bucket_bytes`` and ``cache_hit_rate`` (``no_lookups`` when
    nothing was looked up) to a dict of metrics counters or their deltas."""
    c = counters
    c["mean_bucket_bytes"] = c["bytes"] / c["collectives"] if c["collectives"] else 0.0
    lookups = c["cache_hits"] + c["cache_misses"]
    c["cache_hit_rate"] = c["cache_hits"] / lookups if lookups else no_lookups
    return c


def pending_handles() -> int:
    """Handles issued and not yet waited on (for leak checks)."""
    count = ffi.new("int64_t*")
    check(lib.fuseopt_pending_handles(context(), count))
    return int(count[0])
