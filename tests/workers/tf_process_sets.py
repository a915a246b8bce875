"""fuseopt.tensorflow with process sets (tests/test_process_sets.py):
collectives eager and in tf.function, gradients in the set, and two disjoint
sets training two different Keras models at once, checked against a
single-process computation."""
import numpy as np
import tensorflow as tf
import keras

import fuseopt.tensorflow as htf  # Horovod's keras module has no process_set= on collectives
import harness
from tf_common import close, hvd

R = S = 0


def sets():
    evens = hvd.add_process_set([r for r in range(S) if r % 2 == 0])
    odds = hvd.add_process_set([r for r in range(S) if r % 2 == 1])
    return (evens, odds) if R % 2 == 0 else (odds, evens)


def remove(mine, other):
    for ps in sorted((mine, other), key=lambda ps: ps.ranks):
        assert hvd.remove_process_set(ps)


def check_collectives_and_gradients():
    mine, other = sets()
    members, n, k = mine.ranks, mine.size(), mine.rank()
    total = sum(r + 1 for r in members)
    x = tf.constant([[1.0, 2.0]]) * (R + 1)

    def body(x):
        return (htf.allreduce(x, op=hvd.Sum, process_set=mine),
                htf.allreduce(x, process_set=mine),
                htf.grouped_allreduce([x, 2 * x], op=hvd.Sum, process_set=mine),
                htf.allgather(x, process_set=mine),
                htf.broadcast(x, members[-1], process_set=mine),
                htf.reducescatter(tf.ones([2 * n, 2]) * (R + 1), op=hvd.Sum, process_set=mine),
                htf.alltoall(tf.range(2 * n, dtype=tf.float32) + 100.0 * R, process_set=mine))

    for mode, fn in (("eager", body), ("graph", tf.function(body))):
        s, avg, grp, gat, bc, rs, a2a = fn(x)
        close(s, [[total, 2 * total]], mode + " sum")
        close(avg, [[total / n, 2 * total / n]], mode + " average")
        close(grp[1], [[2 * total, 4 * total]], mode + " grouped")
        close(gat, np.array([[r + 1, 2 * (r + 1)] for r in members]), mode + " allgather")
        close(bc, [[members[-1] + 1, 2 * (members[-1] + 1)]], mode + " broadcast")
        close(rs, np.full((2, 2), total), mode + " reducescatter")
        close(a2a, np.concatenate([np.arange(2 * k, 2 * k + 2) + 100.0 * r for r in members]),
              mode + " alltoall")
    w = tf.Variable(tf.ones([3]) * (R + 1))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(htf.allreduce(w, name="grad.ar", process_set=mine) * (R + 1))
    close(tape.gradient(loss, w), np.full(3, total / n), "allreduce gradient in the set")
    assert htf.allgather_object(R, process_set=mine) == members
    htf.barrier(process_set=mine)
    harness.expect_error(hvd.InvalidArgumentError,
                         lambda: htf.allreduce(x, process_set=object()), "ProcessSet")
    harness.expect_error(hvd.InvalidArgumentError,
                         lambda: htf.allreduce(x, name="nm", process_set=other), "not a member")
    remove(mine, other)


def model_for(set_index):
    keras.utils.set_random_seed(set_index)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3 + set_index,
                                                                   activation="tanh"),
                             keras.layers.Dense(1)])


def batch(r, step):
    g = np.random.default_rng(1000 * step + r)
    return (g.standard_normal((8, 4)).astype(np.float32),
            g.standard_normal((8, 1)).astype(np.float32))


def grads_of(model, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    return tape, loss


def check_two_sets_train_two_models():
    mine, other = sets()
    set_index, lr, steps = R % 2, 0.1, 4
    model = model_for(set_index)
    if mine.rank() != 0:  # different starts, made equal by the broadcast
        for v in model.trainable_variables:
            v.assign_add(tf.ones_like(v))
    htf.broadcast_variables(model.variables, root_rank=mine.ranks[0], process_set=mine)
    opt = keras.optimizers.SGD(lr)
    for step in range(steps):
        x, y = batch(R, step)
        tape, _ = grads_of(model, x, y)
        tape = htf.DistributedGradientTape(tape, process_set=mine)
        opt.apply_gradients(zip(tape.gradient(_, model.trainable_variables),
                                model.trainable_variables))
    ref = model_for(set_index)
    for step in range(steps):  # one process: the members' gradients averaged
        summed = None
        for r in mine.ranks:
            x, y = batch(r, step)
            tape, loss = grads_of(ref, x, y)
            g = tape.gradient(loss, ref.trainable_variables)
            summed = g if summed is None else [a + b for a, b in zip(summed, g)]
        for v, g in zip(ref.trainable_variables, summed):
            v.assign_sub(lr * g / len(mine.ranks))
    for v, want in zip(model.trainable_variables, ref.trainable_variables):
        close(v.numpy(), want.numpy(), "set %d %s" % (set_index, v.path), tol=1e-5)
    remove(mine, other)


def check_keras_optimizer_in_a_set():
    """DistributedOptimizer(process_set=) inside fit: the set's ranks agree."""
    mine, other = sets()
    model = model_for(0)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05),
                                                     process_set=mine), loss="mse")
    htf.broadcast_variables(model.variables, root_rank=mine.ranks[0], process_set=mine)
    x, y = batch(R, 0)
    model.fit(x, y, batch_size=4, epochs=2, verbose=0)
    flat = np.concatenate([v.numpy().reshape(-1) for v in model.trainable_variables])
    rows = htf.allgather(flat[None], name="weights", process_set=mine).numpy()
    assert all(np.array_equal(rows[0], row) for row in rows), "weights differ in the set"
    remove(mine, other)


if __name__ == "__main__":
    hvd.init()
    R, S = hvd.rank(), hvd.size()
    hvd.shutdown()
    harness.run([check_collectives_and_gradients, check_two_sets_train_two_models,
                 check_keras_optimizer_in_a_set])
