"""fuseopt.tensorflow with process sets (tests/test_process_sets.py), at 2 and
4 ranks with evens and odds added on every rank: collectives eager and in
tf.function against numpy over the set's members, gradients in the set,
two disjoint sets training at once (checked against a single-process
computation, equal within a set, different between sets), and misuse."""
import contextlib

import numpy as np
import tensorflow as tf
import keras

import fuseopt.tensorflow as htf  # Horovod's keras module has no process_set= on collectives
import rank_harness as harness
from tf_common import close, hvd

R = S = 0
_failures = []  # this rank's failed comparisons in the running check


def soft(fn, *args, **kwargs):
    """Runs a comparison; a failure is recorded and the check goes on. A
    comparison may fail on some ranks only (a wrong slice, a wrong root's
    gradient): stopping there would leave the other ranks waiting in the
    set's next collective, so every rank runs them all and fails at the end."""
    try:
        fn(*args, **kwargs)
    except AssertionError as e:
        _failures.append(str(e))


def expect(cond, message):
    if not cond:
        _failures.append(str(message))


@contextlib.contextmanager
def sets():
    """(mine, other): evens and odds, added on every rank; removed after, also
    when a check fails on every rank (else the next one could not add them)."""
    evens = hvd.add_process_set([r for r in range(S) if r % 2 == 0])
    odds = hvd.add_process_set([r for r in range(S) if r % 2 == 1])
    try:
        yield (evens, odds) if R % 2 == 0 else (odds, evens)
    finally:
        for ps in (evens, odds):
            assert hvd.remove_process_set(ps)


def check_collectives(mine, other):
    """Every collective with process_set= gives numpy's result over the set's
    members only (Average over the set's size, rows by position in the set,
    root_rank a global rank), eagerly and in a tf.function."""
    members, n, k = mine.ranks, mine.size(), mine.rank()
    total = sum(r + 1 for r in members)
    x = tf.constant([[1.0, 2.0]]) * (R + 1)
    # Distinct rows, so that a slice taken at the wrong position shows.
    scatter = np.arange(2 * n * 2, dtype=np.float32).reshape(2 * n, 2)
    scatter_sum = sum(scatter + 1000.0 * r for r in members)

    def body(x):
        return (htf.allreduce(x, op=hvd.Sum, process_set=mine),
                htf.allreduce(x, process_set=mine),
                htf.grouped_allreduce([x, 2 * x], op=hvd.Sum, process_set=mine),
                htf.allgather(x, process_set=mine),
                htf.broadcast(x, members[-1], process_set=mine),
                htf.reducescatter(tf.constant(scatter) + 1000.0 * R, op=hvd.Sum,
                                  process_set=mine),
                htf.alltoall(tf.range(2 * n, dtype=tf.float32) + 100.0 * R, process_set=mine),
                htf.grouped_allgather([x, 2 * x], process_set=mine),
                htf.grouped_reducescatter([tf.constant(scatter) + 1000.0 * R,
                                           2 * tf.constant(scatter) + 2000.0 * R],
                                          op=hvd.Sum, process_set=mine),
                htf.size_op(mine.process_set_id), htf.process_set_included_op(
                    mine.process_set_id), htf.process_set_included_op(other.process_set_id))

    gathered = np.array([[r + 1, 2 * (r + 1)] for r in members])
    for mode, fn in (("eager", body), ("graph", tf.function(body))):
        s, avg, grp, gat, bc, rs, a2a, ggat, grs, size, inside, outside = fn(x)
        soft(close, s, [[total, 2 * total]], mode + " sum")
        soft(close, avg, [[total / n, 2 * total / n]], mode + " average")
        soft(close, grp[0], [[total, 2 * total]], mode + " grouped 0")
        soft(close, grp[1], [[2 * total, 4 * total]], mode + " grouped 1")
        soft(close, gat, gathered, mode + " allgather")
        soft(close, ggat[0], gathered, mode + " grouped allgather 0")
        soft(close, ggat[1], 2 * gathered, mode + " grouped allgather 1")
        soft(close, grs[0], scatter_sum[2 * k:2 * k + 2], mode + " grouped reducescatter 0")
        soft(close, grs[1], 2 * scatter_sum[2 * k:2 * k + 2], mode + " grouped reducescatter 1")
        expect((int(size), int(inside), int(outside)) == (n, 1, 0),
               "%s size_op / process_set_included_op: %s" % (mode, (size, inside, outside)))
        soft(close, bc, [[members[-1] + 1, 2 * (members[-1] + 1)]], mode + " broadcast")
        soft(close, rs, scatter_sum[2 * k:2 * k + 2], mode + " reducescatter")
        soft(close, a2a, np.concatenate([np.arange(2 * k, 2 * k + 2) + 100.0 * r
                                         for r in members]), mode + " alltoall")
    _, splits = htf.alltoall(tf.range(2 * n, dtype=tf.float32), splits=[2] * n,
                                process_set=mine)
    expect(list(splits.numpy()) == [2] * n, "alltoall splits %s" % splits)
    # IndexedSlices: members' values and indices gathered, Average over the set.
    sl = htf.allreduce(tf.IndexedSlices(tf.ones([1, 2]) * (R + 1), tf.constant([R]),
                                        dense_shape=tf.constant([S, 2])), process_set=mine)
    soft(close, sl.values, np.array([[r + 1, r + 1] for r in members]) / n, "sparse values")
    expect(list(sl.indices.numpy()) == members, "sparse indices %s" % sl.indices)
    # Compressors that sum (ef_sign) average over the set too.
    ef = htf.allreduce(tf.ones([3]) * (R + 1), compression=htf.Compression.ef_sign(),
                       name="ef", process_set=mine)
    soft(close, ef, np.full(3, total / n), "ef_sign in the set")
    # PowerSGD's two rounds stay in the set; at full rank it is exact.
    base = np.arange(128.0, dtype=np.float32).reshape(64, 2)
    psgd = htf.allreduce(tf.constant(base * (R + 1)), name="psgd", process_set=mine,
                         compression=htf.Compression.powersgd(rank=2, start_iter=0,
                                                              min_compression_rate=0.01))
    soft(close, psgd, base * (total / n), "powersgd in the set")
    expect(htf.allgather_object(R, process_set=mine) == members, "allgather_object")
    expect(htf.broadcast_object(R, root_rank=members[-1], process_set=mine) == members[-1],
           "broadcast_object")
    htf.barrier(process_set=mine)
    # The global set still sees every rank afterwards.
    soft(close, htf.allreduce(tf.ones([1]), op=hvd.Sum), [S], "global sum")


