"""One fuseopt job on Ray: workers (actors) placed as Horovod places them,
told their ranks and the address of a PMI-1 server in this (the driver's)
process (fuseopt/runner/pmi_server.py), so that they form one MPI world
when the function they run calls ``init()``. RayExecutor holds one World
per ``start()``; ElasticRayExecutor a new one per reset (MPI cannot resize a
world)."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional
import logging
import time

import ray
from ray.exceptions import RayActorError, RayTaskError

from ..base.errors import RankFailedError, ShutDownError, UnsupportedError
from ..runner import add_note
from ..runner.pmi_server import PmiServer
from ..runner.rank_env import oversubscribed
from .placement import Placement, Shape

log = logging.getLogger("fuseopt.ray")

# Errors a rank raises because another rank failed first: never the one to blame.
CONSEQUENCES = (RankFailedError, ShutDownError)
BLAME_WINDOW_S = 1.0  # after the first failure, how long other ranks may report theirs
POLL_S = 0.2


class World:
    """``start()`` places the workers and gives each its rank; ``collect``
    runs a function on all; ``stop()`` kills them (their processes end)."""

    def __init__(self, shape: Shape, placement_timeout_s: float, start_timeout_s: float,
                 interface: Optional[str], extra_env: Dict[str, Any],
                 actor_options: Optional[Dict[str, Any]] = None):
        self.shape, self.interface, self.extra_env = shape, interface, extra_env
        self.start_timeout_s = start_timeout_s
        self.placement = Placement(shape, placement_timeout_s)
        self.actor_options = actor_options or {}
        self.where: List[tuple] = []  # (node id, host, cores, pid) per rank
        self.server: Optional[PmiServer] = None
        self.failure: Optional[str] = None

    @property
    def workers(self) -> List[Any]:
        return self.placement.workers

    def start(self, executable=(None, None, None)) -> "World":
        try:
            workers = self.placement.start_workers(**self.actor_options)
            self.where = ray.get([w.placement.remote() for w in workers],
                                 timeout=self.start_timeout_s)
            self.placement.share_gpus([node for node, _, _, _ in self.where])
            self._join(workers)
            ray.get([w.start_executable.remote(*executable) for w in workers])
        except BaseException:
            self.stop()
            raise
        return self

    def _join(self, workers):
        hosts = [host for _, host, _, _ in self.where]
        cpus = {host: n for _, host, n, _ in self.where}
        order = list(dict.fromkeys(hosts))  # hosts in rank order of first appearance
        self.server = PmiServer(len(workers), host=ray.util.get_node_ip_address(),
                                nodes=[order.index(h) for h in hosts],
                                on_failure=self._on_failure,
                                connect_timeout=self.start_timeout_s).start()
        crowded = oversubscribed(hosts, cpus)
        ray.get([w.join_world.remote(self.server.env(rank), rank, len(workers), crowded,
                                     self.interface, self.extra_env)
                 for rank, w in enumerate(workers)])

    def _on_failure(self, reason: str, kind: str) -> None:
        self.failure = reason
        if kind == "abort":  # MPICH 5's MPI_Abort returns: stop the job, as Hydra would
            log.error("fuseopt.ray: %s; stopping every worker", reason)
            self.stop()

    def stop(self) -> None:
        if self.server is not None:
            self.server.on_failure = None
            self.server.close()
            self.server = None
        self.placement.remove()

    def collect(self, fn: Callable[[Any], Any], callbacks=None,
                on_tick: Callable[[], None] = lambda: None):
        """Runs ``fn(executable)`` on every worker. Returns ({rank: value},
        {rank: the Ray error} in order of arrival): after a first failure,
        the other ranks have BLAME_WINDOW_S to report theirs."""
        queue = _callback_queue(self.workers, callbacks)
        refs = [w.execute.remote(fn) for w in self.workers]
        rank_of = {ref: rank for rank, ref in enumerate(refs)}
        results: Dict[int, Any] = {}
        failures: Dict[int, BaseException] = {}
        first = None
        pending = list(refs)
        while pending and not (first and time.monotonic() - first > BLAME_WINDOW_S):
            ready, pending = ray.wait(pending, num_returns=1, timeout=POLL_S)
            _drain(queue, callbacks)
            on_tick()
            for ref in ready:
                try:
                    results[rank_of[ref]] = ray.get(ref)
                except (RayActorError, RayTaskError) as e:
                    failures[rank_of[ref]] = e
                    first = first or time.monotonic()
        _drain(queue, callbacks, last=True)
        return results, failures

    def raise_failure(self, failures: Dict[int, BaseException], method: str):
        """Stops every worker and raises the failure of the rank to blame:
        the first that was not a consequence of another's."""
        size, where = len(self.where), dict(enumerate(self.where))
        self.stop()
        own = own_failures(failures)
        rank, error = next(iter((own or failures).items()))
        _, host, _, pid = where.get(rank, (None, "?", 0, 0))
        if isinstance(error, RayTaskError) and isinstance(cause(error), BaseException):
            add_note(cause(error), "raised on rank %d of %d (Ray worker on %s, pid %s) in %s; "
                     "every worker was stopped" % (rank, size, host, pid, method))
            raise cause(error)
        raise RankFailedError(
            "%s: rank %d of %d (Ray worker on %s, pid %s) died: %s. Every worker was stopped"
            % (method, rank, size, host, pid, str(error).splitlines()[0].rstrip(".")))


def own_failures(failures: Dict[int, BaseException]) -> Dict[int, BaseException]:
    """The failures that are not only the loss of another rank (a dead
    worker's counts: it is the loss)."""
    return {r: e for r, e in failures.items() if not isinstance(cause(e), CONSEQUENCES)}


def refuse_ray_client():
    if ray.util.client.ray.is_connected():
        raise UnsupportedError(
            "fuseopt.ray under Ray Client (ray.init('ray://...')): the workers meet through a "
            "server in the driver's process, which must run on a node of the cluster; submit "
            "the script as a Ray job (ray job submit) instead")


def cause(error):
    """The exception a rank raised, inside Ray's error (None for a dead actor)."""
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
