"""Gradient compressors for TensorFlow (contract: fuseopt.compression).

The same algorithms as fuseopt.torch.compression, so a mixed job compresses
identically on both sides; the residual bookkeeping is shared."""
import itertools

import tensorflow as tf

from ..compression import Compressor, NoneCompressor, ResidualMemory, reduction_size
from ..errors import UnsupportedError
from ..ops import Sum


class _CastCompressor(Compressor):
    target = None

    def compress(self, tensor, name=None):
        if tensor.dtype.is_floating and tensor.dtype != self.target:
            return [tf.cast(tensor, self.target)], tensor.dtype
        return [tensor], None

    def decompress(self, payloads, ctx):
        return payloads[0] if ctx is None else tf.cast(payloads[0], ctx)


class FP16Compressor(_CastCompressor):
    target = tf.float16


class BF16Compressor(_CastCompressor):
    target = tf.bfloat16


class EFSignCompressor(Compressor):
    """Scaled sign with error feedback (see fuseopt.torch.compression): int8
    signs summed across ranks, one float scale per tensor, per-name residuals
    kept in tf.Variables so that it also works inside tf.function."""

    reduce_op = Sum

    def __init__(self):
        self.memory = ResidualMemory()
        self._unnamed = itertools.count()

    def compress(self, tensor, name=None):
        n = reduction_size()
        if n > 127:
            raise UnsupportedError("EFSignCompressor sums int8 signs: at most 127 ranks")
        name = name if name is not None else "unnamed.%d" % next(self._unnamed)
        residual = self.memory.get(name)
        if residual is None:  # a variable, so that updates persist inside tf.function
            residual = tf.Variable(tf.zeros(tensor.shape, tf.float32), trainable=False)
            self.memory.keep(name, residual)
        corrected = tf.cast(tensor, tf.float32) + residual
        scale = tf.reshape(tf.reduce_mean(tf.abs(corrected)), [1])
        sign = tf.where(corrected >= 0, tf.ones_like(corrected), -tf.ones_like(corrected))
        update = residual.assign(corrected - scale * sign)
        with tf.control_dependencies([update]):
            # n travels in ctx so that decompress divides by what was summed
            return [tf.cast(sign, tf.int8), tf.identity(scale)], (tensor.dtype, n)

    def decompress(self, payloads, ctx):
        sign_sum, scale_sum = payloads
        dtype, n = ctx
        n = float(n)
        return tf.cast(tf.cast(sign_sum, tf.float32) * (scale_sum / n) / n, dtype)


class Compression:
    """``Compression.none`` / ``.fp16`` / ``.bf16`` and ``Compression.ef_sign()``."""

    none = NoneCompressor()
    fp16 = FP16Compressor()
    bf16 = BF16Compressor()
    ef_sign = EFSignCompressor
