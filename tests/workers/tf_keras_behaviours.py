"""What Horovod's Keras tests promise, checked here on Keras 3 with values
derived from first principles (our own checks, not Horovod's tests): the
optimizer's gradient aggregation pass by pass, with and without averaging,
with local variables and sparse gradients; an infinite gradient that must
not leak into the next cycle; sparse_as_dense; BroadcastGlobalVariablesCallback
with local variables; chained learning-rate callbacks; MetricAverageCallback's
value; elastic state sync / restore / commit. Run by tests/test_tensorflow.py
at 2 ranks."""
import numpy as np
import tensorflow as tf

import rank_harness as harness
from tf_common import B, close, hvd, keras, make_model

PASSES = 4


def _aggregating(average, sparse_as_dense=False):
    return hvd.DistributedOptimizer(keras.optimizers.SGD(1.0), backward_passes_per_step=PASSES,
                                    average_aggregated_gradients=average,
                                    sparse_as_dense=sparse_as_dense)


def _passes(opt, variables, loss_fn, count, traced):
    """``count`` backward passes through ``opt.apply``; the values of the
    variables and of ``opt.iterations`` after each pass."""
    def one_pass():
        with tf.GradientTape() as tape:
            loss = loss_fn()
        opt.apply(tape.gradient(loss, variables), variables)

    step = tf.function(one_pass) if traced else one_pass
    seen = []
    for _ in range(count):
        step()
        seen.append(([v.numpy().copy() for v in variables], int(opt.iterations.numpy())))
    return seen


def check_aggregation_pass_by_pass():
    """Rank r's gradient of x is (r+1), y's row 0 gets -(r+1) as
    IndexedSlices. Every PASSES passes the accumulated gradient (its mean
    over passes with average_aggregated_gradients) is averaged over ranks
    and applied with lr 1; between, nothing moves. iterations counts passes."""
    r, n = hvd.rank(), hvd.size()
    for average in (True, False):
        for sparse_as_dense in (False, True):
            for traced in (False, True):
                x = tf.Variable([0.0])
                y = tf.Variable([[1.0], [0.0]])
                opt = _aggregating(average, sparse_as_dense)
                seen = _passes(opt, [x, y], lambda: (r + 1.0) * (
                    tf.reduce_sum(x) - tf.reduce_sum(tf.gather(y, [0]))), 10, traced)
                step = (n + 1) / 2.0 * (1 if average else PASSES)
                what = "average=%s sparse_as_dense=%s traced=%s" % (average, sparse_as_dense,
                                                                   traced)
                for k, ((xv, yv), iterations) in enumerate(seen, start=1):
                    cycles = k // PASSES
                    close(xv, [-cycles * step], "%s: x after pass %d" % (what, k))
                    close(yv, [[1 + cycles * step], [0.0]], "%s: y after pass %d" % (what, k))
                    assert iterations == k, (what, k, iterations)


def check_aggregation_with_local_variables():
    """A registered local variable keeps this rank's own accumulated
    gradient, divided by size() (scale_local_gradients, Horovod's default);
    the shared one is averaged over ranks."""
    r, n = hvd.rank(), hvd.size()
    for average in (True, False):
        for traced in (False, True):
            shared, local = tf.Variable([0.0]), tf.Variable([0.0])
            opt = _aggregating(average)
            opt.register_local_var(local)
            seen = _passes(opt, [shared, local],
                           lambda: (r + 1.0) * tf.reduce_sum(shared + local), 8, traced)
            m = 1 if average else PASSES
            for k, ((sv, lv), _) in enumerate(seen, start=1):
                cycles = k // PASSES
                what = "average=%s traced=%s pass %d" % (average, traced, k)
                close(sv, [-cycles * m * (n + 1) / 2.0], what + ": shared")
                close(lv, [-cycles * m * (r + 1.0) / n], what + ": local")


