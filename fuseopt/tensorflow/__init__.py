"""fuseopt for TensorFlow 2 / Keras 3: ``import fuseopt.tensorflow as hvd``.

Custom loop::

    hvd.init()
    with tf.GradientTape() as tape:
        loss = loss_fn(model(x), y)
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)

Keras ``fit``: see ``fuseopt.tensorflow.keras``.
"""
from ..base.errors import (FuseoptError, InvalidArgumentError, MismatchError, NotInitializedError,
                           RankFailedError, ShutDownError, TimeoutError, UnsupportedError)
from ..api.runtime import init, shutdown
from ..core.world import (cross_rank, cross_size, is_initialized, local_rank, local_size, metrics,
                          rank, size)
from ..core.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set
from ..api.capabilities import (ccl_built, cuda_built, ddl_built, gloo_built, gloo_enabled,
                                is_homogeneous, mpi_built, mpi_enabled, mpi_threads_supported,
                                nccl_built, rocm_built)
from ..api.timeline import start_timeline, stop_timeline
from ..api.overlap import log_epoch as log_metrics
from .compression import Compression, Compressor
from .functions import (BroadcastGlobalVariablesHook, allgather_object, broadcast_,
                        broadcast_global_variables, broadcast_object, broadcast_object_fn,
                        broadcast_variables)
from .wrappers.gradient_tape import DistributedGradientTape, PartialDistributedGradientTape
from .ops import (Adasum, Average, Max, Min, Product, Sum, allgather, allreduce, barrier,
                  broadcast, grouped_allreduce, join)
from .ragged_ops import alltoall, grouped_allgather, grouped_reducescatter, reducescatter
from .value_ops import local_rank_op, local_size_op, process_set_included_op, rank_op, size_op
from .wrappers.factory import PartialDistributedOptimizer
from .wrappers.factory import TensorFlowDistributedOptimizer as DistributedOptimizer
from ..training.naming import Shared
from .sync_batch_norm import SyncBatchNormalization
from . import elastic  # noqa: E402  (hvd.elastic.run, TensorFlowKerasState, TensorFlowState)

HorovodInternalError = FuseoptError
from .util import _executing_eagerly  # noqa: E402,F401  (Horovod: hvd._executing_eagerly)
from ..common.util import gpu_available, split_list  # noqa: E402,F401  (Horovod's, here too)


def __getattr__(name):
    # Horovod's hvd.mpi_ops without importing it here: it imports this package.
    if name == "mpi_ops":
        import importlib
        return importlib.import_module(".mpi_ops", __name__)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
