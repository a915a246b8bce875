"""Shared helpers for the TensorFlow workers (TF is imported once per worker)."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.config.threading.set_inter_op_parallelism_threads(2)
tf.config.threading.set_intra_op_parallelism_threads(1)

import keras  # noqa: E402

import fuseopt.tensorflow.keras as hvd  # noqa: E402

B = 4  # per-rank batch


def close(a, b, what, tol=1e-5):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, "%s: %s vs %s" % (what, a.shape, b.shape)
    err = float(np.max(np.abs(a - b))) if a.size else 0.0
    assert err <= tol * max(1.0, float(np.max(np.abs(b))) if b.size else 1.0), \
        "%s: max error %g" % (what, err)


def global_data(seed, rows, dim=6, classes=3):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(rows, dim)).astype(keras.config.floatx()), rng.integers(0, classes, rows)


def rank_rows(x, batch, steps):
    """This rank's share when global batch k is rows [k*n*batch, (k+1)*n*batch)."""
    n, r = hvd.size(), hvd.rank()
    idx = np.concatenate([np.arange(k * n * batch + r * batch, k * n * batch + (r + 1) * batch)
                          for k in range(steps)])
    return x[idx]


def make_model(seed=0, bn=None):
    keras.utils.set_random_seed(seed)
    layers = [keras.Input((6,)), keras.layers.Dense(8, activation="tanh")]
    if bn is not None:
        layers.append(bn())
    # Softmax, since the tests' losses take probabilities: on raw outputs
    # Keras's crossentropy divides by their row sums, which cross zero, and
    # the run turns chaotic (3 ranks' float16 gradients ended 0.1 apart).
    layers.append(keras.layers.Dense(3, activation="softmax"))
    return keras.Sequential(layers)


def weights_equal_across_ranks(model, what):
    for i, w in enumerate(model.get_weights()):
        gathered = hvd.allgather(tf.constant(w[None]), name="eq.%s.%d" % (what, i)).numpy()
        for k in range(hvd.size()):
            close(gathered[k], gathered[0], "%s: weight %d differs on rank %d" % (what, i, k), 0)
