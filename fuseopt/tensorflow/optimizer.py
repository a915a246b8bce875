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

from ..training import buckets, naming, optimizer_args
from ..base.errors import InvalidArgumentError, UnsupportedError
from . import ops
from .compression import Compression
from ..core import process_sets as _ps
from .gradient_tape import local_layers_of, reduce_except_local, reduce_gradients

if TYPE_CHECKING:  # annotations only: importing them here would be circular
    from ..core.process_sets import ProcessSet

_COMPRESSION_NAMES = {"none": lambda: Compression.none, "fp16": lambda: Compression.fp16,
                      "bf16": lambda: Compression.bf16, "ef_sign": Compression.ef_sign}


def _compression_name(c):
    for name, make in _COMPRESSION_NAMES.items():
        if c is make() or type(c) is type(make()):
            return name
    return None


class _Reducer:
    """What both wrappers share: settings, config, the reduction itself."""

    def _init_reducer(self, compression, backward_passes_per_step, average_aggregated_gradients,
                      op, gradient_predivide_factor, sparse_as_dense, name_map, bucket_cap_mb):
        if isinstance(compression, str):
            compression = _COMPRESSION_NAMES[compression]()
        optimizer_args.check(backward_passes_per_step, op, gradient_predivide_factor)
        self.compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self.average_aggregated_gradients = average_aggregated_gradients
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.bucket_cap_mb = bucket_cap_mb
        self._bucket_cap = buckets.cap_bytes(bucket_cap_mb)
        # Saved config holds a dict map as plain data (a function cannot be saved).
        self.name_map = naming.map_from_config(name_map) if isinstance(name_map, dict) \
            else name_map
        self._local_vars = {}  # id -> variable whose gradient stays on this rank
        self.scale_local_gradients = True
        self.process_set = None  # the ranks that average (set by DistributedOptimizer)
        self.num_groups, self.groups = 0, None  # Horovod's explicit groups (likewise)

    def register_local_var(self, var):
        """Horovod's: ``var``'s gradient is not averaged across ranks; each rank
        applies its own (divided by size() with ``scale_local_gradients``)."""
        self._local_vars[id(var)] = var

    def _reducer_config(self):
        return {"compression": _compression_name(self.compression) or "none",
                "backward_passes_per_step": self.backward_passes_per_step,
                "average_aggregated_gradients": self.average_aggregated_gradients,
                "op": int(self.op), "gradient_predivide_factor": self.gradient_predivide_factor,
                "sparse_as_dense": self.sparse_as_dense, "bucket_cap_mb": self.bucket_cap_mb,
                "name_map": naming.map_to_config(self.name_map)}

    def _built_for(self, trainable_variables):
        """Builds on first use (as Keras optimizers do); returns the variables."""
        if not self.built:
            with keras.name_scope(self.name, caller=self):
                self.build(trainable_variables)
            self.built = True
        return list(trainable_variables) if trainable_variables is not None \
            else self.inner_optimizer._trainable_variables

    def _reduce(self, grads, variables):
        def reduce(grads, sources):
            return reduce_gradients(grads, sources, self.compression, self.op,
                                    self.gradient_predivide_factor, self.sparse_as_dense,
                                    self.name_map, self._bucket_cap, self.process_set,
                                    buckets.group_of(sources, self.num_groups, self.groups))
        return reduce_except_local(grads, variables, self._local_vars,
                                   self.scale_local_gradients, self.process_set, reduce)


@keras.saving.register_keras_serializable(package="fuseopt")
class DistributedKerasOptimizer(_Reducer, keras.optimizers.Optimizer):
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
class DistributedLossScaleOptimizer(_Reducer, LossScaleOptimizer):
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
                         bucket_cap_mb: Optional[float] = None) -> Any:
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
    """
    _ps.id_of(process_set)
    kwargs = dict(compression=compression, backward_passes_per_step=backward_passes_per_step,
                  average_aggregated_gradients=average_aggregated_gradients, op=op,
                  gradient_predivide_factor=gradient_predivide_factor,
                  sparse_as_dense=sparse_as_dense, name=name, name_map=name_map,
                  bucket_cap_mb=bucket_cap_mb)
    if isinstance(optimizer, (DistributedKerasOptimizer, DistributedLossScaleOptimizer)):
        raise InvalidArgumentError("optimizer is already a fuseopt DistributedOptimizer")
    if isinstance(optimizer, LossScaleOptimizer):
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
    from the Keras module's). ``use_locking`` belongs to TF1 optimizers and
    changes nothing for a Keras 3 one."""
    return DistributedOptimizer(
        optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
        compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, num_groups=num_groups,
        groups=groups, process_set=process_set, scale_local_gradients=scale_local_gradients,
        name_map=name_map, bucket_cap_mb=bucket_cap_mb)


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
