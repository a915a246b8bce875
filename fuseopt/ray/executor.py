"""``RayExecutor``: Horovod's ``horovod.ray.RayExecutor`` over fuseopt.

The workers are Ray actors placed as Horovod places them (placement.py).
They form one MPI world through a PMI-1 server in this (the driver's)
process (fuseopt/runner/pmi_server.py): no mpiexec, no ssh, and MPICH's
shared-memory path between the workers of one host. The world is made
when the function a worker runs calls ``init()``, and lasts until
``shutdown()``.

A rank that fails ends the run: its exception (or, for a worker that died,
a RankFailedError naming it) is raised in the caller, naming the rank, and
every worker is stopped, since the others would otherwise wait for it in
their next collective. ``start()`` again for a new world.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional
import functools
import logging
import time

import ray
from ray.exceptions import RayActorError, RayTaskError

from ..base.errors import RankFailedError, ShutDownError, UnsupportedError
from ..runner.pmi_server import PmiServer
from ..runner.rank_env import one_interface, oversubscribed
from .placement import Placement, Shape

log = logging.getLogger("fuseopt.ray")

# Errors a rank raises because another rank failed first: never the one to blame.
_CONSEQUENCES = (RankFailedError, ShutDownError)
_BLAME_WINDOW_S = 1.0  # after the first failure, how long other ranks may report theirs


@dataclass
class MiniSettings:
    """What ``RayExecutor.create_settings`` returns (Horovod's name)."""
    ssh_identity_file: Optional[str] = None
    ssh_str: Optional[str] = None
    timeout_s: int = 30
    placement_group_timeout_s: int = 100
    nics: Optional[set] = None
    elastic: bool = False

    @property
    def start_timeout(self) -> int:
        return self.timeout_s


class RayExecutor:
    """Runs functions on ``num_workers`` Ray actors that form one fuseopt job
    (or ``num_hosts`` x ``num_workers_per_host``). Horovod's arguments and
    methods: ``start``, ``run``, ``execute``, ``run_remote``,
    ``execute_single``, ``shutdown``."""

    @classmethod
    def create_settings(cls, timeout_s: int = 30, ssh_identity_file: Optional[str] = None,
                        ssh_str: Optional[str] = None, placement_group_timeout_s: int = 100,
                        nics: Optional[set] = None) -> MiniSettings:
        """``timeout_s``: how long start() waits for the workers to report
        where they run. ``nics``: the one network interface MPI's data uses.
        ssh settings are accepted and unused: nothing here goes through ssh."""
        return MiniSettings(ssh_identity_file=ssh_identity_file, ssh_str=ssh_str,
                            timeout_s=timeout_s,
                            placement_group_timeout_s=placement_group_timeout_s, nics=nics)

    def __init__(self, settings: MiniSettings, num_workers: Optional[int] = None,
                 num_hosts: Optional[int] = None, num_workers_per_host: int = 1,
                 cpus_per_worker: float = 1, use_gpu: bool = False,
                 gpus_per_worker: Optional[float] = None,
                 use_current_placement_group: bool = True, min_workers: Optional[int] = None,
                 max_workers: Optional[int] = None, reset_limit: Optional[int] = None,
                 cooldown_range: Optional[List[int]] = None, elastic_timeout: int = 600,
                 override_discovery: bool = True):
        if max_workers and (not min_workers or min_workers <= 0):
            raise ValueError("max_workers needs a positive min_workers (an elastic job)")
        if min_workers is not None:
            raise UnsupportedError(
                "RayExecutor(min_workers=...): fuseopt has no elastic Ray executor; run a fixed "
                "num_workers, or an elastic job under fuseoptrun --min-np (docs/scaling.md, "
                "'Running inside Ray')")
        if (num_workers is None) == (num_hosts is None):
            raise ValueError("give num_workers, or num_hosts (with num_workers_per_host), "
                             "not both")
        self.settings = settings
        self.settings.elastic = False
        self._shape = Shape(num_workers, num_hosts, num_workers_per_host, cpus_per_worker,
                            use_gpu, gpus_per_worker, use_current_placement_group)
        self._interface = one_interface(getattr(settings, "nics", None))
        self._placement: Optional[Placement] = None
        self._server: Optional[PmiServer] = None
        self._where: List[tuple] = []
        self._failure: Optional[str] = None

    @property
    def num_workers(self) -> int:
        return self._shape.size

    @property
    def workers(self) -> List[Any]:
        return self._placement.workers if self._placement else []

    # ---- start and shutdown -------------------------------------------------
    def start(self, executable_cls: Optional[type] = None,
              executable_args: Optional[List] = None,
              executable_kwargs: Optional[Dict] = None,
              extra_env_vars: Optional[Dict] = None) -> None:
        """Places the workers, tells each its rank and the PMI server's
        address, and builds ``executable_cls(*executable_args,
        **executable_kwargs)`` in each (what ``execute`` passes to its fn)."""
        if self._placement is not None:
            raise RuntimeError("RayExecutor.start: already started (shutdown() first)")
        if ray.util.client.ray.is_connected():
            raise UnsupportedError(
                "RayExecutor under Ray Client (ray.init('ray://...')): the workers meet through "
                "a server in the driver's process, which must run on a node of the cluster; "
                "submit the script as a Ray job (ray job submit) instead")
        self._failure = None
        self._placement = Placement(self._shape, self.settings.placement_group_timeout_s)
        try:
            workers = self._placement.start_workers()
            self._where = ray.get([w.placement.remote() for w in workers],
                                  timeout=self.settings.timeout_s)
            self._placement.share_gpus([node for node, _, _, _ in self._where])
            self._open_world(workers, dict(extra_env_vars or {}))
            ray.get([w.start_executable.remote(executable_cls, executable_args,
                                               executable_kwargs) for w in workers])
        except BaseException:
            self.shutdown()
            raise

    def _open_world(self, workers, extra_env):
        hosts = [host for _, host, _, _ in self._where]
        cpus = {host: n for _, host, n, _ in self._where}
        order = list(dict.fromkeys(hosts))  # hosts in rank order of first appearance
        self._server = PmiServer(len(workers), host=ray.util.get_node_ip_address(),
                                 nodes=[order.index(h) for h in hosts],
                                 on_failure=self._on_world_failure).start()
        crowded = oversubscribed(hosts, cpus)
        ray.get([w.join_world.remote(self._server.env(rank), rank, len(workers), crowded,
                                     self._interface, extra_env)
                 for rank, w in enumerate(workers)])

    def _on_world_failure(self, reason: str, kind: str) -> None:
        self._failure = reason
        if kind == "abort":  # MPICH 5's MPI_Abort returns: stop the job, as Hydra would
            log.error("fuseopt.ray: %s; stopping every worker", reason)
            self._stop_workers()

    def _stop_workers(self):
        if self._server is not None:
            self._server.on_failure = None
            self._server.close()
            self._server = None
        if self._placement is not None:
            self._placement.remove()

    def shutdown(self) -> None:
        """Stops every worker (their processes end) and removes the
        placement group this executor made."""
        self._stop_workers()
        self._placement = None
        self._where = []

    # ---- running functions --------------------------------------------------
    def execute(self, fn: Callable[[Any], Any],
                callbacks: Optional[List[Callable]] = None) -> List[Any]:
        """``fn(executable)`` on every worker; the results in rank order."""
        return self._gather(fn, callbacks, "execute")

    def run(self, fn: Callable[..., Any], args: Optional[List] = None,
            kwargs: Optional[Dict] = None,
            callbacks: Optional[List[Callable]] = None) -> List[Any]:
        """``fn(*args, **kwargs)`` on every worker; the results in rank order.
        ``callbacks`` receive each value rank 0 logs with ``ray_logger.log``."""
        call = functools.partial(_call, fn, tuple(args or ()), dict(kwargs or {}))
        return self._gather(call, callbacks, "run")

    def run_remote(self, fn: Callable[..., Any], args: Optional[List] = None,
                   kwargs: Optional[Dict] = None) -> List[Any]:
        """As ``run``, without waiting: one ObjectRef per rank, for
        ``ray.get``. Failures are then the caller's to handle."""
        call = functools.partial(_call, fn, tuple(args or ()), dict(kwargs or {}))
        return [w.execute.remote(call) for w in self._started("run_remote")]

    def execute_single(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(executable)`` on rank 0 only."""
        return ray.get(self._started("execute_single")[0].execute.remote(fn))

    def _started(self, method):
        if self._placement is None or not self._placement.workers:
            raise RuntimeError("RayExecutor.%s: no workers (call start() first%s)" % (
                method, "; the last run failed: " + self._failure if self._failure else ""))
        return self._placement.workers

    def _gather(self, fn, callbacks, method):
        workers = self._started(method)
        queue = _callback_queue(workers, callbacks)
        refs = [w.execute.remote(fn) for w in workers]
        rank_of = {ref: rank for rank, ref in enumerate(refs)}
        results: Dict[int, Any] = {}
        failures: Dict[int, BaseException] = {}
        first_failure = None
        pending = list(refs)
        while pending and not (first_failure and time.monotonic() - first_failure >
                               _BLAME_WINDOW_S):
            ready, pending = ray.wait(pending, num_returns=1, timeout=0.2)
            _drain(queue, callbacks)
            for ref in ready:
                try:
                    results[rank_of[ref]] = ray.get(ref)
                except (RayActorError, RayTaskError) as e:
                    failures[rank_of[ref]] = e
                    first_failure = first_failure or time.monotonic()
        _drain(queue, callbacks, last=True)
        if failures:
            self._fail(failures, method)
        return [results[r] for r in range(len(workers))]

    def _fail(self, failures: Dict[int, BaseException], method: str):
        """Stops every worker and raises the failure of the rank to blame."""
        size = self.num_workers
        where = dict(enumerate(self._where))
        self._stop_workers()
        self._placement = None
        own = {r: e for r, e in failures.items()
               if not isinstance(_cause(e), _CONSEQUENCES)}
        rank, error = min((own or failures).items())
        _, host, _, pid = where.get(rank, (None, "?", 0, 0))
        self._failure = "rank %d of %d failed" % (rank, size)
        if isinstance(error, RayTaskError) and isinstance(_cause(error), BaseException):
            cause = _cause(error)
            cause.add_note("raised on rank %d of %d (Ray worker on %s, pid %s) in "
                           "RayExecutor.%s; every worker was stopped"
                           % (rank, size, host, pid, method))
            raise cause
        raise RankFailedError(
            "RayExecutor.%s: rank %d of %d (Ray worker on %s, pid %s) died: %s. Every worker "
            "was stopped; start() again for a new job" % (method, rank, size, host, pid,
                                                           str(error).splitlines()[0].rstrip(".")))


def _call(fn, args, kwargs, executable):
    return fn(*args, **kwargs)


def _cause(error):
    return getattr(error, "cause", None)


def _callback_queue(workers, callbacks):
    """A Ray queue that rank 0's ray_logger.log feeds, when callbacks listen."""
    if not callbacks:
        ray.get([w.set_queue.remote(None) for w in workers])
        return None
    from ray.util.queue import Queue
    queue = Queue()
    ray.get([w.set_queue.remote(queue if rank == 0 else None)
             for rank, w in enumerate(workers)])
    return queue


def _drain(queue, callbacks, last=False):
    while queue is not None and not queue.empty():
        value = queue.get()
        for callback in callbacks:
            callback(value)
    if last and queue is not None:
        queue.shutdown()  # the queue's actor
