"""Keras 3 / TensorFlow training with fuseopt: N ranks x batch b must equal
one process on the concatenated batch (the reference is trained locally on
every rank from the same seeds), plus callbacks, save/load, loss scaling,
accumulation, SyncBatchNormalization and the jit_compile error."""
import sys

import numpy as np
import tensorflow as tf

import rank_harness as harness
from powersgd_reference import numpy_powersgd
from tf_common import (B, close, global_data, hvd, keras, make_model, rank_rows,
                       weights_equal_across_ranks)
from fuseopt.tensorflow.wrappers.optimizer import DistributedLossScaleOptimizer

STEPS = 4
# These checks run in float64 end to end (Keras's floatx, set by tf_common): a
# distributed fit matches the one-process reference to ~1e-16, so a float32
# step anywhere on the way (~1e-8) fails them.
FLOAT64_TOL = 1e-12
# SyncBatchNormalization's statistics in float64 are off by ~2e-11 (its variance
# is E[x^2] - E[x]^2, which cancels); a float32 step would still show (~1e-7).
SYNC_BN_TOL = 1e-9


def fit_pair(make_opt, passes=1, epochs=1, **dist_kwargs):
    n = hvd.size()
    x, y = global_data(1, STEPS * passes * n * B)
    ref = make_model()
    ref.compile(optimizer=make_opt(), loss="sparse_categorical_crossentropy")
    ref.fit(x, y, batch_size=passes * n * B, epochs=epochs, shuffle=False, verbose=0)
    model = make_model()
    model.compile(optimizer=hvd.DistributedOptimizer(make_opt(), backward_passes_per_step=passes,
                                                     **dist_kwargs),
                  loss="sparse_categorical_crossentropy")
    model.fit(rank_rows(x, B, STEPS * passes), rank_rows(y, B, STEPS * passes), batch_size=B,
              epochs=epochs, shuffle=False, verbose=0)
    return model, ref


def check_fit_equals_single_process_sgd_adam():
    for name, make_opt in (("SGD+momentum", lambda: keras.optimizers.SGD(0.1, momentum=0.9)),
                           ("Adam", lambda: keras.optimizers.Adam(0.01)),
                           ("AdamW+schedule", lambda: keras.optimizers.AdamW(
                               keras.optimizers.schedules.ExponentialDecay(0.01, 2, 0.5)))):
        model, ref = fit_pair(make_opt, epochs=2)
        for w, v in zip(model.get_weights(), ref.get_weights()):
            close(w, v, "fit %s" % name, FLOAT64_TOL)
    check_fit_with_a_bucket_per_gradient()


def check_fit_with_a_bucket_per_gradient():
    # Each gradient's bucket started by its own op during backward (at 4
    # ranks this alone stands for the optimizers above: same code, more ranks).
    model, ref = fit_pair(lambda: keras.optimizers.Adam(0.01), epochs=2, bucket_cap_mb=0)
    for w, v in zip(model.get_weights(), ref.get_weights()):
        close(w, v, "fit with a bucket per gradient", FLOAT64_TOL)


def check_accumulation_equals_concatenated_batch():
    # average_aggregated_gradients=True: the mean of the 2 micro-batches'
    # averaged gradients, i.e. the gradient of the concatenated batch.
    model, ref = fit_pair(lambda: keras.optimizers.SGD(0.1, momentum=0.9), passes=2,
                          average_aggregated_gradients=True)
    for w, v in zip(model.get_weights(), ref.get_weights()):
        close(w, v, "backward_passes_per_step=2, averaged")
    # Horovod's default (False): their sum, i.e. twice that gradient, which
    # SGD with momentum turns into the step of twice the learning rate.
    model, _ = fit_pair(lambda: keras.optimizers.SGD(0.02, momentum=0.9), passes=2)
    _, ref = fit_pair(lambda: keras.optimizers.SGD(0.04, momentum=0.9), passes=2)
    for w, v in zip(model.get_weights(), ref.get_weights()):
        close(w, v, "backward_passes_per_step=2, summed as in Horovod")


