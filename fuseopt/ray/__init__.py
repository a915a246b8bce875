"""``fuseopt.ray``: Horovod's ``horovod.ray`` on a Ray cluster.

``RayExecutor`` starts the ranks as Ray actors and runs functions on them::

    import ray
    from fuseopt.ray import RayExecutor

    ray.init()
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), num_workers=4,
                           cpus_per_worker=2)
    executor.start()
    results = executor.run(train, kwargs={"epochs": 3})   # one result per rank
    executor.shutdown()

The ranks meet through a PMI server in the driver process and form one MPI
world, with no mpiexec and no ssh (docs/scaling.md, "Running inside Ray").
Needs Ray: ``pip install fuseopt[ray]``.

``ElasticRayExecutor`` (and ``RayExecutor(min_workers=...)``) run an
elastic function (``hvd.elastic.run``) on as many workers as the cluster has
slots, starting a new world when that changes or a worker dies (elastic.py).
"""
try:
    import ray as _ray  # noqa: F401 (the extra is installed: say so here if not)
except ImportError as e:  # pragma: no cover - exercised only without Ray
    raise ImportError("fuseopt.ray needs Ray: pip install 'fuseopt[ray]' (%s)" % e) from None

from . import ray_logger
from .elastic import ElasticRayExecutor, ElasticSettings, RayHostDiscovery, TestDiscovery
from .executor import MiniSettings, RayExecutor
from .worker import BaseHorovodWorker, Worker


__all__ = ["RayExecutor", "ElasticRayExecutor", "BaseHorovodWorker", "Worker", "MiniSettings",
           "ElasticSettings", "RayHostDiscovery", "TestDiscovery", "ray_logger"]
