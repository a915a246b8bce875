"""The plain ``fuseopt.tensorflow`` module as Horovod's ``horovod.tensorflow``:
grouped_allreduce of tf.IndexedSlices, broadcast_object_fn and the
``session`` arguments, PartialDistributedGradientTape and local sources, and
``hvd.elastic``'s TensorFlowState / TensorFlowKerasState outside the driver.
Run by tests/test_tensorflow.py."""
import numpy as np
import tensorflow as tf

import rank_harness as harness
from tf_common import close, keras, make_model

import fuseopt.tensorflow as htf
from fuseopt.training.checkpoint import CheckpointError


def check_grouped_allreduce_of_indexed_slices():
    """Slices are allgathered (values averaged by the set's size), dense
    tensors reduced, each in its place of the list; eager and traced."""
    r, n = htf.rank(), htf.size()
    rows = tf.IndexedSlices(tf.fill([1, 2], float(r + 1)), tf.constant([r % 3]),
                            tf.constant([3, 2]))
    dense = tf.fill([2], float(r + 1))

    def body(rows, dense):
        return htf.grouped_allreduce([rows, dense], name="gs.mixed")

    for mode, fn in (("eager", body), ("graph", tf.function(body))):
        slices, reduced = fn(rows, dense)
        assert isinstance(slices, tf.IndexedSlices), (mode, type(slices))
        close(slices.values, [[(k + 1) / n] * 2 for k in range(n)], mode + " values")
        assert slices.indices.numpy().tolist() == [k % 3 for k in range(n)], mode
        close(reduced, np.full(2, sum(range(1, n + 1)) / n), mode + " dense")
    alone = htf.grouped_allreduce([rows], op=htf.Sum, name="gs.alone")[0]
    close(alone.values, [[k + 1.0] * 2 for k in range(n)], "slices alone, summed")
    for op in (htf.Min, htf.Max, htf.Product, htf.Adasum):
        harness.expect_error(NotImplementedError,
                             lambda: htf.grouped_allreduce([dense, rows], op=op), "IndexedSlices")
    harness.expect_error(NotImplementedError,
                         lambda: htf.grouped_allreduce([rows], postscale_factor=2.0),
                         "postscale_factor")
    assert htf.grouped_allreduce([]) == []


def check_object_broadcasts_as_horovod():
    """broadcast_object_fn gives a reusable broadcast; broadcast_object and
    allgather_object take Horovod's ``session`` third (unused in TF2)."""
    r, n = htf.rank(), htf.size()
    from_last = htf.broadcast_object_fn(root_rank=n - 1, name="bof")
    assert from_last({"r": r}) == {"r": n - 1}
    assert from_last([r, "again"]) == [n - 1, "again"]
    assert htf.broadcast_object(r, n - 1, None, "bo.positional") == n - 1
    flags = tf.Variable([r % 2 == 1, True])
    (value,) = htf.broadcast_([flags], n - 1)  # booleans, eagerly (bytes on the wire)
    assert flags.numpy().tolist() == value.numpy().tolist() == [(n - 1) % 2 == 1, True]
    assert htf.allgather_object(r, None, "ago.positional") == list(range(n))
    harness.expect_error(htf.InvalidArgumentError, lambda: htf.broadcast_object_fn(
        process_set="not a set"))


def check_tf1_optimizer_averages_gradients_in_a_session():
    """A tf.compat.v1.train optimizer in TF1 graph code (Horovod wraps those
    too): minimize() steps with the gradient averaged over the ranks, which
    no rank computes alone (rank r's gradient of (r + 1) * w is r + 1)."""
    r, n = htf.rank(), htf.size()
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=[1.0, 2.0])
        loss = tf.reduce_sum(w) * float(r + 1)
        opt = htf.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5))
        (grad, var), = opt.compute_gradients(loss, var_list=[w])
        step = opt.minimize(loss, var_list=[w])
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            assert var is w
            close(session.run(grad), np.full(2, (n + 1) / 2), "averaged gradient")
            session.run(step)
            close(session.run(w), [1.0 - 0.5 * (n + 1) / 2, 2.0 - 0.5 * (n + 1) / 2], "step")
    harness.expect_error(htf.UnsupportedError, lambda: htf.DistributedOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.5), backward_passes_per_step=2),
        "backward_passes_per_step=2", "TF1 optimizer")


def _two_layer_model():
    model = make_model(seed=3)
    model.build((None, 6))
    return model


def _local_gradients(model, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
            y, model(x), from_logits=True))
    return loss, tape