def check_gradients(mine, other):
    """Gradients of the differentiable collectives run in the forward op's
    set: the global definitions, with the set's size and position."""
    members, n, k = mine.ranks, mine.size(), mine.rank()
    total = sum(r + 1 for r in members)
    w = tf.Variable(tf.ones([3]) * (R + 1))
    for mode in ("eager", "graph"):
        def ar_grad():
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(htf.allreduce(w, name="g.ar." + mode, process_set=mine)
                                     * (R + 1))
            return tape.gradient(loss, w)
        fn = ar_grad if mode == "eager" else tf.function(ar_grad)
        # d/dw of sum(mean_set(w) * c_R) is mean over the set of c (global: over S)
        soft(close, fn(), np.full(3, total / n), mode + " allreduce gradient in the set")
    rows = tf.Variable(tf.ones([2, 3]) * (R + 1))  # 2 rows per member
    weights = tf.reshape(tf.range(2 * n * 3, dtype=tf.float32), [2 * n, 3])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(htf.allgather(rows, name="g.ag", process_set=mine) * weights
                             * (R + 1))
    # Averaged over the set, then this rank's rows (by its position in the set).
    soft(close, tape.gradient(loss, rows), weights.numpy()[2 * k:2 * k + 2] * total / n,
         "allgather gradient in the set")
    root = members[-1]
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(htf.broadcast(w, root, name="g.bc", process_set=mine) * (R + 1))
    soft(close, tape.gradient(loss, w), np.full(3, total / n if R == root else 0.0),
         "broadcast gradient in the set")
    # The set's size and positions, not the world's (3 ranks: a set of 2 and of 1).
    x = tf.Variable(tf.ones([2 * n, 1]))
    rows_of_member = np.repeat(np.array(members) + 1.0, 2).reshape(2 * n, 1)

    def set_gradients(w, x):
        with tf.GradientTape(persistent=True) as tape:
            grouped = htf.grouped_allreduce([w, 2 * w], process_set=mine)
            losses = (tf.reduce_sum((grouped[0] + grouped[1]) * (R + 1)),
                      tf.reduce_sum(htf.alltoall(x, process_set=mine) * (R + 1)),
                      tf.reduce_sum(htf.reducescatter(x, op=hvd.Sum, process_set=mine)
                                    * (R + 1)))
        return [tape.gradient(loss, v) for loss, v in zip(losses, (w, x, x))]

    for mode, fn in (("eager", set_gradients), ("graph", tf.function(set_gradients))):
        grouped, exchanged, scattered = fn(w, x)
        soft(close, grouped, np.full(3, 3 * total / n), mode + " grouped allreduce gradient")
        soft(close, exchanged, rows_of_member, mode + " alltoall gradient in the set")
        soft(close, scattered, rows_of_member * n, mode + " reducescatter Sum gradient")


