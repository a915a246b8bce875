"""SyncBatchNormalization: keras.layers.BatchNormalization over the global batch.

In training, per-channel mean and variance come from every rank's samples.
Each pass is one native call (fuseopt.api.batch_norm), eagerly or inside a
graph (tf.function, model.fit): through fuseopt's compiled TensorFlow op
(kernels/batch_norm_op.cc), or, where it cannot be built, through the
chained host op of _tensors.run (tf.numpy_function, about 50 us slower per
pass). The core's kernel computes the per-channel sums, reduces them through an
agreed reduction (Note [Agreed reductions]) and normalizes; backward, the same
for sum(dy) and sum(dy * x_hat). The gradients are exact through the global
statistics. Ranks may hold different batch sizes. Moving statistics are
updated identically on every rank, as Keras updates them (biased variance).
With a mask or renorm the layer takes Keras' own path around one
differentiable allreduce of the moments instead.
"""
import os
from typing import Any, Optional

import keras
import numpy as np
import tensorflow as tf

from ..api.batch_norm import FLOAT_CODES, channel_view, saved_statistics, sync_kernel
from ..base._native import ffi, lib
from ..base.errors import error_for
from ..core import world
from . import _tensors, kernels, ops
from .tf_errors import graph_status


def _address(array):
    return array.ctypes.data


def _view(array, axis):
    """The channel view of a contiguous NumPy array."""
    return channel_view(array.shape, [s // array.itemsize for s in array.strides], axis)


def _pointer(cdata):
    return int(ffi.cast("uintptr_t", cdata))


_error_attrs = None


def _core_attrs(function, agreed):
    """The attributes batch_norm_op.cc needs to call the core and to report
    its statuses as tf_errors.graph_status does."""
    global _error_attrs
    if _error_attrs is None:
        codes, names = [0], [""]
        for status in range(1, lib.FUSEOPT_INTERNAL + 1):
            error = error_for(status, "")
            codes.append(int(graph_status(error)[0]))
            names.append(type(error).__name__)
        _error_attrs = {"error_codes": codes, "error_names": names,
                        "last_error": _pointer(ffi.addressof(lib, "fuseopt_last_error"))}
    return dict(_error_attrs, function=_pointer(ffi.addressof(lib, function)),
                agreed=_pointer(agreed.handle), threads=_intra_op_threads())


def _intra_op_threads():
    """The threads TensorFlow gives one CPU kernel (its intra-op pool: all
    schedulable cores unless the user set fewer)."""
    return tf.config.threading.get_intra_op_parallelism_threads() or len(os.sched_getaffinity(0))


def _op_normalize(module, x, gamma, beta, axis, epsilon):
    """(y, saved, mean, variance) through the compiled FuseoptSyncBatchNorm op."""
    kernel_ = sync_kernel(int(x.shape[axis]))
    return _tensors.chained(lambda: module.fuseopt_sync_batch_norm(
        x, gamma, beta, epsilon=epsilon, axis=axis,
        **_core_attrs("fuseopt_batch_norm_forward", kernel_.stats)), "sync_batch_norm")


@tf.RegisterGradient("FuseoptSyncBatchNorm")
def _op_gradient(op, dy, _dsaved, _dmean, _dvariance):
    x, gamma, _ = op.inputs
    axis = op.get_attr("axis")
    module = kernels.status_kernel()
    kernel_ = sync_kernel(int(x.shape[axis]))
    return _tensors.chained(lambda: module.fuseopt_sync_batch_norm_grad(
        x, dy, gamma, op.outputs[1], axis=axis,
        **_core_attrs("fuseopt_batch_norm_backward", kernel_.grads)), "sync_batch_norm_grad")


def _host_normalize(x, gamma, beta, axis, epsilon):
    """(y, saved) through tf.numpy_function, when the op cannot be built."""
    code = FLOAT_CODES[x.dtype.name]
    kernel_ = sync_kernel(int(x.shape[axis]))

    def forward(xs, g, b):
        y = np.empty_like(xs)
        saved, _ = kernel_.forward(_address(xs), _address(y), code, _view(xs, axis), epsilon,
                                   _address(g), _address(b), code)
        return y, saved

    def backward(xs, dy, g, saved):
        dy = np.ascontiguousarray(dy, xs.dtype)
        dx = np.empty_like(xs)
        dg, db = np.empty_like(g), np.empty_like(g)
        kernel_.backward(_address(xs), _address(dy), _address(dx), code, _view(xs, axis),
                         saved_statistics(saved), _address(g), code, _address(dg), _address(db))
        return dx, dg, db

    @tf.custom_gradient
    def normalize(x, gamma, beta):
        y, saved = _tensors.run(forward, [x, gamma, beta], [x.dtype, tf.float64], "sync_batch_norm")

        def grad(dy, _dsaved):
            return _tensors.run(backward, [x, dy, gamma, saved], [x.dtype] * 3,
                                "sync_batch_norm_grad")
        return (y, saved), grad

    return normalize(x, gamma, beta)


def _sync_normalize(x, gamma, beta, axis, epsilon):
    """(y, mean, variance) of training-mode batch norm over every rank's batch;
    x float32 or float64, channels on axis, gamma and beta of x's dtype."""
    channels = int(x.shape[axis])
    module = kernels.status_kernel()
    if module is not None and hasattr(module, "fuseopt_sync_batch_norm"):
        y, _, mean, variance = _op_normalize(module, x, gamma, beta, axis, epsilon)
        return y, mean, variance
    y, saved = _host_normalize(x, gamma, beta, axis, epsilon)
    y, saved = tf.ensure_shape(y, x.shape), tf.ensure_shape(saved, [2 * channels + 1])
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
        """Keras' BatchNormalization, with training statistics over every
        rank's batch (one call into fuseopt's core per pass)."""
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