def check_custom_loop_tape_and_apply_gradients():
    n = hvd.size()
    x, y = global_data(2, STEPS * n * B)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    model, ref = make_model(), make_model()
    opt, ref_opt = keras.optimizers.Adam(0.01), keras.optimizers.Adam(0.01)
    xr, yr = rank_rows(x, B, STEPS), rank_rows(y, B, STEPS)

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        tape = hvd.DistributedGradientTape(tape, bucket_cap_mb=0)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    for k in range(STEPS):
        step(xr[k * B:(k + 1) * B], yr[k * B:(k + 1) * B])
        with tf.GradientTape() as tape:
            loss = loss_fn(y[k * n * B:(k + 1) * n * B], ref(x[k * n * B:(k + 1) * n * B]))
        ref_opt.apply_gradients(zip(tape.gradient(loss, ref.trainable_variables),
                                    ref.trainable_variables))
    for w, v in zip(model.get_weights(), ref.get_weights()):
        close(w, v, "tape + apply_gradients", FLOAT64_TOL)
    # bucket_cap_mb=0: every gradient's allreduce is started by its own
    # non-blocking op, and a single op waits for them all.
    ops = step.get_concrete_function(xr[:B], yr[:B]).graph.get_operations()
    starts = [o for o in ops if o.name.startswith("fuseopt_allreduce_start") and o.type == "PyFunc"]
    waits = [o for o in ops if o.name.startswith("fuseopt_allreduce_wait") and o.type == "PyFunc"]
    assert len(starts) == len(model.trainable_variables) and len(waits) == 1, \
        (len(starts), len(waits), len(model.trainable_variables))


