"""Gradient compressors for TensorFlow: the algorithms of fuseopt.training.compression
on TensorFlow tensors, so that a mixed job compresses identically on both
sides. Residuals are tf.Variables, so that updates persist inside tf.function."""
import numpy as np
import tensorflow as tf

from ..training import compression as _neutral
from ..training import ef_sign as _ef_sign_neutral
from ..training import powersgd as _powersgd
from ..core import requests as _rq
from ..training.compression import Compressor, NoneCompressor  # noqa: F401 (the binding's names)


class _TensorFlowKit(_powersgd.MatrixKit):
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

    # -- PowerSGD's: counts and branches are tensors, so that a traced step
    # keeps one structure; state is variables (tf.function orders their reads
    # and writes as written).
    def known(self, flag):
        return bool(flag) if tf.executing_eagerly() else None

    def cond(self, flag, if_true, if_false):
        return tf.cond(flag, if_true, if_false)

    def less(self, a, b):
        return tf.less(a, b)

    def count(self, store, name):
        if name not in store:
            store[name] = tf.Variable(0, dtype=tf.int64, trainable=False)
        done = store[name].read_value()
        with tf.control_dependencies([done]):
            store[name].assign_add(1)
        return done

    def load_count(self, store, name, value):
        if name in store:
            store[name].assign(value)
        else:
            store[name] = tf.Variable(value, dtype=tf.int64, trainable=False)

    def state(self, store, name, initial):
        if name not in store:
            store[name] = tf.Variable(initial(), trainable=False)
        return store[name]

    def assign(self, store, name, value):
        store[name].assign(value)

    def load(self, store, name, value):
        value = np.asarray(value, np.float32)
        if name in store:
            store[name].assign(value)
        else:
            store[name] = tf.Variable(value, trainable=False)

    def snapshot(self, value):
        return np.array(value.numpy())

    def constant_for_step(self, make, step):
        shape = make(0).shape
        value = tf.numpy_function(lambda s: make(int(s)), [step], tf.float32)
        value.set_shape(shape)
        return value

    def as_matrix(self, tensor, rows, cols):
        return tf.reshape(tf.cast(tensor, tf.float32), [rows, cols])

    def flat(self, tensor):
        return tf.reshape(tensor, [-1])

    def reshape(self, tensor, shape):
        return tf.reshape(tensor, shape)

    def zeros(self, shape):
        return tf.zeros(shape, tf.float32)

    def add_into(self, state, tensor):
        state.assign_add(tensor)
        return state.read_value()

    def sub_mm_into(self, state, a, b):
        state.assign_sub(tf.matmul(a, b, transpose_b=True))

    def mm(self, a, b):
        return tf.matmul(a, b)

    def mm_t(self, a, b):
        return tf.matmul(a, b, transpose_a=True)

    def mm_bt(self, a, b, out=None):
        return tf.matmul(a, b, transpose_b=True)

    def orthonormal(self, matrix):
        return tf.linalg.qr(matrix, full_matrices=False)[0]


_TF = _TensorFlowKit()


class FP16Compressor(_neutral.CastCompressor):
    kit, target, wire = _TF, tf.float16, _rq.WIRE_FLOAT16


class BF16Compressor(_neutral.CastCompressor):
    kit, target, wire = _TF, tf.bfloat16, _rq.WIRE_BFLOAT16


class EFSignCompressor(_ef_sign_neutral.EFSignCompressor):
    __doc__ = _ef_sign_neutral.EFSignCompressor.__doc__
    kit = _TF


class PowerSGDCompressor(_powersgd.PowerSGDCompressor):
    __doc__ = _powersgd.PowerSGDCompressor.__doc__
    kit = _TF


class Compression:
    """``Compression.none`` / ``.fp16`` / ``.bf16``, ``Compression.ef_sign()``
    and ``Compression.powersgd(rank=...)``."""

    none = NoneCompressor()
    fp16 = FP16Compressor()
    bf16 = BF16Compressor()
    ef_sign = EFSignCompressor
    powersgd = PowerSGDCompressor