def check_partial_tape_keeps_local_layers_local():
    """The local layer's gradient is this rank's own (divided by size() with
    scale_local_gradients, as Horovod), the others are averaged; the same
    under tf.function and through get_local_and_global_gradients."""
    r, n = htf.rank(), htf.size()
    model = _two_layer_model()
    rng = np.random.default_rng(10 + r)  # every rank its own data
    x = tf.constant(rng.normal(size=(4, 6)), tf.float32)
    y = tf.constant(rng.integers(0, 3, 4))
    variables = model.trainable_variables
    local_layer = model.layers[-1]
    local_ids = {id(v) for v in local_layer.trainable_weights}
    loss, tape = _local_gradients(model, x, y)
    own = [g.numpy() for g in tape.gradient(loss, variables)]
    everyone = htf.allgather_object(own, name="pt.own")
    mean = [np.mean([e[i] for e in everyone], axis=0) for i in range(len(own))]

    def expected(scale):
        return [own[i] / (n if scale else 1) if id(v) in local_ids else mean[i]
                for i, v in enumerate(variables)]

    def partial(scale):
        loss, tape = _local_gradients(model, x, y)
        return htf.PartialDistributedGradientTape(
            tape, local_layers=local_layer, scale_local_gradients=scale).gradient(loss, variables)

    for scale in (True, False):
        for mode, fn in (("eager", partial), ("graph", tf.function(partial))):
            for i, (g, e) in enumerate(zip(fn(scale), expected(scale))):
                close(g, e, "%s scale=%s variable %d" % (mode, scale, i), 1e-6)
    loss, tape = _local_gradients(model, x, y)
    tape = htf.DistributedGradientTape(tape)
    for v in local_layer.trainable_weights:
        tape.register_local_source(v)
    local, shared = tape.get_local_and_global_gradients(loss, variables)
    assert [id(v) for v, _ in local] == [id(v) for v in variables if id(v) in local_ids]
    assert len(local) + len(shared) == len(variables)
    for v, g in local:
        close(g, own[[id(w) for w in variables].index(id(v))] / n, "local pair")
    loss, tape = _local_gradients(model, x, y)
    generic = htf.DistributedGradientTape(tape).gradient(loss, variables, use_generic_names=True)
    for g, e in zip(generic, mean):
        close(g, e, "use_generic_names")
    harness.expect_error(ValueError, lambda: htf.PartialDistributedGradientTape(
        tf.GradientTape(), local_layers=[local_layer, "dense"]), "tf.keras.layers.Layer")
    # Two reductions of the same variables' gradients in one TF1 graph (the
    # tape's gradient, then get_local_and_global_gradients, as Horovod's own
    # test does), run by one session.run: they may run at once, so they
    # negotiate under names of their own, not one name twice.
    graph = tf.Graph()
    with graph.as_default():
        shared_var = tf.compat.v1.Variable([1.0, 2.0], use_resource=True, name="pt.shared")
        local_var = tf.compat.v1.Variable([3.0], use_resource=True, name="pt.local")
        with tf.GradientTape(persistent=True) as tape:
            loss = (r + 1.0) * (tf.reduce_sum(shared_var) + tf.reduce_sum(local_var))
        tape = htf.DistributedGradientTape(tape)
        tape.register_local_source(local_var)
        first = tape.gradient(loss, [shared_var, local_var])
        local, shared = tape.get_local_and_global_gradients(loss, [shared_var, local_var])
        init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(init)
        got = session.run([first, [g for _, g in local], [g for _, g in shared]])
    for what, (g_shared, g_local) in (("gradient", got[0]), ("pairs", (got[2][0], got[1][0]))):
        close(g_shared, np.full(2, (n + 1) / 2.0), "TF1 graph %s: shared" % what)
        close(g_local, [(r + 1.0) / n], "TF1 graph %s: local" % what)


def check_tensorflow_state_saves_restores_and_syncs():
    r = htf.rank()
    a = tf.Variable(tf.fill([2], float(r)), name="state_a")
    b = tf.Variable(tf.fill([3, 1], 10.0 + r), name="state_b")
    state = htf.elastic.TensorFlowState([a, b], epoch=r)
    a.assign([7.0, 7.0])
    state.epoch = 5
    state.restore()
    close(a, [r, r], "restored variable")
    assert state.epoch == r
    state.sync()
    close(a, [0.0, 0.0], "synced from rank 0")
    close(b, np.full((3, 1), 10.0), "synced from rank 0")
    assert state.epoch == 0
    a.assign([1.0, 2.0])
    state.epoch = 3
    state.save()
    payload = state._payload()  # what the commit store keeps
    a.assign([9.0, 9.0])
    state.epoch = 8
    state._load_payload(payload)
    close(a, [1.0, 2.0], "commit payload restored")
    assert state.epoch == 3
    harness.expect_error(htf.InvalidArgumentError, lambda: htf.elastic.TensorFlowState(),
                         "variables")
    # Unnamed variables (all called "Variable", as in Horovod's own test)
    # are kept and restored by position.
    first, second = tf.Variable(1.0), tf.Variable(2.0)
    unnamed = htf.elastic.TensorFlowState([first, second])
    first.assign(5.0)
    second.assign(6.0)
    unnamed.restore()
    assert (float(first.numpy()), float(second.numpy())) == (1.0, 2.0)
    other = htf.elastic.TensorFlowState([tf.Variable([0.0, 0.0], name="elsewhere")])
    harness.expect_error(CheckpointError, lambda: other._load_payload(payload),
                         "other variables")


def check_tensorflow_keras_state_with_an_uncompiled_model():
    """TensorFlowKerasState(model, optimizer) keeps the model's and the
    optimizer's variables, also for a model that was never compiled."""
    r = htf.rank()
    model = _two_layer_model()
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    state = htf.elastic.TensorFlowKerasState(model, optimizer, backend=None, batch=0)
    start = [w.copy() for w in model.get_weights()]
    x = tf.ones([2, 6]) * (r + 1)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                  model.trainable_variables))
    state.restore()
    for w, s in zip(model.get_weights(), start):
        close(w, s, "keras state restored")
    momentum = [v for v in optimizer.variables if "momentum" in v.path]
    assert momentum and all(not np.any(v.numpy()) for v in momentum), "optimizer not restored"
    state.sync()
    harness.expect_error(ValueError, lambda: htf.elastic.TensorFlowKerasState(
        keras.Sequential([keras.layers.Dense(2)])), "built")


CHECKS = [check_grouped_allreduce_of_indexed_slices, check_object_broadcasts_as_horovod,
          check_partial_tape_keeps_local_layers_local,
          check_tensorflow_state_saves_restores_and_syncs,
          check_tensorflow_keras_state_with_an_uncompiled_model,
          check_tf1_optimizer_averages_gradients_in_a_session]

if __name__ == "__main__":
    harness.run(CHECKS)