def ef_sign_reference(grads, residuals):
    """Error-feedback quantization written independently in numpy: each rank
    sends round(c / a) with c = gradient + residual, a = max|c| / (127 // n);
    all decode with the mean a; a rank keeps what that decode missed."""
    n = len(grads)
    cs = [g + e for g, e in zip(grads, residuals)]
    steps = [np.abs(c).max() / (127 // n) for c in cs]
    qs = [np.round(c / a) for c, a in zip(cs, steps)]
    mean_step = np.mean(steps)
    return mean_step * np.sum(qs, axis=0) / n, [c - mean_step * q for c, q in zip(cs, qs)]


def check_ef_sign_in_tf_function_and_fit():
    # Inside tf.function the residual tf.Variable is written in compress and
    # again in decompress: the tape must match the reference step after step.
    n, rng = hvd.size(), np.random.default_rng(7)
    v = tf.Variable(tf.zeros([3, 4]))
    comp = hvd.Compression.ef_sign()

    @tf.function
    def reduced_gradient(g):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(v * g)
        return hvd.DistributedGradientTape(tape, compression=comp).gradient(loss, [v])[0]

    residuals = [np.zeros((3, 4))] * n
    for k in range(4):  # every rank draws all ranks' gradients (same generator)
        grads = [rng.normal(size=(3, 4)) * (r + 1) for r in range(n)]
        got = reduced_gradient(tf.constant(grads[hvd.rank()], tf.float32)).numpy()
        want, residuals = ef_sign_reference(grads, residuals)
        close(got, want, "ef_sign tape step %d" % k, 1.5e-6)
    # The Keras optimizer path, by name: trains, and ranks stay equal.
    model, _ = fit_pair(lambda: keras.optimizers.SGD(0.1, momentum=0.9), compression="ef_sign")
    weights_equal_across_ranks(model, "ef_sign fit")


def check_powersgd_in_tf_function_and_fit():
    # Traced once: warm-up and compressed steps share one graph (tf.cond on
    # the step count), and Q, the errors and the count are variables.
    n, rng = hvd.size(), np.random.default_rng(8)
    w, b = tf.Variable(tf.zeros([12, 10]), name="w"), tf.Variable(tf.zeros([10]), name="b")
    comp = hvd.Compression.powersgd(rank=1, start_iter=2)

    @tf.function
    def reduced_gradients(gw, gb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * gw) + tf.reduce_sum(b * gb)
        return hvd.DistributedGradientTape(tape, compression=comp).gradient(loss, [w, b])

    state = {}
    for k in range(5):  # every rank draws all ranks' gradients (same generator)
        gws = [rng.normal(size=(12, 10)) * (r + 1) for r in range(n)]
        gbs = [rng.normal(size=10) for r in range(n)]
        got_w, got_b = reduced_gradients(tf.constant(gws[hvd.rank()], tf.float32),
                                         tf.constant(gbs[hvd.rank()], tf.float32))
        (name,) = comp.qs  # the weight's: the bias goes plain
        q0 = comp.initial_q(name, 10, 1).astype(np.float64)
        close(got_w.numpy(), numpy_powersgd(gws, state, q0, 2), "powersgd tape step %d" % k, 5e-6)
        close(got_b.numpy(), np.mean(gbs, axis=0), "powersgd tape bias %d" % k, 1.5e-6)
        if k == 0:  # the first call traces (twice, as it creates the state's variables)
            traces = reduced_gradients.experimental_get_tracing_count()
    assert reduced_gradients.experimental_get_tracing_count() == traces  # no retrace
    assert comp.state_dict()["steps"] == {name: 5}
    # The Keras path with gradients accumulated over two passes per step (without
    # accumulation it is the wrapper's same call, as the tape's above).
    comp = hvd.Compression.powersgd(rank=1, start_iter=1)
    model, _ = fit_pair(lambda: keras.optimizers.SGD(0.1, momentum=0.9), passes=2,
                        compression=comp)
    weights_equal_across_ranks(model, "powersgd fit, 2 passes")
    # one reduction per step of the wrapper, not per pass: STEPS steps of 1 epoch
    assert sorted(comp.state_dict()["steps"].values()) == [STEPS, STEPS], comp.state_dict()
    check_powersgd_state_in_keras_elastic_commits(model, comp)


def check_powersgd_state_in_keras_elastic_commits(model, comp):
    """KerasState keeps the compressor's state: restore() gives this rank's
    own back; a commit carries Q and the counts, not the writer's errors."""
    state = hvd.elastic.KerasState(model, epoch=0)
    saved = comp.state_dict()
    assert all(np.any(e) for e in saved["errors"].values()), saved["errors"]

    def scramble():
        comp.load_state_dict({"errors": {k: np.ones_like(e) for k, e in saved["errors"].items()},
                              "qs": {k: np.ones_like(q) for k, q in saved["qs"].items()},
                              "steps": {k: 0 for k in saved["steps"]}})

    def expect(fields, what):
        now = comp.state_dict()
        assert now["steps"] == saved["steps"], (what, now["steps"])
        for field in fields:
            for k, v in saved[field].items():
                close(now[field][k], v, "%s: %s %s" % (what, field, k), 0)

    scramble()
    state.restore()  # in memory: this rank's errors come back
    expect(("errors", "qs"), "restored")
    scramble()
    state._load_payload(state._payload())  # as after a reset: Q and counts, no errors
    expect(("qs",), "from the commit")
    assert all(np.all(e == 1) for e in comp.state_dict()["errors"].values())
    state.sync()  # collective: Q and counts from rank 0, each rank's errors kept
    expect(("qs",), "synced")



def check_cast_compression_runs_in_the_core():
    # float32 gradients under Compression.fp16 / bf16 reach the core
    # uncompressed and are rounded on its copies: no TensorFlow cast runs,
    # and the result has the bits of a cast, a 16-bit allreduce and a cast
    # back, eager and in tf.function, with and without predivision.
    rng = np.random.default_rng(11 + hvd.rank())
    v = tf.Variable(tf.zeros([300, 7], tf.float32))
    for comp, half in ((hvd.Compression.fp16, tf.float16), (hvd.Compression.bf16, tf.bfloat16)):
        with harness.counting_casts(comp) as casts:
            for predivide in (1.0, 2.0):
                def reduced(g):
                    with tf.GradientTape() as tape:
                        loss = tf.reduce_sum(v * g)
                    tape = hvd.DistributedGradientTape(tape, compression=comp,
                                                       gradient_predivide_factor=predivide)
                    return tape.gradient(loss, [v])[0]

                for mode, fn in (("eager", reduced), ("graph", tf.function(reduced))):
                    g = tf.constant(rng.standard_normal((300, 7)) * 300, tf.float32)
                    got = fn(g)
                    assert got.dtype == tf.float32 and casts == [], (mode, casts)
                    ref = hvd.allreduce(tf.cast(g, half), prescale_factor=1.0 / predivide,
                                        postscale_factor=predivide,
                                        name="cast.ref.%s.%s.%s" % (comp.wire, predivide, mode))
                    want = tf.cast(ref, tf.float32).numpy()
                    # As in torch_train's check: bits over 2 ranks, else close.
                    tol = 0 if hvd.size() == 2 else 2.0 ** -6 * np.abs(want).max()
                    err = np.abs(got.numpy() - want).max()
                    assert err <= tol, (mode, err)
                    assert not np.array_equal(want, hvd.allreduce(
                        g, name="cast.f32.%s.%s.%s" % (comp.wire, predivide, mode)).numpy())


def check_compression_and_sparse_gradients():
    for comp, tol in ((hvd.Compression.fp16, 3e-4), (hvd.Compression.bf16, 2e-3)):
        model, ref = fit_pair(lambda: keras.optimizers.SGD(0.1), compression=comp)
        for w, v in zip(model.get_weights(), ref.get_weights()):
            close(w, v, "compression %s" % type(comp).__name__, tol)
    # Embedding gradients are IndexedSlices: allgathered, and equal to dense.
    keras.utils.set_random_seed(3)
    emb = keras.layers.Embedding(10, 4)
    ids = tf.constant([[hvd.rank(), 3]])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(emb(ids))
    tape = hvd.DistributedGradientTape(tape, op=hvd.Sum)
    (grad,) = tape.gradient(loss, emb.trainable_variables)
    assert isinstance(grad, tf.IndexedSlices)
    dense = tf.math.unsorted_segment_sum(grad.values, grad.indices, 10).numpy()
    expected = np.zeros((10, 4))
    for k in range(hvd.size()):
        expected[k] += 1
        expected[3] += 1
    close(dense, expected, "IndexedSlices gradient")


def check_loss_scale_optimizer_and_mixed_precision():
    def lso():
        return keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))
    n = hvd.size()
    x, y = global_data(4, STEPS * n * B)
    ref = make_model()
    ref.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    ref.fit(x, y, batch_size=n * B, shuffle=False, verbose=0)
    model = make_model()
    opt = hvd.DistributedOptimizer(lso())
    assert isinstance(opt, keras.optimizers.LossScaleOptimizer)
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
    model.fit(rank_rows(x, B, STEPS), rank_rows(y, B, STEPS), batch_size=B, shuffle=False,
              verbose=0)
    assert model.optimizer is opt, "Keras re-wrapped the optimizer"
    for w, v in zip(model.get_weights(), ref.get_weights()):
        close(w, v, "LossScaleOptimizer", FLOAT64_TOL)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        mixed = make_model()
        mixed.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)),
                      loss="sparse_categorical_crossentropy")
        assert isinstance(mixed.optimizer, DistributedLossScaleOptimizer)
        hist = mixed.fit(rank_rows(x, B, STEPS), rank_rows(y, B, STEPS), batch_size=B,
                         verbose=0, shuffle=False)
        assert np.isfinite(hist.history["loss"][-1])
        weights_equal_across_ranks(mixed, "mixed_float16")
    finally:
        keras.mixed_precision.set_global_policy("float64")


