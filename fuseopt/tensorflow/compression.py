"""Gradient compressors for TensorFlow: the algorithms of fuseopt.training.compression
on TensorFlow tensors, so that a mixed job compresses identically on both
sides. Residuals are tf.Variables, so that updates persist inside tf.function."""
import tensorflow as tf

from ..training import compression as _neutral
from ..core import requests as _rq
from ..training.compression import Compressor, NoneCompressor  # noqa: F401 (the binding's names)


class _TensorFlowKit(_neutral.TensorKit):
    float32, int8 = tf.float32, tf.int8

    def is_floating(self, dtype):
        return dtype.is_floating

    def cast(self, tensor, dtype):
        return tf.cast(tensor, dtype)

    def abs_max(self, tensor):
        # reduce_max of nothing is -inf; the 0 keeps the step finite
        return tf.reshape(tf.maximum(tf.reduce_max(tf.abs(tensor)), 0.0), [1])

    def rounded(self, tensor, step, levels):
        # divide_no_nan: 0 where step is 0 (an all-zero tensor)
        return tf.clip_by_value(tf.round(tf.math.divide_no_nan(tensor, step)),
                                -float(levels), float(levels))

    def residual(self, residuals, name, like):
        if name not in residuals:
            residuals[name] = tf.Variable(tf.zeros(like.shape, tf.float32), trainable=False)
        return residuals[name]

    def keep(self, residuals, name, current, value):
        return current.assign(value)

    def after(self, dependency, tensors):
        with tf.control_dependencies([dependency]):
            return [tf.identity(t) for t in tensors]


_TF = _TensorFlowKit()


class FP16Compressor(_neutral.CastCompressor):
    kit, target, wire = _TF, tf.float16, _rq.WIRE_FLOAT16


class BF16Compressor(_neutral.CastCompressor):
    kit, target, wire = _TF, tf.bfloat16, _rq.WIRE_BFLOAT16


class EFSignCompressor(_neutral.EFSignCompressor):
    __doc__ = _neutral.EFSignCompressor.__doc__
    kit = _TF


class Compression:
    """``Compression.none`` / ``.fp16`` / ``.bf16`` and ``Compression.ef_sign()``."""

    none = NoneCompressor()
    fp16 = FP16Compressor()
    bf16 = BF16Compressor()
    ef_sign = EFSignCompressor
