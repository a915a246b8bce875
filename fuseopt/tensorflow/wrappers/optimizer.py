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

import keras
import tensorflow as tf
from keras.optimizers import LossScaleOptimizer

from ...base.errors import UnsupportedError
from .. import ops
from ..compression import Compression
from .reducer import Reducer


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
