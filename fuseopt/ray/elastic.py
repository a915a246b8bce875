"""``ElasticRayExecutor``: Horovod's elastic training on Ray, over fuseopt's
elastic model (fuseopt/training/elastic.py).

MPI cannot resize a running world, so a reset is a new world of new actors,
as under ``fuseoptrun --min-np/--max-np`` (fuseopt/launcher/elastic/driver.py,
whose logic this follows with Ray in place of mpiexec):

- the executor counts the cluster's slots (``RayHostDiscovery``: each alive
  node's CPUs over ``cpus_per_slot``, GPUs too with ``use_gpu``), waits up to
  ``elastic_timeout`` for ``min_num_proc`` of them, and starts a world of as
  many workers as there are slots, ``max_num_proc`` at most;
- the workers' ``hvd.elastic.run`` functions commit their state to a store on
  each host (``$FUSEOPT_ELASTIC_DIR``), which outlives the actors;
- when discovery finds another number of slots, the executor tells rank 0
  (a notice in its launch directory): at the next ``state.commit()`` every
  rank raises HostsUpdatedInterrupt, commits, and ends for a reset; when a
  worker dies (its node lost, killed), the executor stops the others;
- either way it starts a new world, whose ranks restore the newest commit a
  host kept, until the function returns on every rank, an error of the
  function ends the run, or ``reset_limit`` resets have been done.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional
import functools
import logging
import math
import os
import random
import shutil
import tempfile
import time
import uuid
import warnings

import ray

from ..base.errors import UnsupportedError
from ..training import elastic_protocol as _proto
from ..runner.rank_env import one_interface
from .placement import Shape
from .world import World, cause, own_failures, refuse_ray_client

log = logging.getLogger("fuseopt.ray")
DISCOVERY_INTERVAL_S = 1.0  # Horovod's


class RayHostDiscovery:
    """Horovod's: the cluster's slots per node, from Ray's state."""

    def __init__(self, use_gpu: bool = False, cpus_per_slot: float = 1, gpus_per_slot: float = 1):
        self.use_gpu, self.cpus_per_slot, self.gpus_per_slot = use_gpu, cpus_per_slot, gpus_per_slot

    def find_available_hosts_and_slots(self) -> Dict[str, int]:
        """{node: slots} of the alive nodes with a slot (keyed by node id,
        so that two raylets of one machine count as two nodes)."""
        slots = {}
        for node in ray.nodes():
            if not node.get("Alive", node.get("alive")):
                continue
            resources = node.get("Resources", {})
            n = resources.get("CPU", 0) // self.cpus_per_slot
            if self.use_gpu:
                n = min(n, resources.get("GPU", 0) // self.gpus_per_slot)
            if n >= 1:
                slots[node["NodeID"]] = int(math.floor(n))
        return slots


class TestDiscovery(RayHostDiscovery):
    """Horovod's test discovery: every ``change_frequency_s`` it hides a
    random node from the executor or shows a hidden one again, keeping
    between ``min_hosts`` and ``max_hosts`` visible (nothing is killed)."""

    def __init__(self, min_hosts, max_hosts, change_frequency_s, use_gpu=False,
                 cpus_per_slot=1, gpus_per_slot=1, verbose=True, _graceful=True):
        super().__init__(use_gpu=use_gpu, cpus_per_slot=cpus_per_slot,
                         gpus_per_slot=gpus_per_slot)
        if not _graceful:
            raise UnsupportedError("TestDiscovery(_graceful=False) kills Ray nodes through the "
                                   "autoscaler: not in fuseopt")
        self.min_hosts, self.max_hosts = min_hosts, max_hosts
        self.change_frequency_s, self.verbose = change_frequency_s, verbose
        self._hidden: set = set()
        self._last_change: Optional[float] = None

    def find_available_hosts_and_slots(self) -> Dict[str, int]:
        hosts = super().find_available_hosts_and_slots()
        now = time.time()
        self._hidden &= set(hosts)
        if self._last_change is None:
            self._last_change = now
        elif now - self._last_change >= self.change_frequency_s:
            self._last_change = now
            visible = [h for h in hosts if h not in self._hidden]
            grow = len(visible) <= self.min_hosts or (
                len(visible) < self.max_hosts and random.random() < 0.5)
            if grow and self._hidden:
                self._hidden.remove(random.choice(sorted(self._hidden)))
            elif not grow and visible:
                self._hidden.add(random.choice(sorted(visible)))
        remaining = {h: n for h, n in hosts.items() if h not in self._hidden}
        if self.verbose:
            print("TestDiscovery: %d of %d nodes visible" % (len(remaining), len(hosts)))
        return remaining


@dataclass
class ElasticSettings:
    """What ``ElasticRayExecutor.create_settings`` returns (Horovod's name)."""
    min_num_proc: int = 1
    max_num_proc: Optional[int] = None
    reset_limit: Optional[int] = None
    elastic_timeout: float = 600
    timeout_s: float = 30
    nics: Any = None
    discovery: Any = None
    verbose: int = 1


class _Reset:
    """What a worker returns when its rank ended for a reset."""


def _elastic_call(fn, executable):
    try:
        return fn()
    except SystemExit as e:
        if e.code == _proto.RESET_EXIT_CODE:  # fuseopt's elastic run: start a new world
            return _Reset()
        raise


class ElasticRayExecutor:
    """Runs an elastic function (one that calls ``hvd.elastic.run``) on as
    many workers as the cluster has slots, between ``min_num_proc`` and
    ``max_num_proc``, starting a new world whenever that number changes or a
    worker dies (see the module docstring)."""

    @staticmethod
    def create_settings(min_num_proc: int = 1, max_num_proc: Optional[int] = None,
                        reset_limit: Optional[int] = None, elastic_timeout: float = 600,
                        timeout_s: float = 30, ssh_identity_file: Optional[str] = None,
                        nics: Any = None, min_np: Optional[int] = None,
                        max_np: Optional[int] = None, **kwargs) -> ElasticSettings:
        """Horovod's arguments (``min_np``/``max_np``: the older names). ssh
        settings are accepted and unused: nothing here goes through ssh."""
        if min_np is not None:
            warnings.warn("min_np is deprecated, use min_num_proc instead", DeprecationWarning)
            min_num_proc = min_np
        if max_np is not None:
            warnings.warn("max_np is deprecated, use max_num_proc instead", DeprecationWarning)
            max_num_proc = max_np
        return ElasticSettings(min_num_proc=min_num_proc, max_num_proc=max_num_proc,
                               reset_limit=reset_limit, elastic_timeout=elastic_timeout,
                               timeout_s=timeout_s, nics=nics,
                               verbose=int(kwargs.get("verbose", 1)))

    def __init__(self, settings: ElasticSettings, use_gpu: bool = False,
                 cpus_per_slot: float = 1, gpus_per_slot: Optional[float] = None,
                 env_vars: Optional[Dict[str, Any]] = None, override_discovery: bool = True):
        if gpus_per_slot and not use_gpu:
            raise ValueError("gpus_per_slot is set, but use_gpu is False")
        gpus_per_slot = gpus_per_slot or int(use_gpu)
        if use_gpu and gpus_per_slot < 1:
            raise ValueError("gpus_per_slot must be >= 1: got %s" % gpus_per_slot)
        if override_discovery or settings.discovery is None:
            settings.discovery = RayHostDiscovery(use_gpu, cpus_per_slot, gpus_per_slot or 1)
        self.settings, self.use_gpu = settings, use_gpu
        self.cpus_per_slot, self.gpus_per_slot = cpus_per_slot, gpus_per_slot
        self.env_vars = dict(env_vars or {})
        self.store: Optional[str] = None
        self.resets = 0
        self.job_key = _proto.new_job_key()  # MACs this run's commits (elastic_protocol)

    def start(self) -> None:
        """Names this run's commit store (created on each host by its workers)."""
        refuse_ray_client()
        self.store = os.path.join(tempfile.gettempdir(),
                                  "fuseopt-ray-elastic-%s" % uuid.uuid4().hex[:12])

    def run(self, worker_fn: Callable[[], Any],
            callbacks: Optional[List[Callable]] = None) -> List[Any]:
        """``worker_fn()`` on every worker of the last world; its results in
        rank order. ``callbacks`` get what rank 0 logs with ``ray_logger.log``."""
        if self.store is None:
            raise RuntimeError("ElasticRayExecutor.run: call start() first")
        try:
            while True:
                size = self._wait_for_slots()
                outcome, detail = self._run_world(size, worker_fn, callbacks)
                if outcome == "done":
                    return detail
                self.resets += 1
                limit = self.settings.reset_limit
                if limit is not None and self.resets > limit:
                    raise RuntimeError("ElasticRayExecutor.run: %s, but reset_limit %d resets "
                                       "were already done: giving up" % (detail, limit))
                self._say("reset %d: %s; the next world resumes from the newest commit"
                          % (self.resets, detail))
        finally:
            _remove_everywhere(self.store)

    def _say(self, text):
        if self.settings.verbose:
            print("fuseopt.ray: elastic: %s" % text, flush=True)

    def _slots(self) -> int:
        found = sum(self.settings.discovery.find_available_hosts_and_slots().values())
        top = self.settings.max_num_proc
        return min(found, top) if top else found

    def _wait_for_slots(self) -> int:
        need = self.settings.min_num_proc or 1
        deadline = time.time() + self.settings.elastic_timeout
        while True:
            slots = self._slots()
            if slots >= need:
                return slots
            if time.time() >= deadline:
                raise RuntimeError("ElasticRayExecutor: %d slot(s) in the Ray cluster, fewer "
                                   "than min_num_proc %d, after %.0f s (elastic_timeout)"
                                   % (slots, need, self.settings.elastic_timeout))
            time.sleep(DISCOVERY_INTERVAL_S)

    def _world(self, size: int) -> World:
        shape = Shape(size, None, 1, self.cpus_per_slot, self.use_gpu, self.gpus_per_slot,
                      use_current_placement_group=False)
        env = dict(self.env_vars)
        # A launch directory per world, as fuseoptrun gives each job: the
        # notice that ended the last world must not end this one.
        env.update({_proto.ELASTIC_DIR_ENV: self.store, _proto.RESET_COUNT_ENV: self.resets,
                    _proto.JOB_KEY_ENV: self.job_key,
                    "FUSEOPT_LAUNCH_DIR": os.path.join(self.store, "world-%d" % self.resets)})
        # Two calls at once per worker: the function, and a notice of new slots.
        return World(shape, self.settings.elastic_timeout, self.settings.timeout_s,
                     one_interface(self.settings.nics), env,
                     actor_options={"max_concurrency": 2}).start()

    def _run_world(self, size, worker_fn, callbacks):
        self._say("starting %d workers" % size)
        world = self._world(size)
        watch = _SlotWatch(self, world, size)
        results, failures = world.collect(functools.partial(_elastic_call, worker_fn),
                                          callbacks, on_tick=watch.poll)
        # An exception of the function (a dead worker raised none) ends the run.
        if any(cause(e) is not None for e in own_failures(failures).values()):
            world.raise_failure(failures, "ElasticRayExecutor.run")
        world.stop()
        if failures:
            return "reset", "lost worker(s) of rank %s" % ",".join(map(str, sorted(failures)))
        if any(isinstance(v, _Reset) for v in results.values()):
            return "reset", "the slots changed"
        return "done", [results[r] for r in range(size)]


class _SlotWatch:
    """While a world runs: polls discovery every DISCOVERY_INTERVAL_S and
    tells rank 0 once about each new number of slots."""

    def __init__(self, executor, world, size):
        self.executor, self.world = executor, world
        self.told = {size}
        self.next = time.monotonic() + DISCOVERY_INTERVAL_S

    def poll(self):
        if time.monotonic() < self.next:
            return
        self.next = time.monotonic() + DISCOVERY_INTERVAL_S
        wanted = self.executor._slots()
        if wanted not in self.told and wanted >= (self.executor.settings.min_num_proc or 1):
            self.told.add(wanted)
            self.executor._say("%d slots now: the job resets at its next commit" % wanted)
            self.world.workers[0].notify_hosts_changed.remote([("ray", wanted)])


def _remove_everywhere(path):
    """Removes the commit store from every alive node (a task on each)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    remove = ray.remote(num_cpus=0)(shutil.rmtree)
    refs = [remove.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        node["NodeID"], soft=False)).remote(path, True)
        for node in ray.nodes() if node.get("Alive", node.get("alive"))]
    ray.wait(refs, num_returns=len(refs), timeout=30)
