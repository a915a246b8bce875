"""Lifecycle of the process's one default context: init and shutdown.

The top of the Python core: it starts the native context, hands it to
:mod:`fuseopt.core.world` (which everything else reads), and runs what must happen
around it (Horovod's variables, the peer watch, the timeline, process sets,
the metrics record for fuseoptrun). Nothing below imports it.
"""
from __future__ import annotations

from typing import Any
import atexit
import os
import threading

from ..base import launch_notes, launch_records
from ..core import failing_exit, peer_watch, output_pool, world
from ..core import config as _config
from ..core import horovod_env as _horovod_env
from ..base import log as _log
from ..base._native import ffi, lib
from ..base.errors import InvalidArgumentError, UnsupportedError, check
from .objects import allgather_object
from .overlap import GRADIENTS
from ..core.process_sets import ProcessSet, add_process_set, existing_id, global_process_set
from ..core.handles import forget_orphans
from .timeline import start_from_environment

_lock = threading.Lock()
_watch = None


def init(comm: Any = None, process_sets: Any = None, **settings: Any) -> None:
    """Starts fuseopt on this rank. Collective: every rank must call it.

    Keyword arguments override ``FUSEOPT_*`` environment variables; see
    ``fuseopt.core.config.KNOBS`` (e.g. ``fusion_threshold=4 << 20``). Calling it
    again while initialized does nothing. Without a launcher the process is a
    world of size 1. If another rank fails before or during its init(), this
    one raises RankFailedError naming it (under fuseoptrun, within a second;
    otherwise after ``FUSEOPT_INIT_TIMEOUT_S``).

    As Horovod's ``init(comm=None, process_sets=None)``: ``process_sets``
    (ProcessSets or lists of ranks) are added on every rank, in order;
    ``"dynamic"`` is accepted (sets can always be added later). ``comm``: an
    mpi4py communicator with every rank of the job (``MPI.COMM_WORLD``, or a
    duplicate) or the list of all ranks; fuseopt runs on every rank of the
    job, so a subset raises UnsupportedError (use process sets).
    """
    if comm is not None and not isinstance(comm, (list, tuple, range)):
        _require_the_whole_world(comm)
    mpi_elsewhere = failing_exit.mpi_started_elsewhere()
    _start_context(settings)
    if mpi_elsewhere:
        failing_exit.arm()
    if comm is not None and isinstance(comm, (list, tuple, range)) \
            and sorted(comm) != list(range(world.size())):
        size = world.size()
        shutdown()
        raise UnsupportedError("init(comm=%r): fuseopt runs on every rank of the job (%d); "
                               "use process sets for a subset" % (list(comm), size))
    if process_sets not in (None, "dynamic"):
        _add_process_sets(process_sets)


def _require_the_whole_world(comm):
    """An mpi4py communicator must hold every rank of the job, in order."""
    try:
        from mpi4py import MPI
        same = MPI.Comm.Compare(comm, MPI.COMM_WORLD) in (MPI.IDENT, MPI.CONGRUENT)
    except Exception as e:  # not an mpi4py communicator
        raise InvalidArgumentError("init(comm=...) takes an mpi4py communicator or a list of "
                                   "ranks, not %r (%s)" % (comm, e)) from None
    if not same:
        raise UnsupportedError("init(comm=...): this communicator is not MPI.COMM_WORLD (or a "
                               "duplicate of it); fuseopt runs on every rank of the job: start "
                               "a separate job for a subset, or use process sets")


def _start_context(settings):
    global _watch
    with _lock:
        # Horovod's variables become their FUSEOPT_* twins in this process's
        # environment, so that every reader (config, timeline) sees them.
        translated, notices = _horovod_env.translate(os.environ)
        os.environ.update(translated)
        _log.apply_environment_level()
        cfg = _config.build_config(settings)  # a bad setting raises even when already running
        if world.is_initialized():
            return
        aborter = _Aborter()
        watch = peer_watch.start(aborter)
        out = ffi.new("fuseopt_ctx_t**")
        try:
            check(lib.fuseopt_init(cfg, out))
        except BaseException:
            if watch is not None:
                watch.stop()
            raise
        info = ffi.new("fuseopt_comm_info_t*")
        check(lib.fuseopt_comm_info(out[0], info))
        world.attach(out[0], {k: getattr(info, k) for k in ("rank", "size", "local_rank",
                                                           "local_size", "cross_rank",
                                                           "cross_size")},
                     _config.describe(cfg))
        _watch = watch
        global_process_set.ranks = list(range(info.size))  # Horovod's, from init on
        launch_notes.set_state(launch_records.RUNNING)
        aborter.attach(out[0])
        _log.set_rank(info.rank)
    _refuse_lone_srun_task(world.size())
    if world.rank() == 0:
        for notice in notices:
            _log.logger.warning("%s", notice)
    start_from_environment()
    world.set_homogeneous(_agree_homogeneous())


def _add_process_sets(process_sets):
    """As Horovod's init: every entry is added in order, or takes the id of
    the set of its ranks that an earlier init call added. An entry with the
    ranks of the global set or of an earlier entry is a duplicate: once the
    others are in, ValueError names it (on every rank: they pass the same
    list, or the adds fail with MismatchError)."""
    everyone = tuple(range(world.size()))
    seen, duplicate = {everyone}, None
    for number, ps in enumerate(process_sets):
        ps = ps if isinstance(ps, ProcessSet) else ProcessSet(ps)
        ranks = everyone if ps.process_set_id == 0 else tuple(ps.ranks)
        if ranks in seen:
            if ps.process_set_id != 0:  # the global set object itself stays valid
                ps.process_set_id, ps._ctx = None, None
            duplicate = duplicate or (number, ps)
            continue
        seen.add(ranks)
        if ps._added():
            continue
        ident = existing_id(ranks)
        if ident is not None:
            ps.process_set_id, ps._ctx = ident, world.context()
        else:
            add_process_set(ps)
    if duplicate is not None:
        raise InvalidArgumentError("init(process_sets=...): entry number %d is a duplicate (of "
                                   "the global set or an earlier entry): %r" % duplicate)


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
    if world.size() == 1:
        return True
    counts = allgather_object(world.local_size(), name="fuseopt.init.local_sizes")
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
    global _watch
    with _lock:
        watch, _watch = _watch, None
        if watch is not None:
            watch.stop()
        rank = world.rank() if world.is_initialized() else None
        ctx = world.detach()
        if ctx is not None:
            _leave_metrics(ctx, rank)
            try:
                check(lib.fuseopt_shutdown(ctx))
            finally:
                launch_notes.set_state(launch_records.SHUT_DOWN)
            forget_orphans()
            output_pool.clear()


atexit.register(shutdown)


def _leave_metrics(ctx, rank):
    """For ``fuseoptrun --metrics-summary``; never in the way of shutting down."""
    if os.environ.get(launch_records.METRICS_SUMMARY_ENV) != "1":
        return
    try:
        launch_records.write_rank_metrics(rank, dict(world.read_metrics(ctx),
                                                 exposed_wait_s=GRADIENTS.total_exposed_s,
                                                 comm_in_waits_s=GRADIENTS.total_comm_in_waits_s))
    except Exception:
        pass