def check_callbacks():
    n, r = hvd.size(), hvd.rank()
    x, y = global_data(5, STEPS * n * B)
    model = make_model(seed=r)  # different on every rank
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01)),
                  loss="sparse_categorical_crossentropy")
    seen = {}

    class Capture(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 1 and "w1" not in seen:  # Horovod broadcasts after the first batch
                seen["w1"] = self.model.get_weights()[0].copy()

        def on_epoch_end(self, epoch, logs=None):
            seen.setdefault("loss", []).append(logs["loss"])
            seen.setdefault("lr", []).append(float(self.model.optimizer.learning_rate.numpy()))

    hist = model.fit(rank_rows(x, B, STEPS), rank_rows(y, B, STEPS), batch_size=B, epochs=3,
                     shuffle=False, verbose=0,
                     callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(n - 1),
                                hvd.callbacks.MetricAverageCallback(),
                                hvd.callbacks.LearningRateWarmupCallback(0.01, warmup_epochs=2),
                                Capture()])
    w1 = hvd.allgather_object(seen["w1"])
    for k in range(n):
        close(w1[k], w1[n - 1], "rank %d's weights after the first batch's broadcast" % k, 0)
    weights_equal_across_ranks(model, "after broadcast + fit")
    losses = hvd.allgather_object(seen["loss"])
    assert all(l == losses[0] for l in losses), "MetricAverageCallback: ranks differ %s" % losses
    # Horovod's per-batch warm-up (steps counted by Keras): epoch 0 ends at
    # e = 1, i.e. initial / n * ((n - 1) / 2 + 1); the warm-up ends at 0.01.
    assert np.isclose(seen["lr"][0], 0.01 / n * ((n - 1) / 2 + 1)), seen["lr"]
    assert np.isclose(seen["lr"][-1], 0.01), seen["lr"]
    del hist
    # A model built lazily (no keras.Input) has no variables before fit: the
    # broadcast after the first batch, as in Horovod, finds them.
    lazy = keras.Sequential([keras.layers.Dense(4, kernel_initializer=keras.initializers.
                                                GlorotUniform(seed=r)), keras.layers.Dense(3)])
    lazy.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)),
                 loss="sparse_categorical_crossentropy")
    lazy.fit(rank_rows(x, B, STEPS), rank_rows(y, B, STEPS), batch_size=B, verbose=0,
             callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    weights_equal_across_ranks(lazy, "lazily built Sequential")
    sched = make_model()
    sched.compile(optimizer=keras.optimizers.SGD(1.0), loss="sparse_categorical_crossentropy")
    lrs = []
    sched.fit(x[:4 * B], y[:4 * B], batch_size=B, epochs=3, verbose=0, callbacks=[
        hvd.callbacks.LearningRateScheduleCallback(0.5, lambda e: 0.1 ** e, start_epoch=1),
        keras.callbacks.LambdaCallback(on_epoch_end=lambda e, l: lrs.append(
            float(sched.optimizer.learning_rate.numpy())))])
    close(lrs, [1.0, 0.05, 0.005], "LearningRateScheduleCallback", 1e-6)
    # A constant multiplier is exponential decay, as in Horovod; "lr" is logged.
    logged = []
    sched.optimizer.learning_rate.assign(1.0)
    sched.fit(x[:4 * B], y[:4 * B], batch_size=B, epochs=3, verbose=0, callbacks=[
        hvd.callbacks.LearningRateScheduleCallback(0.5, 0.1, start_epoch=1),
        keras.callbacks.LambdaCallback(on_epoch_end=lambda e, l: logged.append(l["lr"]))])
    close(logged, [1.0, 0.5, 0.05], "constant multiplier", 1e-6)


def check_local_sgd_callback():
    n = hvd.size()
    x, y = global_data(6, 6 * n * B)
    model = make_model()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    local = hvd.callbacks.LocalSGDCallback(period=3)
    model.fit(rank_rows(x, B, 6), rank_rows(y, B, 6), batch_size=B, shuffle=False, verbose=0,
              callbacks=[local])
    assert local.syncs == 2, local.syncs
    weights_equal_across_ranks(model, "local sgd")
    adaptive = hvd.callbacks.LocalSGDCallback(period=100, adaptive_threshold=1e-4)
    model.fit(rank_rows(x, B, 6), rank_rows(y, B, 6), batch_size=B, shuffle=False, verbose=0,
              callbacks=[adaptive])
    counts = hvd.allgather_object(adaptive.syncs)
    assert len(set(counts)) == 1 and counts[0] >= 1, counts


class UsersRMSprop(keras.optimizers.RMSprop):
    """An optimizer class a saved file names, unknown to Keras."""


def same_optimizer_state(loaded, saved, what):
    """Learning rate, step count and every slot as saved (by position: a
    loaded model's variables get new paths)."""
    assert float(loaded.learning_rate) == float(saved.learning_rate), what
    got, want = [np.array(v) for v in loaded.variables], [np.array(v) for v in saved.variables]
    assert [a.shape for a in got] == [a.shape for a in want], what
    assert sum(np.any(a != 0) for a in want if a.size > 1) >= 2, \
        "%s: no slot moved, nothing to compare" % what
    for a, b in zip(got, want):
        close(a, b, what, 0)


def check_save_and_load_model():
    model, _ = fit_pair(lambda: keras.optimizers.Adam(0.01))
    path = "/tmp/fuseopt_test_model_rank%d.keras" % hvd.rank()
    model.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded.optimizer).__name__ == "DistributedKerasOptimizer"
    assert type(loaded.optimizer.inner_optimizer).__name__ == "Adam"
    for w, v in zip(loaded.get_weights(), model.get_weights()):
        close(w, v, "loaded weights", 0)
    same_optimizer_state(loaded.optimizer, model.optimizer, "keras.models.load_model")
    x, y = global_data(7, 2 * hvd.size() * B)
    loaded.fit(rank_rows(x, B, 2), rank_rows(y, B, 2), batch_size=B, verbose=0, shuffle=False)
    weights_equal_across_ranks(loaded, "training after load")
    # Horovod's hvd.load_model: a model saved with a plain optimizer comes back
    # with it wrapped (and trains in step across ranks).
    plain = make_model(seed=hvd.rank())
    plain.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                  loss="sparse_categorical_crossentropy")
    plain.fit(x[:B], y[:B], batch_size=B, verbose=0)
    plain_path = "/tmp/fuseopt_test_plain_rank%d.keras" % hvd.rank()
    plain.save(plain_path)
    rewrapped = hvd.load_model(plain_path, compression=hvd.Compression.fp16)
    assert type(rewrapped.optimizer).__name__ == "DistributedKerasOptimizer"
    # Wrapped with its momentum and step count kept, as Horovod's load_model.
    same_optimizer_state(rewrapped.optimizer.inner_optimizer, plain.optimizer, "hvd.load_model")
    assert rewrapped.optimizer.momentum == 0.9
    # An optimizer class of the user's, named by custom_optimizers.
    custom = make_model()
    custom.compile(optimizer=hvd.DistributedOptimizer(UsersRMSprop(0.002)),
                   loss="sparse_categorical_crossentropy")
    custom.fit(x[:B], y[:B], batch_size=B, verbose=0)
    custom.save(plain_path)
    back = hvd.load_model(plain_path, custom_optimizers=[UsersRMSprop])
    assert type(back.optimizer.inner_optimizer) is UsersRMSprop, type(back.optimizer)
    same_optimizer_state(back.optimizer, custom.optimizer, "custom_optimizers")
    rewrapped.fit(rank_rows(x, B, 2), rank_rows(y, B, 2), batch_size=B, verbose=0, shuffle=False,
                  callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                             hvd.callbacks.MetricAverageCallback(device="/cpu:0")])
    weights_equal_across_ranks(rewrapped, "training after hvd.load_model")
    best = hvd.callbacks.BestModelCheckpoint(monitor="loss")
    try:
        rewrapped.fit(x[:B], y[:B], batch_size=B, verbose=0, callbacks=[best])
        raise AssertionError("BestModelCheckpoint without a filepath did not raise")
    except ValueError as e:
        assert "filepath" in str(e), e
    best.filepath = "/tmp/fuseopt_test_best_rank%d.keras" % hvd.rank()
    rewrapped.fit(x[:B], y[:B], batch_size=B, epochs=2, verbose=0, callbacks=[best])
    assert keras.models.load_model(best.filepath) is not None