def model_for(seed, width=3):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(width, activation="tanh"),
                             keras.layers.Dense(1)])


def batch(r, step):
    g = np.random.default_rng(1000 * step + r)
    return (g.standard_normal((8, 4)).astype(np.float32),
            g.standard_normal((8, 1)).astype(np.float32))


def grads_of(model, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    return tape, loss


def reference(model, members, steps, lr):
    """One process: each step, SGD with the members' gradients averaged."""
    for step in range(steps):
        summed = None
        for r in members:
            tape, loss = grads_of(model, *batch(r, step))
            g = tape.gradient(loss, model.trainable_variables)
            summed = g if summed is None else [a + b for a, b in zip(summed, g)]
        for v, g in zip(model.trainable_variables, summed):
            v.assign_sub(lr * g / len(members))
    return model


def flat(model):
    return np.concatenate([v.numpy().reshape(-1) for v in model.trainable_variables])


def within_equal_between_differ(mine, weights, what):
    """Global check: equal to every member of this rank's set, different
    from every rank of the other set (their data differs)."""
    everyone = htf.allgather_object(weights, name="all." + what)
    for r, theirs in enumerate(everyone):
        if r in mine.ranks:
            expect(np.array_equal(theirs, weights), "%s: differs from set member %d" % (what, r))
        else:
            expect(theirs.shape != weights.shape or not np.allclose(theirs, weights, atol=1e-6),
                   "%s: equal to rank %d of the other set" % (what, r))


def check_two_sets_train_two_models(mine, other):
    """DistributedGradientTape(process_set=): evens and odds train two
    different models at once, each as one process averaging its members."""
    set_index, lr, steps = R % 2, 0.1, 4
    model = model_for(set_index, 3 + set_index)
    if mine.rank() != 0:  # different starts, made equal by the broadcast in the set
        for v in model.trainable_variables:
            v.assign_add(tf.ones_like(v))
    htf.broadcast_variables(model.variables, root_rank=mine.ranks[0], process_set=mine)
    opt = keras.optimizers.SGD(lr)
    for step in range(steps):
        tape, loss = grads_of(model, *batch(R, step))
        tape = htf.DistributedGradientTape(tape, process_set=mine)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables))
    ref = reference(model_for(set_index, 3 + set_index), mine.ranks, steps, lr)
    for v, want in zip(model.trainable_variables, ref.trainable_variables):
        soft(close, v.numpy(), want.numpy(), "set %d %s" % (set_index, v.path), tol=1e-5)
    within_equal_between_differ(mine, flat(model), "tape")


def check_optimizer_in_two_sets(mine, other):
    """DistributedOptimizer(process_set=) in a custom loop: the same model and
    start in both sets, so only the set's data makes them differ."""
    lr, steps = 0.1, 3
    model = model_for(7)
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(lr), process_set=mine)
    for step in range(steps):
        tape, loss = grads_of(model, *batch(R, step))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
    ref = reference(model_for(7), mine.ranks, steps, lr)
    soft(close, flat(model), flat(ref), "optimizer in the set", tol=1e-5)
    within_equal_between_differ(mine, flat(model), "optimizer")
    # Outside a set the tape leaves gradients local (as Horovod's).
    tape, loss = grads_of(model, *batch(R, 99))
    local = [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]
    tape, loss = grads_of(model, *batch(R, 99))
    outside = htf.DistributedGradientTape(tape, process_set=other).gradient(
        loss, model.trainable_variables)
    for a, b in zip(outside, local):
        soft(close, a, b, "gradients outside the set stay local", tol=0)


