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

``ElasticRayExecutor`` (and ``RayExecutor(min_workers=...)``) are not here:
constructing one raises UnsupportedError saying why and what to use.
"""
try:
    import ray as _ray  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised only without Ray
    raise ImportError("fuseopt.ray needs Ray: pip install 'fuseopt[ray]' (%s)" % e) from None

from ..base.errors import UnsupportedError
from . import ray_logger
from .executor import MiniSettings, RayExecutor
from .worker import BaseHorovodWorker, Worker


class ElasticRayExecutor:
    """Horovod's elastic Ray executor: not in fuseopt (see the module docstring)."""

    def __init__(self, *args, **kwargs):
        raise UnsupportedError(
            "fuseopt.ray.ElasticRayExecutor: fuseopt has no elastic executor for Ray. Its "
            "elastic jobs restart as a new MPI world from commits each host keeps on disk, "
            "which fuseoptrun's elastic driver (--min-np/--max-np) manages; use that instead, "
            "or a fixed-size RayExecutor with save_checkpoint/load_checkpoint "
            "(docs/scaling.md, 'Running inside Ray')")

    @staticmethod
    def create_settings(*args, **kwargs):
        ElasticRayExecutor()


__all__ = ["RayExecutor", "ElasticRayExecutor", "BaseHorovodWorker", "Worker", "MiniSettings",
           "ray_logger"]