def check_partial_distributed_optimizer_keeps_local_layers_local():
    """Horovod's PartialDistributedOptimizer, with 0, 1 and 2 local layers of
    three: a local layer's gradient is this rank's own, divided by size()
    with scale_local_gradients (the default) and as it is without; the other
    layers' gradients are averaged."""
    r, n = hvd.rank(), hvd.size()
    mean = sum(k + 1 for k in range(n)) / n
    for local_count in (0, 1, 2):
        for scale in (True, False):
            layers = [keras.layers.Dense(2) for _ in range(3)]
            model = keras.Sequential([keras.Input((3,))] + layers)
            local = layers[:local_count]
            opt = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(1.0), local_layers=local,
                                                  scale_local_gradients=scale)
            variables = model.trainable_variables
            before = [np.array(v) for v in variables]
            opt.apply([tf.fill(v.shape, float(r + 1)) for v in variables], variables)
            what = "%d local layers, scale_local_gradients=%s" % (local_count, scale)
            for layer in layers:
                step = ((r + 1) / (n if scale else 1)) if layer in local else mean
                for v in layer.trainable_weights:
                    b = before[[id(u) for u in variables].index(id(v))]
                    close(np.array(v), b - step, "%s: %s" % (what, v.path))
    # A single layer, not in a list, as Horovod also takes it.
    shared_layer, local_layer = keras.layers.Dense(2), keras.layers.Dense(2)
    model = keras.Sequential([keras.Input((3,)), shared_layer, local_layer])
    opt = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(1.0), local_layers=local_layer)
    before = [np.array(v) for v in local_layer.trainable_weights]
    opt.apply([tf.fill(v.shape, float(r + 1)) for v in model.trainable_variables],
              model.trainable_variables)
    for v, b in zip(local_layer.trainable_weights, before):
        close(np.array(v), b - (r + 1) / n, "a single local layer")