def check_keras_fit_in_a_set(mine, other):
    """DistributedOptimizer(process_set=) inside fit: the set's ranks agree."""
    model = model_for(0)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05),
                                                     process_set=mine), loss="mse")
    htf.broadcast_variables(model.variables, root_rank=mine.ranks[0], process_set=mine)
    x, y = batch(R, 0)
    model.fit(x, y, batch_size=4, epochs=2, verbose=0)
    within_equal_between_differ(mine, flat(model), "fit")


def check_misuse(mine, other):
    """process_set=object() raises on every rank, at every entry point; a
    non-member calling a collective on a set gets 'not a member'."""
    x = tf.ones([2, 2])
    v = tf.Variable(tf.ones([2]))
    bad = object()
    entry_points = {
        "allreduce": lambda: htf.allreduce(x, process_set=bad),
        "grouped_allreduce": lambda: htf.grouped_allreduce([x], process_set=bad),
        "allgather": lambda: htf.allgather(x, process_set=bad),
        "broadcast": lambda: htf.broadcast(x, 0, process_set=bad),
        "alltoall": lambda: htf.alltoall(x, process_set=bad),
        "reducescatter": lambda: htf.reducescatter(x, process_set=bad),
        "barrier": lambda: htf.barrier(process_set=bad),
        "broadcast_variables": lambda: htf.broadcast_variables([v], 0, process_set=bad),
        "broadcast_object": lambda: htf.broadcast_object(1, process_set=bad),
        "allgather_object": lambda: htf.allgather_object(1, process_set=bad),
        "DistributedGradientTape": lambda: htf.DistributedGradientTape(tf.GradientTape(),
                                                                       process_set=bad),
        "DistributedOptimizer": lambda: hvd.DistributedOptimizer(keras.optimizers.SGD(0.1),
                                                                 process_set=bad),
    }
    for what, fn in entry_points.items():
        try:
            harness.expect_error(hvd.InvalidArgumentError, fn, "ProcessSet")
        except AssertionError as e:
            _failures.append("%s(process_set=object()): %s" % (what, e))
    root = other.ranks[0]
    for what, fn in {
            "allreduce": lambda: htf.allreduce(x, name="nm.ar", process_set=other),
            "allgather": lambda: htf.allgather(x, name="nm.ag", process_set=other),
            "broadcast": lambda: htf.broadcast(x, root, name="nm.bc", process_set=other),
            "reducescatter": lambda: htf.reducescatter(x, name="nm.rs", process_set=other),
            "alltoall": lambda: htf.alltoall(x, name="nm.a2a", process_set=other)}.items():
        try:
            harness.expect_error(hvd.InvalidArgumentError, fn, "not a member")
        except AssertionError as e:
            _failures.append("non-member %s: %s" % (what, e))
    # Nothing was left half-done: the set and the global set still work.
    soft(close, htf.allreduce(tf.ones([1]), op=hvd.Sum, process_set=mine), [mine.size()], "after")
    soft(close, htf.allreduce(tf.ones([1]), op=hvd.Sum), [S], "global after")


def in_sets(*parts):
    """One harness check (tests/test_process_sets.py counts three) running
    parts in order with the sets added."""
    def check():
        del _failures[:]
        with sets() as (mine, other):
            for part in parts:
                part(mine, other)
        if _failures:
            raise AssertionError("\n".join(_failures))
    check.__name__ = "+".join(p.__name__ for p in parts)
    return check


CHECKS = [in_sets(check_collectives, check_gradients, check_misuse),
          in_sets(check_two_sets_train_two_models, check_optimizer_in_two_sets),
          in_sets(check_keras_fit_in_a_set)]

if __name__ == "__main__":
    hvd.init()
    R, S = hvd.rank(), hvd.size()
    assert S >= 2, "run at 2 ranks or more (evens and odds are both non-empty)"
    hvd.shutdown()
    harness.run(CHECKS)
