"""DistributedOptimizer(opt, shard="optimizer") for Keras 3: the optimizer's
state and update split across ranks (ZeRO-1).

Keras 3 builds an optimizer's state for the variables it is built with, and
``apply`` then takes any subset of them. Each variable has one owning rank
(fuseopt/training/sharding.py, by bytes, never split); the wrapped optimizer
is built with this rank's owned variables only, so it holds their slots and
no others. Each gradient travels to its owner only, in a reduction fused like
an allreduce (a reduce-scatter's bytes; Compression.fp16/bf16 send 16-bit
copies), the owned ones are applied, and every variable is then broadcast from
its owner (an all-gather's bytes): together, what an unsharded step's
allreduce moves, as the PyTorch sharded optimizer. The state and the
optimizer's own pass are divided by the number of ranks. The options that a
reduction to one rank cannot carry (the other compressors, whose payloads are
not one tensor per gradient; Min/Max/Product/Adasum; name_map; local
variables) take the wrapper's allreduce instead, and the wire then carries
1.5x an unsharded step's bytes.
"""
from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
from keras.optimizers import LossScaleOptimizer

from ...base.errors import UnsupportedError
from ...core import world
from ...training import optimizer_args, sharding
from .. import ops
from ..compression import BF16Compressor, FP16Compressor, NoneCompressor
from ..functions import allgather_object
from .optimizer import DistributedKerasOptimizer

# How a gradient travels to its owner, by compressor: as it is, or as a 16-bit copy.
_WIRE = {NoneCompressor: None, FP16Compressor: tf.float16, BF16Compressor: tf.bfloat16}


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
        to_owners = type(self.compression) in _WIRE and self.op in (ops.Average, ops.Sum) and \
            self.name_map is None and not self._local_vars
        reduced = (self._reduce_to_owners if to_owners else self._reduce)(list(grads), variables)
        rank = world.rank()
        owned = [(g, v) for g, v, r in zip(reduced, variables, self._owner) if r == rank]
        self.inner_optimizer.apply([g for g, _ in owned], [v for _, v in owned])
        for i, (v, r) in enumerate(zip(variables, self._owner)):
            v.assign(ops.broadcast(v, r, name="keras.shard.param.%d" % i))

    def _reduce_to_owners(self, grads, variables):
        """Each gradient reduced to its owner (see the module docstring)."""
        wire = _WIRE[type(self.compression)]
        sent = []
        for g, v in zip(grads, variables):
            g = tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)  # slices: dense
            sent.append(tf.cast(g, wire) if wire is not None and g.dtype == tf.float32 else g)
        prescale, postscale = optimizer_args.scales(self.op, self.gradient_predivide_factor)
        outs = ops._grouped_reduce_raw(sent, self._owner,
                                       ["keras.shard.grad.%d" % i for i in range(len(sent))],
                                       self.op, prescale, postscale)
        return [tf.cast(o, v.dtype) if o.dtype != v.dtype else o
                for o, v in zip(outs, variables)]

    def get_config(self):
        return dict(super().get_config(), shard=self.shard)