def check_jit_compile_true_is_a_clear_error():
    model = make_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)),
                  loss="sparse_categorical_crossentropy", jit_compile=True)
    x, y = global_data(8, B)
    try:
        model.fit(x, y, batch_size=B, verbose=0)
    except Exception as e:
        assert "jit_compile" in str(e), str(e)[:500]
    else:
        raise AssertionError("fit with jit_compile=True did not raise")


def check_sync_batch_normalization_uneven_batches():
    n, r = hvd.size(), hvd.rank()
    sizes = [k + 1 for k in range(n)] if n > 1 else [3]
    start = sum(sizes[:r])
    keras.utils.set_random_seed(0)
    ref = keras.layers.BatchNormalization(momentum=0.7)
    sync = hvd.SyncBatchNormalization(momentum=0.7)
    rng = np.random.default_rng(9)
    for step in range(3):
        x = (rng.normal(size=(sum(sizes), 5)) * 3 + 1).astype("float32")
        probe = rng.normal(size=x.shape).astype("float32")
        xt = tf.constant(x)
        mine = tf.constant(x[start:start + sizes[r]])
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(xt)
            tape.watch(mine)
            out_ref = ref(xt, training=True)
            loss_ref = tf.reduce_sum(out_ref * probe)
            out = sync(mine, training=True)
            loss = tf.reduce_sum(out * probe[start:start + sizes[r]])
        close(out, out_ref.numpy()[start:start + sizes[r]], "SyncBN forward step %d" % step,
              SYNC_BN_TOL)
        close(tape.gradient(loss, mine), tape.gradient(loss_ref, xt).numpy()[start:start + sizes[r]],
              "SyncBN input gradient step %d" % step, SYNC_BN_TOL)
        g = tape.gradient(loss, sync.trainable_variables)
        g_ref = tape.gradient(loss_ref, ref.trainable_variables)
        for gi, gr in zip(g, g_ref):
            close(hvd.allreduce(gi, op=hvd.Sum), gr, "SyncBN gamma/beta gradient (summed)",
                  SYNC_BN_TOL)
    close(sync.moving_mean, ref.moving_mean, "moving mean", SYNC_BN_TOL)
    close(sync.moving_variance, ref.moving_variance, "moving variance", SYNC_BN_TOL)
    x = rng.normal(size=(sum(sizes), 5)).astype("float32")
    close(sync(x[start:start + sizes[r]], training=False), ref(x, training=False).numpy()[start:start + sizes[r]],
          "SyncBN inference", SYNC_BN_TOL)