def check_infinite_gradient_does_not_leak_into_the_next_cycle():
    """A cycle with an infinite gradient spoils that cycle's update only:
    the accumulators start the next cycle from exactly zero."""
    w = tf.Variable([0.0])
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.5), backward_passes_per_step=2)
    grads = iter([np.inf, 1.0, 1.0, 1.0])

    @tf.function
    def apply(g):
        opt.apply([g], [w])

    apply(tf.constant([next(grads)]))
    apply(tf.constant([next(grads)]))
    assert not np.isfinite(w.numpy()).all(), w.numpy()
    w.assign([0.0])
    apply(tf.constant([next(grads)]))
    apply(tf.constant([next(grads)]))
    close(w.numpy(), [-0.5 * 2.0], "the cycle after the infinite one")


def _dense_embedding_gradient(embedding, ids):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(embedding(ids) * tf.constant([1.0, 2.0]))
    return tape, loss


def check_sparse_as_dense_embedding():
    """An Embedding's gradient is IndexedSlices; with sparse_as_dense the
    tape returns a dense tensor, and either way its value is the mean over
    ranks of every rank's own dense gradient (rank-dependent ids). The
    optimizer with sparse_as_dense applies that mean, eagerly and in
    tf.function."""
    r = hvd.rank()
    keras.utils.set_random_seed(3)
    embedding = keras.layers.Embedding(5, 2)
    ids = tf.constant([[r % 5, (r + 1) % 5]])
    embedding(ids)
    tape, loss = _dense_embedding_gradient(embedding, ids)
    own = tf.convert_to_tensor(tape.gradient(loss, embedding.embeddings)).numpy()
    mean = np.mean(hvd.allgather_object(own, name="sad.own"), axis=0)
    for sparse_as_dense in (False, True):
        tape, loss = _dense_embedding_gradient(embedding, ids)
        grad = hvd.DistributedGradientTape(tape, sparse_as_dense=sparse_as_dense).gradient(
            loss, embedding.embeddings)
        assert isinstance(grad, tf.IndexedSlices) != sparse_as_dense, type(grad)
        close(tf.convert_to_tensor(grad), mean, "tape sparse_as_dense=%s" % sparse_as_dense)
    for traced in (False, True):
        before = embedding.embeddings.numpy().copy()
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), sparse_as_dense=True)

        def step():
            tape, loss = _dense_embedding_gradient(embedding, ids)
            opt.apply(tape.gradient(loss, [embedding.embeddings]), [embedding.embeddings])

        (tf.function(step) if traced else step)()
        close(embedding.embeddings.numpy(), before - 0.1 * mean,
              "optimizer sparse_as_dense traced=%s" % traced)


def check_broadcast_callback_keeps_local_variables():
    """Every weight starts at this rank's number; after the broadcast from
    rank n-1 (lr 0: training moves nothing) the first layer, passed as
    local_variables, still holds r and the rest n-1."""
    r, n = hvd.rank(), hvd.size()
    model = make_model()
    for w in model.weights:
        w.assign(tf.fill(w.shape, float(r)))
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="sparse_categorical_crossentropy")
    first = model.layers[0].weights
    model.fit(np.ones((B, 6), np.float32), np.zeros(B), batch_size=B, epochs=1, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(
                  n - 1, local_variables=first)])
    local_ids = {id(v) for v in first}
    for w in model.weights:
        expected = r if id(w) in local_ids else n - 1
        close(w.numpy(), np.full(w.shape, float(expected)), "after broadcast: %s" % w.path)


