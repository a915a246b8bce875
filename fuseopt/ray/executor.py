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

With ``min_workers`` (Horovod 0.28's elastic form), ``start`` and ``run``
are ElasticRayExecutor's (elastic.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional
import functools

import ray

from ..base.errors import UnsupportedError
from ..runner.rank_env import one_interface
from .placement import Shape
from .world import World, refuse_ray_client


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
        if min_workers and num_workers:
            raise ValueError("give num_workers (a fixed job) or min_workers (an elastic one), "
                             "not both")
        if cooldown_range is not None:
            raise UnsupportedError("RayExecutor(cooldown_range=...): a lost worker's node is "
                                   "offered again as soon as Ray sees it alive (no cooldown)")
        self.settings = settings
        self.settings.elastic = min_workers is not None
        self._interface = one_interface(getattr(settings, "nics", None))
        self._world: Optional[World] = None
        self._failure: Optional[str] = None
        self._elastic = None
        if min_workers is not None:  # Horovod 0.28's elastic RayExecutor
            from .elastic import ElasticRayExecutor, ElasticSettings
            self._elastic = ElasticRayExecutor(
                ElasticSettings(min_num_proc=min_workers, max_num_proc=max_workers,
                                reset_limit=reset_limit, elastic_timeout=elastic_timeout,
                                timeout_s=settings.timeout_s, nics=settings.nics),
                use_gpu=use_gpu, cpus_per_slot=cpus_per_worker, gpus_per_slot=gpus_per_worker,
                override_discovery=override_discovery)
            self._shape = Shape(max_workers or min_workers, None, 1, cpus_per_worker, use_gpu,
                                gpus_per_worker, False)
            return
        if (num_workers is None) == (num_hosts is None):
            raise ValueError("give num_workers, or num_hosts (with num_workers_per_host), "
                             "not both")
        self._shape = Shape(num_workers, num_hosts, num_workers_per_host, cpus_per_worker,
                            use_gpu, gpus_per_worker, use_current_placement_group)

    @property
    def num_workers(self) -> int:
        return self._shape.size

    @property
    def workers(self) -> List[Any]:
        return self._world.workers if self._world else []

    # ---- start and shutdown -------------------------------------------------
    def start(self, executable_cls: Optional[type] = None,
              executable_args: Optional[List] = None,
              executable_kwargs: Optional[Dict] = None,
              extra_env_vars: Optional[Dict] = None) -> None:
        """Places the workers, tells each its rank and the PMI server's
        address, and builds ``executable_cls(*executable_args,
        **executable_kwargs)`` in each (what ``execute`` passes to its fn)."""
        if self._world is not None:
            raise RuntimeError("RayExecutor.start: already started (shutdown() first)")
        refuse_ray_client()
        if self._elastic is not None:
            if executable_cls is not None:
                raise UnsupportedError("an elastic RayExecutor (min_workers=) runs functions "
                                       "with run(); executable_cls is for fixed-size jobs")
            self._elastic.env_vars.update(extra_env_vars or {})
            return self._elastic.start()
        self._failure = None
        self._world = World(self._shape, self.settings.placement_group_timeout_s,
                            self.settings.timeout_s, self._interface,
                            dict(extra_env_vars or {}))
        try:
            self._world.start((executable_cls, executable_args, executable_kwargs))
        except BaseException:
            self._world = None
            raise

    def shutdown(self) -> None:
        """Stops every worker (their processes end) and removes the
        placement group this executor made."""
        if self._world is not None:
            self._world.stop()
        self._world = None

    # ---- running functions --------------------------------------------------
    def execute(self, fn: Callable[[Any], Any],
                callbacks: Optional[List[Callable]] = None) -> List[Any]:
        """``fn(executable)`` on every worker; the results in rank order."""
        return self._gather(fn, callbacks, "execute")

    def run(self, fn: Callable[..., Any], args: Optional[List] = None,
            kwargs: Optional[Dict] = None,
            callbacks: Optional[List[Callable]] = None) -> List[Any]:
        """``fn(*args, **kwargs)`` on every worker; the results in rank order.
        ``callbacks`` receive each value rank 0 logs with ``ray_logger.log``.
        Elastic (``min_workers=``): ``fn`` runs in a new world after each reset
        (ElasticRayExecutor.run)."""
        if self._elastic is not None:
            return self._elastic.run(functools.partial(fn, *(args or ()), **(kwargs or {})),
                                     callbacks)
        return self._gather(call_with(fn, args, kwargs), callbacks, "run")

    def run_remote(self, fn: Callable[..., Any], args: Optional[List] = None,
                   kwargs: Optional[Dict] = None) -> List[Any]:
        """As ``run``, without waiting: one ObjectRef per rank, for
        ``ray.get``. Failures are then the caller's to handle."""
        call = call_with(fn, args, kwargs)
        return [w.execute.remote(call) for w in self._started("run_remote").workers]

    def execute_single(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(executable)`` on rank 0 only."""
        return ray.get(self._started("execute_single").workers[0].execute.remote(fn))

    def _started(self, method) -> World:
        if self._elastic is not None:
            raise UnsupportedError("RayExecutor.%s: an elastic RayExecutor (min_workers=) "
                                   "runs functions with run() only" % method)
        if self._world is None:
            raise RuntimeError("RayExecutor.%s: no workers (call start() first%s)" % (
                method, "; the last run failed: " + self._failure if self._failure else ""))
        return self._world

    def _gather(self, fn, callbacks, method):
        world = self._started(method)
        results, failures = world.collect(fn, callbacks)
        if failures:
            self._world = None
            self._failure = "a rank failed"
            world.raise_failure(failures, "RayExecutor." + method)
        return [results[r] for r in range(len(world.workers))]


def call_with(fn, args, kwargs):
    """What a worker's execute() calls for run(fn, args, kwargs)."""
    return functools.partial(_call, fn, tuple(args or ()), dict(kwargs or {}))


def _call(fn, args, kwargs, executable):
    return fn(*args, **kwargs)