def check_sync_batch_normalization_in_fit():
    model = make_model(bn=lambda: hvd.SyncBatchNormalization())
    assert not model.layers[1].supports_jit
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05)),
                  loss="sparse_categorical_crossentropy")
    x, y = global_data(10, STEPS * hvd.size() * B)
    model.fit(rank_rows(x, B, STEPS), rank_rows(y, B, STEPS), batch_size=B, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    weights_equal_across_ranks(model, "SyncBN model")


def check_metrics_callback():
    lines = []
    n = hvd.size()
    x, y = global_data(2, 4 * n * B)
    model = make_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)),
                  loss="sparse_categorical_crossentropy")
    history = model.fit(rank_rows(x, B, 4), rank_rows(y, B, 4), batch_size=B, epochs=2,
                        verbose=0, callbacks=[hvd.callbacks.MetricsCallback(lines.append)])
    h = history.history
    assert len(h["fuseopt_communication_s"]) == 2, h
    assert all(c > 0 for c in h["fuseopt_communication_s"]), h
    # fit waits for the gradient allreduce inside the train step: no overlap in Keras.
    assert all(w > 0 for w in h["fuseopt_exposed_wait_s"]), h
    assert all(0 <= e <= 1 for e in h["fuseopt_overlap_efficiency"]), h
    if hvd.rank() == 0:
        assert len(lines) == 2 and "fuseopt epoch 1:" in lines[1], lines
        assert "4 gradient waits" in lines[1] and "overlap efficiency" in lines[1], lines
    else:
        assert lines == [], lines


def check_momentum_correction_warns_through_the_wrapper():
    """Keras 3 compiles momentum into its update, so momentum_correction cannot
    act: the warning must fire for a wrapped optimizer with momentum, not
    for one without."""
    import logging
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("fuseopt").addHandler(handler)
    x, y = global_data(9, STEPS * B)
    try:
        for momentum in (0.9, 0.0):
            model = make_model()
            model.compile(optimizer=hvd.DistributedOptimizer(
                keras.optimizers.SGD(0.01, momentum=momentum)),
                loss="sparse_categorical_crossentropy")
            model.fit(x, y, batch_size=B, epochs=1, verbose=0, callbacks=[
                hvd.callbacks.LearningRateWarmupCallback(0.01, warmup_epochs=1,
                                                         steps_per_epoch=STEPS)])
            warned = [r for r in records if "momentum_correction" in r.getMessage()]
            assert len(warned) == (1 if momentum else 0), (momentum, warned)
            records.clear()
    finally:
        logging.getLogger("fuseopt").removeHandler(handler)


def check_wrapper_reads_through_counts_passes_and_round_trips():
    """The Keras wrapper behaves like the optimizer it wraps, as Horovod's
    subclass does: its hyper-parameters read through; get_config/from_config
    round-trip without consuming the dict; every backward pass counts in
    `iterations`; KerasState takes an explicit optimizer for a model that was
    never compiled."""
    import copy
    sgd = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True))
    adam = hvd.DistributedOptimizer(keras.optimizers.Adam(0.01, beta_1=0.8))
    assert (sgd.momentum, sgd.nesterov, adam.beta_1) == (0.9, True, 0.8)
    assert not hasattr(sgd, "no_such_setting")
    cfg = sgd.get_config()
    kept = copy.deepcopy(cfg)
    again = type(sgd).from_config(cfg)
    assert cfg == kept, "from_config consumed its input"
    assert type(sgd).from_config(cfg).get_config() == again.get_config() == kept
    x, y = global_data(11, 10 * B)
    model = make_model()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01), backward_passes_per_step=3)
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
    seen = []
    for k in range(10):
        model.train_on_batch(x[k * B:(k + 1) * B], y[k * B:(k + 1) * B])
        seen.append(int(opt.iterations.numpy()))
    assert seen == list(range(1, 11)), seen
    fresh = make_model()  # built, never compiled
    state = hvd.elastic.KerasState(fresh, optimizer=keras.optimizers.SGD(0.1), epoch=0)
    state.epoch = 1
    state.commit()
    assert state.epoch == 1


