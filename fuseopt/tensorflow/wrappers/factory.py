"""The public constructors of the Keras/TensorFlow optimizer wrappers:
``DistributedOptimizer`` picks the wrapper for the optimizer it is given
(Keras 3, loss-scaling, TF1, or sharded), with Horovod's two argument orders
and its ``PartialDistributedOptimizer``."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional
import keras
import tensorflow as tf
from keras.optimizers import LossScaleOptimizer

from ...training import buckets
from ...base.errors import InvalidArgumentError
from .. import ops
from ..compression import Compression
from ...core import process_sets as _ps
from .gradient_tape import local_layers_of
from .legacy_optimizer import DistributedLegacyOptimizer
from .optimizer import DistributedKerasOptimizer, DistributedLossScaleOptimizer
from .sharded_optimizer import ShardedKerasOptimizer, check_sharded

if TYPE_CHECKING:  # annotations only: importing them here would be circular
    from ...core.process_sets import ProcessSet


def DistributedOptimizer(optimizer: Any, name: Optional[str] = None, device_dense: str = "",
                         device_sparse: str = "", compression: Any = Compression.none,
                         sparse_as_dense: bool = False, gradient_predivide_factor: float = 1.0,
                         op: Optional[int] = ops.Average, backward_passes_per_step: int = 1,
                         average_aggregated_gradients: bool = False, num_groups: int = 0,
                         groups: Any = None, process_set: Optional[ProcessSet] = None,
                         scale_local_gradients: bool = True, name_map: Any = None,
                         bucket_cap_mb: Optional[float] = None, use_locking: bool = False,
                         shard: Optional[str] = None) -> Any:
    """Wraps a Keras 3 optimizer so that gradients are averaged across ranks.

    Works in ``model.compile(optimizer=...)`` + ``fit`` and in custom loops
    (``apply_gradients`` / ``apply``). ``backward_passes_per_step=N``
    accumulates N local steps and communicates once. As in Horovod (and in
    its argument order), the update then uses the sum of the N averaged
    gradients; ``average_aggregated_gradients=True`` divides it by N, which
    equals one step on the concatenated micro-batches.
    ``name_map`` (mixed PyTorch/TensorFlow jobs, see docs/mixed.md) maps
    variable paths to shared names or ``fuseopt.Shared(name, perm)``.
    Inside ``fit`` / ``tf.function``, gradients start reducing in buckets of
    ``bucket_cap_mb`` MiB (default 4, or ``FUSEOPT_BUCKET_CAP_MB``; ``inf``
    for one allreduce after backward) as soon as backward has produced them.
    ``process_set``: the ranks that average; on other ranks the optimizer
    applies local gradients, as Horovod's.
    A TF1 optimizer (``tf.compat.v1.train.Optimizer``, graph code) is wrapped
    as Horovod wraps it: its ``compute_gradients`` returns averaged gradients
    (``use_locking`` is its flag; no ``backward_passes_per_step``).
    ``shard="optimizer"``: each rank keeps the state of, and updates, only its
    share of the variables (ZeRO-1; fuseopt/tensorflow/wrappers/sharded_optimizer.py).
    """
    _ps.id_of(process_set)
    kwargs = dict(compression=compression, backward_passes_per_step=backward_passes_per_step,
                  average_aggregated_gradients=average_aggregated_gradients, op=op,
                  gradient_predivide_factor=gradient_predivide_factor,
                  sparse_as_dense=sparse_as_dense, name=name, name_map=name_map,
                  bucket_cap_mb=bucket_cap_mb)
    if isinstance(optimizer, (DistributedKerasOptimizer, DistributedLossScaleOptimizer)):
        raise InvalidArgumentError("optimizer is already a fuseopt DistributedOptimizer")
    if shard is not None:
        check_sharded(optimizer, process_set, num_groups, groups)
        wrapped = ShardedKerasOptimizer(optimizer, shard=shard, **kwargs)
    elif isinstance(optimizer, tf.compat.v1.train.Optimizer):
        wrapped = DistributedLegacyOptimizer(optimizer, use_locking=use_locking, **kwargs)
    elif isinstance(optimizer, LossScaleOptimizer):
        wrapped = DistributedLossScaleOptimizer(
            optimizer.inner_optimizer, initial_scale=optimizer.initial_scale,
            dynamic_growth_steps=optimizer.dynamic_growth_steps, **kwargs)
    elif keras.mixed_precision.dtype_policy().name == "mixed_float16":
        wrapped = DistributedLossScaleOptimizer(optimizer, **kwargs)
    else:
        wrapped = DistributedKerasOptimizer(optimizer, **kwargs)
    wrapped.scale_local_gradients = scale_local_gradients
    wrapped.process_set = process_set
    # Validated now; matched to the variables when gradients arrive.
    wrapped.num_groups, wrapped.groups = buckets.check_groups(num_groups, groups)
    return wrapped


def TensorFlowDistributedOptimizer(optimizer: Any, name: Optional[str] = None,
                                   use_locking: bool = False, device_dense: str = "",
                                   device_sparse: str = "", compression: Any = Compression.none,
                                   sparse_as_dense: bool = False,
                                   backward_passes_per_step: int = 1,
                                   op: Optional[int] = ops.Average,
                                   gradient_predivide_factor: float = 1.0,
                                   average_aggregated_gradients: bool = False,
                                   num_groups: int = 0, groups: Any = None,
                                   process_set: Optional[ProcessSet] = None,
                                   scale_local_gradients: bool = True, name_map: Any = None,
                                   bucket_cap_mb: Optional[float] = None,
                                   shard: Optional[str] = None) -> Any:
    """``horovod.tensorflow.DistributedOptimizer``: the wrapper of
    DistributedOptimizer, with that module's argument order (which differs
    from the Keras module's). ``use_locking`` belongs to TF1 optimizers
    (passed to the wrapper of one) and changes nothing for a Keras 3 one."""
    return DistributedOptimizer(
        optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
        compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, num_groups=num_groups,
        groups=groups, process_set=process_set, scale_local_gradients=scale_local_gradients,
        name_map=name_map, bucket_cap_mb=bucket_cap_mb, use_locking=use_locking, shard=shard)


def PartialDistributedOptimizer(optimizer: Any, name: Optional[str] = None, device_dense: str = "",
                                device_sparse: str = "", compression: Any = Compression.none,
                                sparse_as_dense: bool = False,
                                gradient_predivide_factor: float = 1.0,
                                op: Optional[int] = ops.Average, groups: Any = None,
                                process_set: Optional[ProcessSet] = None, local_layers: Any = None,
                                scale_local_gradients: bool = True) -> Any:
    """Horovod's: a DistributedOptimizer whose ``local_layers`` (a Keras layer
    or a list of them) keep their gradients on each rank: their trainable
    weights are registered with ``register_local_var``."""
    wrapped = DistributedOptimizer(optimizer, name=name, device_dense=device_dense,
                                   device_sparse=device_sparse, compression=compression,
                                   sparse_as_dense=sparse_as_dense,
                                   gradient_predivide_factor=gradient_predivide_factor, op=op,
                                   groups=groups, process_set=process_set,
                                   scale_local_gradients=scale_local_gradients)
    for layer in local_layers_of(local_layers):
        for var in layer.trainable_weights:
            wrapped.register_local_var(var)
    return wrapped
