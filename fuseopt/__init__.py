"""fuseopt: data-parallel training over a native negotiate-fuse-reduce core.

    import fuseopt
    fuseopt.init()
    avg = fuseopt.allreduce(numpy_array, name="grad")

Framework bindings live in ``fuseopt.torch`` and ``fuseopt.tensorflow``.
"""
from .base.errors import (BackendError, FuseoptError, InternalError, InvalidArgumentError,
                          MismatchError, NotInitializedError, RankFailedError, ShutDownError,
                          TimeoutError, UnsupportedError)
from .api.runtime import init, shutdown
from .core.world import (cross_rank, cross_size, is_initialized, local_rank, local_size, metrics,
                         pending_handles, rank, settings, size)
from .core.handles import Handle
from .api.ops import (Adasum, Average, Max, Min, Product, Sum, allgather, allgather_async,
                      allreduce, allreduce_, allreduce_async, allreduce_async_, alltoall,
                      alltoall_async, barrier, broadcast, broadcast_, broadcast_async,
                      broadcast_async_, grouped_allreduce, grouped_allreduce_,
                      grouped_allreduce_async, grouped_allreduce_async_, join, poll, reducescatter,
                      reducescatter_async, synchronize)
from .api.objects import allgather_object, broadcast_object
from .core.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set
from .training.checkpoint import CheckpointError
from .training.naming import Shared
from .api.timeline import start_timeline, stop_timeline
from .runner import run  # Horovod's horovod.run: a function on every rank of a new job

from ._version import version as _version

# Module paths scripts import from (fuseopt.errors' exception classes,
# fuseopt.checkpoint.CheckpointError, fuseopt.elastic.HostsUpdatedInterrupt):
# the modules now live in their layer's folder; these names stay.
import sys as _sys
from .base import errors
from .training import checkpoint, elastic

for _module in (errors, checkpoint, elastic):
    _sys.modules[__name__ + "." + _module.__name__.rsplit(".", 1)[1]] = _module

__version__ = _version()
