"""DistributedOptimizer for TF1 optimizers (``tf.compat.v1.train.Optimizer``),
as Horovod's ``horovod.tensorflow.DistributedOptimizer`` wraps them: graph
code written for TF1 (``tf.compat.v1`` sessions, ``minimize``) keeps its
optimizer. ``compute_gradients`` returns the gradients averaged across ranks
(one grouped allreduce, the same reduction as the Keras wrapper's);
everything else is the wrapped optimizer's."""
from __future__ import annotations

import tensorflow as tf

from ...base.errors import UnsupportedError
from .reducer import Reducer


class DistributedLegacyOptimizer(Reducer, tf.compat.v1.train.Optimizer):
    """A TF1 optimizer whose gradients are averaged across ranks."""

    def __init__(self, optimizer, name=None, use_locking=False, **reducer):
        if reducer["backward_passes_per_step"] != 1:
            raise UnsupportedError(
                "DistributedOptimizer(backward_passes_per_step=%d) of a TF1 optimizer (%s): "
                "gradient accumulation is built for Keras optimizers only; accumulate in "
                "your graph, or use a Keras optimizer"
                % (reducer["backward_passes_per_step"], type(optimizer).__name__))
        self._optimizer = optimizer
        reducer.pop("name", None)
        self._init_reducer(**reducer)
        super().__init__(name=name or "Distributed" + type(optimizer).__name__,
                         use_locking=use_locking)

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's (gradient, variable) pairs, each gradient
        reduced across the ranks (None gradients stay None)."""
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        present = [(g, v) for g, v in pairs if g is not None]
        if not present:
            return pairs
        reduced = iter(self._reduce([g for g, _ in present], [v for _, v in present]))
        return [(g if g is None else next(reduced), v) for g, v in pairs]

    def apply_gradients(self, *args, **kwargs):
        return self._optimizer.apply_gradients(*args, **kwargs)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)
