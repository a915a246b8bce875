"""SyncBatchNormalization's two ways through TensorFlow: fuseopt's compiled op
(kernels/batch_norm_op.cc) and the tf.numpy_function fallback, both against
Keras' BatchNormalization on the global batch inside a tf.function
(channels_first here; tf_training.py covers channels_last eagerly and in
fit); ranks that call layers of other sizes get FailedPreconditionError on
every rank; a bfloat16 model under mixed precision trains in fit. Run in the
2-rank job of tf_two_ranks.py."""
import numpy as np
import tensorflow as tf

import rank_harness as harness
from fuseopt.tensorflow import kernels
from fuseopt.tensorflow import sync_batch_norm as sbn
from tf_common import close, hvd, keras


def _global_batch(step, channels):
    """Rank r holds r + 1 samples of an NCHW batch (rank 0 only one)."""
    n, r = hvd.size(), hvd.rank()
    sizes = [k + 1 for k in range(n)]
    rng = np.random.default_rng(40 + step)
    x = (rng.normal(size=(sum(sizes), channels, 3, 2)) * 3 + 1).astype("float32")
    probe = rng.normal(size=x.shape).astype("float32")
    start = sum(sizes[:r])
    return x, probe, slice(start, start + sizes[r])


def check_op_and_fallback_match_keras_on_the_global_batch():
    assert kernels.status_kernel() is not None, "the compiled op should build here"
    channels = 5
    gamma = tf.constant(np.linspace(0.5, 1.5, channels), tf.float32)
    beta = tf.constant(np.linspace(-0.5, 0.5, channels), tf.float32)
    for way in (sbn._op_normalize, sbn._host_normalize):
        ref = keras.layers.BatchNormalization(axis=1, epsilon=1e-3, dtype="float32")
        x, probe, mine = _global_batch(1, channels)

        @tf.function
        def step(xs, probe):
            with tf.GradientTape() as tape:
                tape.watch([xs, gamma, beta])
                if way is sbn._op_normalize:
                    y = way(kernels.status_kernel(), xs, gamma, beta, 1, 1e-3)[0]
                else:
                    y = way(xs, gamma, beta, 1, 1e-3)[0]
                loss = tf.reduce_sum(y * probe)
            return (y,) + tuple(tape.gradient(loss, [xs, gamma, beta]))

        y, dx, dg, db = step(tf.constant(x[mine]), tf.constant(probe[mine]))
        ref.build(x.shape)
        ref.gamma.assign(gamma)
        ref.beta.assign(beta)
        xt = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(xt)
            loss = tf.reduce_sum(ref(xt, training=True) * probe)
        want_y = ref(xt, training=True)  # the same batch: the same output
        want_dx, want_dg, want_db = tape.gradient(loss, [xt, ref.gamma, ref.beta])
        what = way.__name__
        close(y, want_y.numpy()[mine], what + " forward", 2e-6)
        close(dx, want_dx.numpy()[mine], what + " input gradient", 2e-6)
        close(hvd.allreduce(dg, op=hvd.Sum), want_dg, what + " gamma gradient (summed)", 3e-6)
        close(hvd.allreduce(db, op=hvd.Sum), want_db, what + " beta gradient (summed)", 3e-6)


def check_layers_of_other_sizes_at_once_fail_with_failed_precondition():
    narrow, wide = hvd.SyncBatchNormalization(), hvd.SyncBatchNormalization()
    narrow.build((2, 4))
    wide.build((2, 8))

    @tf.function
    def call(layer, x):
        return layer(x, training=True)

    call(narrow, tf.ones((2, 4)))  # both agreed, in the same order everywhere
    call(wide, tf.ones((2, 8)))
    try:
        if hvd.rank() == 0:
            call(narrow, tf.ones((2, 4)))
        else:
            call(wide, tf.ones((2, 8)))
    except tf.errors.FailedPreconditionError as e:
        assert "MismatchError: ranks disagree about agreed reduction" in str(e), str(e)
    else:
        raise AssertionError("no error for layers of other sizes at once")


def check_mixed_bfloat16_fit():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8),
                                  hvd.SyncBatchNormalization(), keras.layers.Dense(3)])
        model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05)),
                      loss="sparse_categorical_crossentropy")
        rng = np.random.default_rng(hvd.rank())
        history = model.fit(rng.normal(size=(16, 6)), rng.integers(0, 3, 16), batch_size=4,
                            verbose=0, epochs=2)
        assert all(np.isfinite(history.history["loss"])), history.history
        moving = model.layers[1].moving_variance.numpy()
        both = hvd.allgather(tf.constant(moving[None]), name="bf16.moving").numpy()
        close(both[0], both[-1], "moving variance on every rank", 0)
    finally:
        keras.mixed_precision.set_global_policy("float32")


CHECKS = [check_op_and_fallback_match_keras_on_the_global_batch,
          check_layers_of_other_sizes_at_once_fail_with_failed_precondition,
          check_mixed_bfloat16_fit]

if __name__ == "__main__":
    harness.run(CHECKS)