def check_sharded_optimizer_state_and_weights():
    """DistributedOptimizer(shard="optimizer"): the same weights as one process
    on the concatenated batch, with each rank holding the optimizer slots of
    its owned variables only (uneven at 4 ranks: the variables differ in size),
    and each gradient travelling to its owner only (one grouped reduction per
    step); a compressor whose payload cannot (ef_sign) takes the allreduce."""
    import fuseopt.api.ops as native_ops
    n = hvd.size()
    reduce_to_owners, calls = native_ops.grouped_reduce_async_, []
    native_ops.grouped_reduce_async_ = lambda *a, **k: calls.append(1) or reduce_to_owners(*a, **k)
    try:
        for name, make_opt, compression in (
                ("SGD+momentum", lambda: keras.optimizers.SGD(0.1, momentum=0.9),
                 hvd.Compression.none),
                ("Adam", lambda: keras.optimizers.Adam(0.01), hvd.Compression.fp16),
                ("Adam, ef_sign", lambda: keras.optimizers.Adam(0.01), hvd.Compression.ef_sign())):
            del calls[:]
            model, ref = fit_pair(make_opt, epochs=2, shard="optimizer", compression=compression)
            if "ef_sign" in name:
                assert not calls, (name, len(calls))
                continue
            assert len(calls) == 2 * STEPS or n == 1, (name, len(calls))
            for w, v in zip(model.get_weights(), ref.get_weights()):
                close(w, v, "sharded fit %s" % name)
            opt = model.optimizer
            owned = opt.owned_variables(model.trainable_variables)
            slots = [v for v in opt.inner_optimizer.variables if len(v.shape) > 0]
            ref_slots = [v for v in ref.optimizer.variables if len(v.shape) > 0]
            per_var = len(ref_slots) // len(model.trainable_variables)
            assert len(slots) == per_var * len(owned), (name, len(slots), len(owned))
            held = hvd.allgather_object(sum(int(np.prod(v.shape)) for v in slots))
            assert sum(held) == sum(int(np.prod(v.shape)) for v in ref_slots), (name, held)
            assert max(held) < sum(held) or n == 1, (name, held)
            assert int(opt.iterations.numpy()) == int(ref.optimizer.iterations.numpy())
    finally:
        native_ops.grouped_reduce_async_ = reduce_to_owners
    for kwargs, words in ((dict(shard="gradients"), "state only"),
                          (dict(shard="optimizer", backward_passes_per_step=2),
                           "backward_passes_per_step=1"),
                          (dict(shard="optimizer", num_groups=2), "groups")):
        harness.expect_error(hvd.UnsupportedError, lambda: hvd.DistributedOptimizer(
            keras.optimizers.SGD(0.1), **kwargs), words)


CHECKS = [check_fit_equals_single_process_sgd_adam,
          check_accumulation_equals_concatenated_batch,
          check_custom_loop_tape_and_apply_gradients,
          check_compression_and_sparse_gradients, check_cast_compression_runs_in_the_core,
          check_ef_sign_in_tf_function_and_fit, check_powersgd_in_tf_function_and_fit,
          check_loss_scale_optimizer_and_mixed_precision, check_callbacks,
          check_local_sgd_callback, check_save_and_load_model,
          check_partial_distributed_optimizer_keeps_local_layers_local,
          check_jit_compile_true_is_a_clear_error,
          check_sync_batch_normalization_uneven_batches,
          check_sync_batch_normalization_in_fit, check_metrics_callback,
          check_momentum_correction_warns_through_the_wrapper,
          check_wrapper_reads_through_counts_passes_and_round_trips,
          check_sharded_optimizer_state_and_weights]

if __name__ == "__main__":
    # float64: the references are then exact to ~1e-15, so 1e-5 tests semantics,
    # not how much float32 rounding a chaotic 8-step trajectory amplifies.
    keras.config.set_floatx("float64")
    # Check names on the command line run only those (test_tensorflow.py's
    # 4-rank run takes the checks whose outcome depends on the rank count).
    chosen = [c for c in CHECKS + [check_fit_with_a_bucket_per_gradient]
              if c.__name__ in sys.argv[1:]]
    assert len(chosen) == len(sys.argv[1:]), "unknown check in %s" % sys.argv[1:]
    harness.run(chosen or CHECKS)
