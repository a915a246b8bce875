"""Where a RayExecutor's workers go, as Horovod places them
(horovod/ray/strategy.py):

- ``num_workers``: one bundle of ``cpus_per_worker`` CPUs (and GPUs) per
  worker in a PACK placement group, or the caller's current placement group
  when there is one and ``use_current_placement_group`` (the default);
- ``num_hosts`` x ``num_workers_per_host``: one bundle per host holding that
  host's workers, STRICT_SPREAD, so that every host gets the same number.

With GPUs, every worker on a node sees all of that node's workers' GPUs
(``CUDA_VISIBLE_DEVICES``), so CUDA can use peer access between them, and
picks its own by local rank, as under horovodrun."""
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import ray
from ray.util.placement_group import (get_current_placement_group, placement_group,
                                      remove_placement_group)
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from .worker import Worker


@dataclass
class Shape:
    num_workers: Optional[int]
    num_hosts: Optional[int]
    num_workers_per_host: int
    cpus_per_worker: float
    use_gpu: bool
    gpus_per_worker: Optional[float]
    use_current_placement_group: bool

    @property
    def size(self) -> int:
        return int(self.num_workers or self.num_hosts * self.num_workers_per_host)

    def worker_resources(self) -> Dict[str, float]:
        return {"CPU": self.cpus_per_worker,
                "GPU": (self.gpus_per_worker or 1) * int(self.use_gpu)}


class Placement:
    """The placement group (made here, or the caller's) and the workers in it."""

    def __init__(self, shape: Shape, timeout_s: float):
        self.shape = shape
        self.workers: List[Any] = []
        self.group = None
        self.own_group = False
        current = get_current_placement_group() if shape.use_current_placement_group else None
        if shape.num_workers is None and current is None:
            self._create(shape.num_hosts, "STRICT_SPREAD", shape.num_workers_per_host, timeout_s)
        elif current is not None:
            self.group = current
        else:
            self._create(shape.size, "PACK", 1, timeout_s)

    def _create(self, bundles: int, strategy: str, workers_per_bundle: int, timeout_s: float):
        per_bundle = {k: v * workers_per_bundle for k, v in self.shape.worker_resources().items()}
        self.group = placement_group([dict(per_bundle) for _ in range(bundles)],
                                     strategy=strategy)
        self.own_group = True
        ready, _ = ray.wait([self.group.ready()], timeout=timeout_s)
        if not ready:
            self.remove()
            raise TimeoutError(
                "the Ray placement group for %d bundles of %s (%s) was not ready within %.0f s: "
                "the cluster has %s available. Give it more resources, ask for fewer, or raise "
                "placement_group_timeout_s in RayExecutor.create_settings"
                % (bundles, per_bundle, strategy, timeout_s, ray.available_resources()))

    def start_workers(self, **actor_options) -> List[Any]:
        shape = self.shape
        actor = ray.remote(Worker)
        per_bundle = shape.num_workers_per_host if shape.num_workers is None else 1
        for rank in range(shape.size):
            bundle = rank // per_bundle if self.own_group else -1
            options = actor.options(
                num_cpus=shape.cpus_per_worker,
                num_gpus=(shape.gpus_per_worker or 1) * int(shape.use_gpu),
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=self.group, placement_group_bundle_index=bundle,
                    placement_group_capture_child_tasks=False), **actor_options)
            self.workers.append(options.remote())
        return self.workers

    def share_gpus(self, nodes: List[str]) -> None:
        """CUDA_VISIBLE_DEVICES on each worker: every GPU of its node's workers."""
        if not self.shape.use_gpu:
            return
        ids = ray.get([w.get_gpu_ids.remote() for w in self.workers])
        per_node: Dict[str, List[int]] = defaultdict(list)
        for node, gpus in zip(nodes, ids):
            per_node[node].extend(gpus)
        ray.get([w.update_env_vars.remote(
            {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in sorted(per_node[node]))})
            for w, node in zip(self.workers, nodes)])

    def remove(self) -> None:
        for w in self.workers:
            ray.kill(w, no_restart=True)
        self.workers = []
        if self.own_group and self.group is not None:
            remove_placement_group(self.group)
        self.group = None
