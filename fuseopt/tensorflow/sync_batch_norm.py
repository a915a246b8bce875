"""SyncBatchNormalization: keras.layers.BatchNormalization over the global batch.

In training, per-channel mean and variance come from every rank's samples.
Each pass is one native call (fuseopt.api.batch_norm), eagerly or inside a
graph (tf.function, model.fit) through the chained host op of _tensors.run:
the core's kernel computes the per-channel sums, reduces them through an
agreed reduction (Note [Agreed reductions]) and normalizes; backward, the same
for sum(dy) and sum(dy * x_hat). The gradients are exact through the global
statistics. Ranks may hold different batch sizes. Moving statistics are
updated identically on every rank, as Keras updates them (biased variance).
With a mask or renorm the layer takes Keras' own path around one
differentiable allreduce of the moments instead.
"""
from typing import Any, Optional

import keras
import numpy as np
import tensorflow as tf

from ..api.batch_norm import FLOAT_CODES, channel_view, sync_kernel
from ..core import world
from . import _tensors, ops


def _address(array):
    return array.ctypes.data


def _sync_normalize(x, gamma, beta, axis, epsilon):
    """(y, mean, variance) of training-mode batch norm over every rank's batch;
    x float32 or float64, channels on axis, gamma and beta of x's dtype."""
    code = FLOAT_CODES[x.dtype.name]
    channels = int(x.shape[axis])
    kernel = sync_kernel(channels)

    def forward(xs, g, b):
        y = np.empty_like(xs)
        view = channel_view(xs.shape, [s // xs.itemsize for s in xs.strides], axis)
        saved = kernel.forward(_address(xs), _address(y), code, view, epsilon, _address(g),
                               _address(b), code)
        return y, saved

    def backward(xs, dy, g, saved):
        dy = np.ascontiguousarray(dy, xs.dtype)
        dx = np.empty_like(xs)
        dg, db = np.empty_like(g), np.empty_like(g)
        view = channel_view(xs.shape, [s // xs.itemsize for s in xs.strides], axis)
        kernel.backward(_address(xs), _address(dy), _address(dx), code, view, saved,
                        _address(g), code, _address(dg), _address(db))
        return dx, dg, db

    @tf.custom_gradient
    def normalize(x, gamma, beta):
        y, saved = _tensors.run(forward, [x, gamma, beta], [x.dtype, tf.float64], "sync_batch_norm")
        y, saved = tf.ensure_shape(y, x.shape), tf.ensure_shape(saved, [2 * channels + 1])

        def grad(dy, _dsaved):
            return _tensors.run(backward, [x, dy, gamma, saved], [x.dtype] * 3,
                                "sync_batch_norm_grad")
        return (y, saved), grad

    y, saved = normalize(x, gamma, beta)
    mean = tf.cast(saved[:channels], x.dtype)
    variance = tf.cast(1.0 / tf.square(saved[channels:2 * channels]) - epsilon, x.dtype)
    return y, mean, variance


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

    def call(self, inputs, training=None, mask=None):
        if not (training and self.trainable) or mask is not None or self.renorm or \
                world.size() == 1:
            return super().call(inputs, training=training, mask=mask)
        # As Keras: 16-bit inputs are normalized in float32.
        dtype = tf.float64 if inputs.dtype == tf.float64 else tf.float32
        x = tf.cast(inputs, dtype)
        c = x.shape[self.axis]
        gamma = tf.cast(self.gamma, dtype) if self.scale else tf.ones([c], dtype)
        beta = tf.cast(self.beta, dtype) if self.center else tf.zeros([c], dtype)
        y, mean, variance = _sync_normalize(x, gamma, beta, self.axis % len(x.shape),
                                            float(self.epsilon))
        self.moving_mean.assign(tf.cast(self.moving_mean, dtype) * self.momentum +
                                mean * (1.0 - self.momentum))
        self.moving_variance.assign(tf.cast(self.moving_variance, dtype) * self.momentum +
                                    variance * (1.0 - self.momentum))
        return tf.cast(y, self.compute_dtype)

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
