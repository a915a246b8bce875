"""Horovod's ``horovod.tensorflow.util`` import path, for the one helper
that scripts and Horovod's test bases import from it."""
import tensorflow as tf


def _executing_eagerly() -> bool:
    """Whether TensorFlow runs eagerly here (False inside a tf.function or a
    TF1 graph)."""
    return tf.executing_eagerly()
