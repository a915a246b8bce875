"""DistributedOptimizer(opt, shard="optimizer") for Keras 3: the optimizer's
state and update split across ranks (ZeRO-1).

Keras 3 builds an optimizer's state for the variables it is built with, and
``apply`` then takes any subset of them. Each variable has one owning rank
(fuseopt/training/sharding.py, by bytes, never split); the wrapped optimizer
is built with this rank's owned variables only, so it holds their slots and
no others. The gradients are averaged as without sharding (the wrapper's
fused allreduce, compression included), the owned ones applied, and every
variable then broadcast from its owner. The wire carries an allreduce and a
broadcast of the model: 1.5x what an unsharded step moves (the PyTorch
sharded optimizer sends each gradient to its owner only); the state and the
optimizer's own pass are divided by the number of ranks.
"""
from __future__ import annotations

import keras
import numpy as np
from keras.optimizers import LossScaleOptimizer

from ...base.errors import UnsupportedError
from ...core import world
from ...training import sharding
from .. import ops
from ..functions import allgather_object
from .optimizer import DistributedKerasOptimizer


def check_sharded(optimizer, process_set, num_groups, groups):
    """What DistributedOptimizer(shard=...) refuses for Keras."""
    refused = [n for n, v, d in (("process_set", process_set, None),
                                 ("num_groups", num_groups, 0), ("groups", groups, None))
               if v != d]
    if refused or not isinstance(optimizer, keras.optimizers.Optimizer) or \
            isinstance(optimizer, LossScaleOptimizer) or \
            keras.mixed_precision.dtype_policy().name == "mixed_float16":
        raise UnsupportedError("DistributedOptimizer(shard=...) for Keras takes a Keras 3 "
                               "optimizer without loss scaling, process sets or groups%s"
                               % (" (got %s)" % ", ".join(refused) if refused else ""))


@keras.saving.register_keras_serializable(package="fuseopt")
class ShardedKerasOptimizer(DistributedKerasOptimizer):
    """See the module docstring; create through ``DistributedOptimizer(opt,
    shard="optimizer")``."""

    def __init__(self, inner_optimizer, shard=sharding.OPTIMIZER, **kwargs):
        sharding.check_stage(shard)
        if shard != sharding.OPTIMIZER:
            raise UnsupportedError("the Keras wrapper shards the optimizer state only "
                                   "(shard=%r): Keras keeps no gradients between steps to free"
                                   % sharding.OPTIMIZER)
        if kwargs.get("backward_passes_per_step", 1) != 1:
            raise UnsupportedError("DistributedOptimizer(shard=...) for Keras takes "
                                   "backward_passes_per_step=1 only")
        super().__init__(inner_optimizer, **kwargs)
        self.shard = shard
        self._owner = []

    def build(self, var_list):
        var_list = list(var_list)
        size = world.size()
        mine = [(v.path, tuple(v.shape), str(v.dtype)) for v in var_list]
        sharding.check_same_plan(mine, allgather_object(mine, name="keras.shard.plan"),
                                 "variables")
        if len(var_list) < size:
            raise UnsupportedError("a sharded optimizer needs at least one variable per rank "
                                   "(%d variables, %d ranks)" % (len(var_list), size))
        nbytes = [int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in var_list]
        self._owner = sharding.owners(nbytes, size)
        self.inner_optimizer.build(self.owned_variables(var_list))
        keras.optimizers.Optimizer.build(self, var_list)

    def owned_variables(self, var_list):
        """The variables whose state and update this rank holds."""
        rank = world.rank()
        return [v for v, r in zip(var_list, self._owner) if r == rank]

    def apply(self, grads, trainable_variables=None):
        variables = self._built_for(trainable_variables)
        reduced = self._reduce(list(grads), variables)
        rank = world.rank()
        owned = [(g, v) for g, v, r in zip(reduced, variables, self._owner) if r == rank]
        self.inner_optimizer.apply([g for g, _ in owned], [v for _, v in owned])
        for i, (v, r) in enumerate(zip(variables, self._owner)):
            v.assign(ops.broadcast(v, r, name="keras.shard.param.%d" % i))

    def get_config(self):
        return dict(super().get_config(), shard=self.shard)
