"""fuseopt for PyTorch: ``import fuseopt.torch as hvd`` runs Horovod scripts.

    import fuseopt.torch as hvd
    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
"""
from ..errors import (FuseoptError, InvalidArgumentError, MismatchError, NotInitializedError,
                      RankFailedError, ShutDownError, TimeoutError, UnsupportedError)
from ..runtime import (cross_rank, cross_size, init, is_initialized, local_rank, local_size,
                       metrics, rank, shutdown, size)
from ..timeline import start_timeline, stop_timeline
from ..overlap import log_epoch as log_metrics
from ..checkpoint import CheckpointError
from .checkpoint import load_checkpoint, save_checkpoint
from .compression import Compression, Compressor
from .functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                        broadcast_parameters)
from .ops import (Average, Max, Min, Product, Sum, allgather, allgather_async, allreduce,
                  allreduce_, allreduce_async, allreduce_async_, alltoall, alltoall_async, barrier,
                  broadcast, broadcast_, broadcast_async, broadcast_async_, grouped_allreduce,
                  grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_,
                  grouped_allgather, grouped_allgather_async, grouped_reducescatter,
                  grouped_reducescatter_async, join, poll, reducescatter, reducescatter_async,
                  synchronize)
from ..process_sets import (ProcessSet, add_process_set, global_process_set,
                            remove_process_set)
from .optimizer import DistributedOptimizer
from ..naming import Shared
from .sync_batch_norm import SyncBatchNorm, recompute_bn_stats
from .local_sgd import AdaptiveLocalSGD, LocalSGD

# Horovod compatibility: capabilities of this build.
HorovodInternalError = FuseoptError


def mpi_enabled():
    return True


def mpi_built():
    return True


def gloo_enabled():
    return False


def gloo_built():
    return False


def nccl_built():
    return False


def mpi_threads_supported():
    return True