def check_chained_learning_rate_callbacks():
    """Warm-up for 5 epochs, then three schedules on [5,10), [10,15),
    [15,20): lr = initial * multiplier(epoch), a constant multiplier decaying
    exponentially from its start epoch (Horovod's formulas); each callback
    leaves lr alone outside its range."""
    n = hvd.size()
    initial = 0.1 * n
    model = make_model()
    model.compile(optimizer=keras.optimizers.SGD(initial), loss="sparse_categorical_crossentropy")
    lrs = []
    model.fit(np.ones((B, 6), np.float32), np.zeros(B), batch_size=B, epochs=20, verbose=0,
              callbacks=[
                  hvd.callbacks.LearningRateWarmupCallback(initial, warmup_epochs=5),
                  hvd.callbacks.LearningRateScheduleCallback(initial, 1.0, 5, 10),
                  hvd.callbacks.LearningRateScheduleCallback(initial, 0.5, 10, 15),
                  hvd.callbacks.LearningRateScheduleCallback(initial, lambda e: 1.0 / (e - 13),
                                                             15, 20),
                  keras.callbacks.LambdaCallback(on_epoch_end=lambda e, logs: lrs.append(
                      float(model.optimizer.learning_rate.numpy())))])
    # One step per epoch: epoch e's warm-up ends at e + 1 (Horovod's per-batch formula).
    expected = [initial / n * ((e + 1) * (n - 1) / 5.0 + 1) for e in range(5)]
    expected += [initial] * 5
    expected += [initial * 0.5 ** (e - 10) for e in range(10, 15)]
    expected += [initial / (e - 13) for e in range(15, 20)]
    close(lrs, expected, "learning rate at each epoch's end", 1e-7)


def check_metric_average_callback_value():
    """The loss logged after MetricAverageCallback is the mean over ranks of
    every rank's own epoch loss (recorded before the averaging)."""
    r = hvd.rank()
    model = make_model(seed=r)  # a different loss on every rank
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="sparse_categorical_crossentropy")
    own, averaged = [], []
    model.fit(np.full((2 * B, 6), r + 1.0, np.float32), np.zeros(2 * B), batch_size=B,
              epochs=2, verbose=0, callbacks=[
                  keras.callbacks.LambdaCallback(on_epoch_end=lambda e, l: own.append(l["loss"])),
                  hvd.callbacks.MetricAverageCallback(),
                  keras.callbacks.LambdaCallback(
                      on_epoch_end=lambda e, l: averaged.append(l["loss"]))])
    everyone = hvd.allgather_object(own, name="mac.own")
    close(averaged, np.mean(everyone, axis=0), "averaged loss", 1e-6)
    assert len({tuple(o) for o in everyone}) > 1 or hvd.size() == 1, everyone


def check_elastic_state_sync_restore_commit():
    """KerasState: sync makes rank 0's weights, optimizer slots and values
    everyone's; restore goes back to the last save or commit; commit keeps
    the current state."""
    r = hvd.rank()
    model = make_model()
    for w in model.weights:
        w.assign(tf.fill(w.shape, 1.0 if r == 0 else 2.0))
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    optimizer.build(model.trainable_variables)
    for v in optimizer.variables:
        if "momentum" in v.path:
            v.assign(tf.fill(v.shape, 3.0 + r))
    state = hvd.elastic.KerasState(model, optimizer, batch=20 + r, epoch=10 + r)
    state.sync()
    assert (state.batch, state.epoch) == (20, 10), (state.batch, state.epoch)
    for w in model.weights:
        close(w.numpy(), np.ones(w.shape), "synced weight " + w.path)
    for v in optimizer.variables:
        if "momentum" in v.path:
            close(v.numpy(), np.full(v.shape, 3.0), "synced slot " + v.path)
    model.weights[0].assign(tf.fill(model.weights[0].shape, 5.0))
    state.batch = 99
    state.restore()
    close(model.weights[0].numpy(), np.ones(model.weights[0].shape), "restored after sync")
    assert state.batch == 20
    model.weights[0].assign(tf.fill(model.weights[0].shape, 7.0))
    state.epoch = 11
    state.commit()
    model.weights[0].assign(tf.fill(model.weights[0].shape, 9.0))
    state.epoch = 12
    state.restore()
    close(model.weights[0].numpy(), np.full(model.weights[0].shape, 7.0), "restored commit")
    assert state.epoch == 11


CHECKS = [check_aggregation_pass_by_pass, check_aggregation_with_local_variables,
          check_infinite_gradient_does_not_leak_into_the_next_cycle,
          check_sparse_as_dense_embedding, check_broadcast_callback_keeps_local_variables,
          check_chained_learning_rate_callbacks, check_metric_average_callback_value,
          check_elastic_state_sync_restore_commit]

if __name__ == "__main__":
    harness.run(CHECKS)
