"""DistributedOptimizer for Keras 3 optimizers.

Built like Keras's own LossScaleOptimizer: a Keras ``Optimizer`` that wraps an
inner one, reduces the gradients across ranks in ``apply`` (one grouped,
fused allreduce inside model.fit's train function, through
tf.numpy_function), and lets the inner optimizer do the update. It is a
registered serializable, so ``model.save`` / ``keras.models.load_model`` work
(import fuseopt.tensorflow before loading).

With loss scaling (``LossScaleOptimizer`` or the ``mixed_float16`` policy)
the wrapper *is* a LossScaleOptimizer whose ``apply`` reduces the still-scaled
gradients first: an inf or nan on any rank then reaches every rank, and all
ranks take the same "skip this step" branch. (Keras would otherwise wrap us
in its own LossScaleOptimizer, which checks only local gradients: ranks could
disagree and deadlock.)
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional
import keras
import tensorflow as tf
from keras.optimizers import LossScaleOptimizer

from ...training import buckets
from ...base.errors import InvalidArgumentError, UnsupportedError
from .. import ops
from ..compression import Compression
from ...core import process_sets as _ps
from .gradient_tape import local_layers_of
from .legacy_optimizer import DistributedLegacyOptimizer
from .reducer import Reducer

if TYPE_CHECKING:  # annotations only: importing them here would be circular
    from ...core.process_sets import ProcessSet

@keras.saving.register_keras_serializable(package="fuseopt")
class DistributedKerasOptimizer(Reducer, keras.optimizers.Optimizer):
    """See module docstring; create through :func:`DistributedOptimizer`."""

    def __init__(self, inner_optimizer, compression=Compression.none, backward_passes_per_step=1,
                 average_aggregated_gradients=False, op=ops.Average, gradient_predivide_factor=1.0,
                 sparse_as_dense=False, name=None, name_map=None, bucket_cap_mb=None, **kwargs):
        super().__init__(learning_rate=0.0, name=name or "distributed_" + inner_optimizer.name)
        self.inner_optimizer = inner_optimizer
        self._init_reducer(compression, backward_passes_per_step, average_aggregated_gradients,
                           op, gradient_predivide_factor, sparse_as_dense, name_map,
                           bucket_cap_mb)

    def build(self, var_list):
        self.inner_optimizer.build(var_list)
        if self.backward_passes_per_step > 1:
            self._accumulators = [self.add_variable_from_reference(v, "fuseopt_accumulator")
                                  for v in var_list]
            self._passes = self.add_variable(shape=(), dtype="int64", name="fuseopt_passes",
                                             initializer="zeros")
        super().build(var_list)

    @property
    def variables(self):
        return self._variables + self.inner_optimizer.variables

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        variables = self._built_for(trainable_variables)
        if self.backward_passes_per_step == 1:
            self.inner_optimizer.apply(self._reduce(grads, variables), trainable_variables)
            return
        self._accumulate(grads, variables, trainable_variables)

    def _accumulate(self, grads, variables, trainable_variables):
        n = self.backward_passes_per_step
        for acc, g, v in zip(self._accumulators, grads, variables):
            if g is not None:
                acc.assign_add(tf.convert_to_tensor(g))
        self._passes.assign_add(1)

        def communicate():
            total = [acc / n if self.average_aggregated_gradients else tf.identity(acc)
                     for acc in self._accumulators]
            self.inner_optimizer.apply(self._reduce(total, variables), trainable_variables)
            for acc in self._accumulators:
                acc.assign(tf.zeros_like(acc))
            return tf.constant(True)

        def count_pass():
            # Every backward pass is an iteration, as in Horovod and Keras's own
            # gradient_accumulation_steps: schedules keyed on `iterations`
            # advance per pass (the applying pass is counted by apply itself).
            self.inner_optimizer.iterations.assign_add(1)
            return tf.constant(False)

        # The pass counter is the same on every rank, so all take one branch.
        tf.cond(tf.equal(self._passes % n, 0), communicate, count_pass)

    @property
    def learning_rate(self):
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value):
        if hasattr(self, "inner_optimizer"):
            self.inner_optimizer.learning_rate = value

    @property
    def iterations(self):
        return self.inner_optimizer.iterations

    def scale_loss(self, loss):
        return self.inner_optimizer.scale_loss(loss)

    def finalize_variable_values(self, var_list):
        self.inner_optimizer.finalize_variable_values(var_list)

    def get_config(self):
        return dict(self._reducer_config(), name=self.name,
                    inner_optimizer=keras.saving.serialize_keras_object(self.inner_optimizer))

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)  # the caller's dict stays as it was (as Horovod's)
        inner = keras.saving.deserialize_keras_object(config.pop("inner_optimizer"),
                                                      custom_objects=custom_objects)
        return cls(inner, **config)

    def __getattr__(self, name):
        # Reached only for names this wrapper lacks: hyper-parameters of the
        # optimizer it wraps (momentum, beta_1, nesterov, ...) read through,
        # as Horovod's DistributedOptimizer, a subclass of yours, has them.
        if name.startswith("_") or name == "inner_optimizer":
            raise AttributeError(name)
        try:
            inner = object.__getattribute__(self, "inner_optimizer")
        except AttributeError:
            raise AttributeError(name) from None
        return getattr(inner, name)


@keras.saving.register_keras_serializable(package="fuseopt")
class DistributedLossScaleOptimizer(Reducer, LossScaleOptimizer):
    """A LossScaleOptimizer that reduces the scaled gradients across ranks
    before checking them for inf/nan; create through :func:`DistributedOptimizer`."""

    def __init__(self, inner_optimizer, compression=Compression.none, backward_passes_per_step=1,
                 average_aggregated_gradients=False, op=ops.Average, gradient_predivide_factor=1.0,
                 sparse_as_dense=False, initial_scale=2.0 ** 15, dynamic_growth_steps=2000,
                 name=None, name_map=None, bucket_cap_mb=None, **kwargs):
        if backward_passes_per_step != 1:
            raise UnsupportedError("backward_passes_per_step > 1 together with loss scaling is "
                                   "not supported; accumulate in your loop or drop loss scaling")
        super().__init__(inner_optimizer, initial_scale=initial_scale,
                         dynamic_growth_steps=dynamic_growth_steps, name=name)
        self._init_reducer(compression, 1, average_aggregated_gradients, op,
                           gradient_predivide_factor, sparse_as_dense, name_map, bucket_cap_mb)

    def apply(self, grads, trainable_variables=None):
        variables = self._built_for(trainable_variables)
        return super().apply(self._reduce(list(grads), variables), trainable_variables)

    def get_config(self):
        return dict(super().get_config(), **self._reducer_config())


def DistributedOptimizer(optimizer: Any, name: Optional[str] = None, device_dense: str = "",
                         device_sparse: str = "", compression: Any = Compression.none,
                         sparse_as_dense: bool = False, gradient_predivide_factor: float = 1.0,
                         op: Optional[int] = ops.Average, backward_passes_per_step: int = 1,
                         average_aggregated_gradients: bool = False, num_groups: int = 0,
                         groups: Any = None, process_set: Optional[ProcessSet] = None,
                         scale_local_gradients: bool = True, name_map: Any = None,
                         bucket_cap_mb: Optional[float] = None, use_locking: bool = False) -> Any:
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
    """
    _ps.id_of(process_set)
    kwargs = dict(compression=compression, backward_passes_per_step=backward_passes_per_step,
                  average_aggregated_gradients=average_aggregated_gradients, op=op,
                  gradient_predivide_factor=gradient_predivide_factor,
                  sparse_as_dense=sparse_as_dense, name=name, name_map=name_map,
                  bucket_cap_mb=bucket_cap_mb)
    if isinstance(optimizer, (DistributedKerasOptimizer, DistributedLossScaleOptimizer)):
        raise InvalidArgumentError("optimizer is already a fuseopt DistributedOptimizer")
    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
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
                                   bucket_cap_mb: Optional[float] = None) -> Any:
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
        name_map=name_map, bucket_cap_mb=bucket_cap_mb, use_locking=use_locking)


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
