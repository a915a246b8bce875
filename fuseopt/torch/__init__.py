"""fuseopt for PyTorch: ``import fuseopt.torch as hvd`` runs Horovod scripts.

    import fuseopt.torch as hvd
    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
"""
from ..base.errors import (FuseoptError, InvalidArgumentError, MismatchError, NotInitializedError,
                           RankFailedError, ShutDownError, TimeoutError, UnsupportedError)
from ..api.runtime import init, shutdown
from ..core.world import (cross_rank, cross_size, is_initialized, local_rank, local_size, metrics,
                          rank, size)
from ..api.timeline import start_timeline, stop_timeline
from ..api.overlap import log_epoch as log_metrics
from ..training.checkpoint import CheckpointError
from .checkpoint import load_checkpoint, save_checkpoint
from .compression import Compression, Compressor
from .functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                        broadcast_parameters)
from .ops import (Adasum, Average, Max, Min, Product, Sum, allgather, allgather_async, allreduce,
                  allreduce_, allreduce_async, allreduce_async_, barrier, broadcast, broadcast_,
                  broadcast_async, broadcast_async_, grouped_allreduce, grouped_allreduce_,
                  grouped_allreduce_async, grouped_allreduce_async_, join, poll, reduce_,
                  reduce_async_, synchronize)
from .ragged_ops import (alltoall, alltoall_async, grouped_allgather, grouped_allgather_async,
                      grouped_reducescatter, grouped_reducescatter_async, reducescatter,
                      reducescatter_async, sparse_allreduce_async)
from ..core.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set
from ..api.capabilities import (ccl_built, cuda_built, ddl_built, gloo_built, gloo_enabled,
                                is_homogeneous, mpi_built, mpi_enabled, mpi_threads_supported,
                                nccl_built, rocm_built)
from .optimizer import DistributedOptimizer
from .sharded import ZeroRedundancyOptimizer
from ..training.naming import Shared
from .sync_batch_norm import SyncBatchNorm, recompute_bn_stats
from .local_sgd import AdaptiveLocalSGD, LocalSGD
from . import elastic  # noqa: F401  (hvd.elastic.run, TorchState, ElasticSampler)
from ..training.elastic import HostsUpdatedInterrupt

# Horovod compatibility: capabilities of this build.
HorovodInternalError = FuseoptError

