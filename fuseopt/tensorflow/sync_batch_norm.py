"""SyncBatchNormalization: keras.layers.BatchNormalization over the global batch.

In training, per-channel mean and variance come from every rank's samples:
the layer reduces [count, sum, sum of squares] with one differentiable
allreduce, so gradients flow through the global statistics exactly (the
gradient of a sum-allreduce is a sum-allreduce). Ranks may hold different
batch sizes. Moving statistics are updated identically on every rank.
"""
from typing import Any, Optional

import keras
import tensorflow as tf

from ..core import world
from . import ops


@keras.saving.register_keras_serializable(package="fuseopt")
class SyncBatchNormalization(keras.layers.BatchNormalization):
    """Drop-in for ``keras.layers.BatchNormalization`` (its arguments, by
    keyword). As Horovod's, the first positional argument is ``fused``, and
    only ``fused=False`` is accepted (Keras 3 has no fused kernel anyway)."""

    def __init__(self, fused: Optional[bool] = False, **kwargs: Any) -> None:
        if fused in (True, None):
            raise ValueError("SyncBatchNormalization does not support fused=True.")
        kwargs.pop("synchronized", None)
        super().__init__(**kwargs)
        self.supports_jit = False  # collectives run on the host; keeps XLA "auto" off

    def _moments(self, inputs, mask):
        if mask is not None or world.size() == 1:
            return super()._moments(inputs, mask)
        axes = list(self._reduction_axes)
        # Each rank's moments in the input's precision (float32 at least),
        # without a float64 copy of the activation; only the per-channel sums
        # are float64. count * (var + mean^2) is this rank's sum of squares,
        # so the global variance below combines the ranks' means and
        # variances exactly (Chan's parallel formula), with no cancellation
        # beyond float64's.
        x = inputs if inputs.dtype in (tf.float32, tf.float64) else tf.cast(inputs, tf.float32)
        count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(x), axes)), tf.float64)
        mean, variance = tf.nn.moments(x, axes)
        mean, variance = tf.cast(mean, tf.float64), tf.cast(variance, tf.float64)
        has_rows = count > 0  # an empty batch here: its moments are NaN, its sums 0
        local = tf.concat([tf.reshape(count, [1]),
                           tf.where(has_rows, mean * count, tf.zeros_like(mean)),
                           tf.where(has_rows, (variance + mean * mean) * count,
                                    tf.zeros_like(variance))], 0)
        total = ops.allreduce_named([local], ops._names(1, None, "sync_batch_norm"), ops.Sum)[0]
        c = tf.shape(mean)[0]
        n = total[0]
        mean = total[1:c + 1] / n
        variance = tf.maximum(total[c + 1:] / n - mean * mean, 0.0)
        return tf.cast(mean, inputs.dtype), tf.cast(variance, inputs.dtype)
