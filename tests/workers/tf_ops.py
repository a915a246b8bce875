"""fuseopt.tensorflow ops, eager and in tf.function, gradients, XLA error."""
import numpy as np
import tensorflow as tf

import rank_harness as harness
from tf_common import close, hvd


def check_ops_eager_and_graph():
    r, n = hvd.rank(), hvd.size()
    x = tf.constant([[1.0, 2.0]]) * (r + 1)
    total = sum(k + 1 for k in range(n))

    def body(x):
        return (hvd.allreduce(x, op=hvd.Sum), hvd.allreduce(x), hvd.grouped_allreduce([x, 2 * x], op=hvd.Sum),
                hvd.allgather(x), hvd.broadcast(x, n - 1), hvd.reducescatter(tf.ones([2 * n, 2]) * (r + 1), op=hvd.Sum),
                hvd.alltoall(tf.reshape(tf.range(2 * n, dtype=tf.float32), [2 * n, 1]) + 100.0 * r))

    for mode, fn in (("eager", body), ("graph", tf.function(body))):
        s, avg, grp, gat, bc, rs, a2a = fn(x)  # no splits given: a tensor, as Horovod
        close(s, [[total, 2 * total]], mode + " sum")
        close(avg, [[total / n, 2 * total / n]], mode + " average")
        close(grp[1], [[2 * total, 4 * total]], mode + " grouped")
        close(gat, np.array([[k + 1, 2 * (k + 1)] for k in range(n)]), mode + " allgather")
        close(bc, [[n, 2 * n]], mode + " broadcast")
        close(rs, np.full((2, 2), total), mode + " reducescatter")
        expected = np.concatenate([np.arange(2 * r, 2 * r + 2) + 100.0 * k for k in range(n)])
        close(a2a[:, 0], expected, mode + " alltoall")
        same, splits = hvd.alltoall(tf.reshape(tf.range(2 * n, dtype=tf.float32), [2 * n, 1])
                                    + 100.0 * r, splits=[2] * n)
        close(same, a2a, mode + " alltoall with splits")
        assert splits.numpy().tolist() == [2] * n
    for dtype in (tf.float16, tf.bfloat16, tf.int32, tf.int64, tf.uint8, tf.float64, tf.int16,
                  tf.uint16):
        v = tf.cast(tf.fill([3], r + 1), dtype)
        close(tf.cast(hvd.allreduce(v, op=hvd.Sum), tf.float64), np.full(3, total), str(dtype))
    assert hvd.broadcast_object({"r": r}, root_rank=n - 1) == {"r": n - 1}
    assert hvd.allgather_object(r) == list(range(n))
    hvd.barrier()


def check_gradients_through_collectives():
    r, n = hvd.rank(), hvd.size()
    w = tf.Variable(tf.ones([3]) * (r + 1))
    with tf.GradientTape(persistent=True) as tape:
        a = tf.reduce_sum(hvd.allreduce(w, name="g.ar") * (r + 1))
        g = hvd.allgather(tf.reshape(w, [1, 3]), name="g.ag")
        b = tf.reduce_sum(g * tf.reshape(tf.range(n, dtype=tf.float32), [n, 1]))
        c = tf.reduce_sum(hvd.broadcast(w, 0, name="g.bc") * (r + 1))
    close(tape.gradient(a, w), np.full(3, total_of(n) / n), "allreduce grad")
    # Horovod's definitions: averaged over ranks (then my rows / the root only).
    close(tape.gradient(b, w), np.full(3, float(r)), "allgather grad")
    close(tape.gradient(c, w), np.full(3, total_of(n) / n if r == 0 else 0.0), "broadcast grad")


def check_broadcast_gradient_in_a_tf1_graph():
    # Off the root the gradient is zero, but it must still take part in the
    # allreduce: in a TF1 graph, zeros that do not depend on it let the
    # session prune it on those ranks, and the root waited forever.
    import fuseopt.tensorflow as htf
    r, n = hvd.rank(), hvd.size()
    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant([1.0, 2.0]) * (r + 1)
        y = htf.broadcast(x, 0, name="tf1.bc")
        (grad,) = tf.gradients(tf.reduce_sum(y * (r + 1)), [x])
    with tf.compat.v1.Session(graph=graph) as session:
        value = session.run(grad)
    close(value, np.full(2, total_of(n) / n if r == 0 else 0.0), "TF1 broadcast grad")
    # broadcast_ in a TF1 graph: the values it returns are read after the
    # assignment (they were read before it, so off the root they were the
    # rank's own), and the variables hold the root's values.
    graph = tf.Graph()
    with graph.as_default():
        v = tf.compat.v1.Variable(tf.fill([3], float(r)), use_resource=True)
        w = tf.compat.v1.Variable(tf.fill([2], r % 2 == 1), use_resource=False)  # bool_ref
        got = htf.broadcast_([v, w], n - 1)
        init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(init)
        values = session.run(got)
        held = session.run([v, w])
    for what, out in (("returned", values), ("held", held)):
        close(out[0], np.full(3, float(n - 1)), "TF1 broadcast_ %s" % what)
        assert out[1].tolist() == [(n - 1) % 2 == 1] * 2, (what, out[1])
    # broadcast_global_variables works in a TF1 graph, as Horovod's.
    graph = tf.Graph()
    with graph.as_default():
        g = tf.compat.v1.Variable(tf.fill([2], float(r)))
        op = htf.broadcast_global_variables(n - 1)
        init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(init)
        session.run(op)
        close(session.run(g), np.full(2, float(n - 1)), "TF1 broadcast_global_variables")


def check_alltoall_and_reducescatter_gradients():
    # Horovod registers gradients for both: alltoall's rows go back where
    # they came from; reducescatter's is the allgathered output gradient,
    # times the ranks for Sum and times the scale factors.
    import fuseopt.tensorflow as htf
    r, n = hvd.rank(), hvd.size()
    x = tf.Variable(tf.ones([2 * n, 1]))
    rows_of_rank = np.repeat(np.arange(n) + 1.0, 2).reshape(2 * n, 1)  # row i went to rank i // 2

    def losses(x):
        sent = tf.reduce_sum(htf.alltoall(x, name="g.a2a") * (r + 1))
        got, _ = htf.alltoall(x, splits=[2] * n, name="g.a2a.splits")
        summed = tf.reduce_sum(htf.reducescatter(x, op=htf.Sum, name="g.rs.sum") * (r + 1))
        scaled = tf.reduce_sum(htf.reducescatter(x, name="g.rs.avg", prescale_factor=3.0,
                                                 postscale_factor=0.5) * (r + 1))
        return sent, tf.reduce_sum(got * (r + 1)), summed, scaled

    def gradients(x):
        with tf.GradientTape(persistent=True) as tape:
            out = losses(x)
        return [tape.gradient(loss, x) for loss in out]

    for mode, fn in (("eager", gradients), ("graph", tf.function(gradients))):
        sent, split, summed, scaled = fn(x)
        close(sent, rows_of_rank, mode + " alltoall grad")
        close(split, rows_of_rank, mode + " alltoall grad (splits given)")
        close(summed, rows_of_rank * n, mode + " reducescatter Sum grad")
        close(scaled, rows_of_rank * 1.5, mode + " reducescatter Average grad, scaled")
    # The forward with scale factors and a 16-bit compressor, in Horovod's order.
    half = htf.reducescatter(tf.ones([2 * n, 2]) * (r + 1), "", htf.Compression.fp16, htf.Sum,
                             "rs.fp16", postscale_factor=2.0)
    assert half.dtype == tf.float32
    close(half, np.full((2, 2), 2.0 * total_of(n)), "reducescatter fp16, postscale 2")


def check_grouped_rows_in_place_broadcast_and_value_ops():
    # horovod.tensorflow's grouped_allgather / grouped_reducescatter,
    # broadcast_, broadcast_global_variables and the *_op value ops.
    import fuseopt
    import fuseopt.tensorflow as htf
    r, n = hvd.rank(), hvd.size()
    total = total_of(n)

    def rows(a, b):  # a's rows differ per rank
        ga, gb = htf.grouped_allgather([a, b], name="gg")
        s1, s2 = htf.grouped_reducescatter([tf.ones([2 * n, 2]) * (r + 1),
                                            tf.ones([n, 3], tf.float64) * (r + 1)], op=htf.Sum)
        (h,) = htf.grouped_reducescatter([tf.ones([n, 2]) * (r + 1)],
                                         compression=htf.Compression.fp16)
        return ga, gb, s1, s2, h

    for mode, fn in (("eager", rows), ("graph", tf.function(rows))):
        ga, gb, s1, s2, h = fn(tf.ones([r + 1, 2]) * (r + 1), tf.fill([1, 3], tf.cast(r, tf.int64)))
        close(ga, np.concatenate([np.full((k + 1, 2), k + 1.0) for k in range(n)]),
              mode + " grouped allgather")
        assert gb.dtype == tf.int64 and gb.numpy().tolist() == [[k] * 3 for k in range(n)], gb
        close(s1, np.full((2, 2), total), mode + " grouped reducescatter Sum")
        assert s2.dtype == tf.float64
        close(s2, np.full((1, 3), total), mode + " grouped reducescatter, second tensor")
        assert h.dtype == tf.float32
        close(h, np.full((1, 2), total / n), mode + " grouped reducescatter Average, fp16")
        # Booleans among the tensors travel as bytes, as in allgather.
        flags, numbers = (tf.function(htf.grouped_allgather) if mode == "graph" else
                          htf.grouped_allgather)([tf.fill([1, 2], r % 2 == 1), tf.ones([1])],
                                                 name="gg.bool")
        assert flags.dtype == tf.bool and flags.numpy().tolist() == [[k % 2 == 1] * 2
                                                                     for k in range(n)], flags

    x = tf.Variable(tf.ones([r + 1, 2]))
    y = tf.Variable(tf.ones([2 * n, 1]))
    with tf.GradientTape(persistent=True) as tape:
        (g,) = htf.grouped_allgather([x], name="gg.grad")
        weights = tf.reshape(tf.range(tf.shape(g)[0], dtype=tf.float32), [-1, 1])
        gathered = tf.reduce_sum(g * weights)
        (s,) = htf.grouped_reducescatter([y], op=htf.Sum)
        scattered = tf.reduce_sum(s * (r + 1))
    # d/dg is the row index on every rank; averaged, then this rank's rows.
    offset = sum(k + 1 for k in range(r))
    close(tape.gradient(gathered, x),
          np.repeat(np.arange(offset, offset + r + 1, dtype=np.float32).reshape(-1, 1), 2, 1),
          "grouped allgather grad")
    close(tape.gradient(scattered, y), np.repeat(np.arange(n) + 1.0, 2).reshape(2 * n, 1) * n,
          "grouped reducescatter Sum grad")

    # Booleans through allgather and broadcast; int32 splits for alltoall.
    def booleans(flags):
        return htf.allgather(flags, name="b.ag"), htf.broadcast(flags, n - 1, name="b.bc")

    for mode, fn in (("eager", booleans), ("graph", tf.function(booleans))):
        gathered, sent = fn(tf.constant([r % 2 == 0, True]))
        assert gathered.dtype == tf.bool and sent.dtype == tf.bool, (gathered, sent)
        assert gathered.numpy().tolist() == [v for k in range(n) for v in (k % 2 == 0, True)]
        assert sent.numpy().tolist() == [(n - 1) % 2 == 0, True], (mode, sent)
    got, recv = htf.alltoall(tf.reshape(tf.range(n, dtype=tf.float32), [n, 1]),
                             splits=tf.ones([n], tf.int32), name="a2a.int32")
    close(got[:, 0], np.full(n, float(r)), "alltoall with int32 splits")
    assert recv.numpy().tolist() == [1] * n

    v = tf.Variable([float(r), float(r)])
    w = tf.Variable([[r + 1]], dtype=tf.int32)
    out = htf.broadcast_([v, w], root_rank=n - 1)
    close(v, np.full(2, n - 1.0), "broadcast_ assigns")
    assert w.numpy().tolist() == [[n]] and out[1].numpy().tolist() == [[n]], (w, out)
    named = htf.broadcast_([tf.Variable([float(r)])], 0, name="bcast_")
    close(named[0], [0.0], "broadcast_ with a name")
    htf.broadcast_variables([v], 0, inplace=True)
    close(v, np.full(2, n - 1.0), "broadcast_variables inplace")
    harness.expect_error(RuntimeError, lambda: htf.broadcast_global_variables(0),
                         "broadcast_variables")

    def values():
        return (htf.rank_op(), htf.size_op(), htf.local_rank_op(), htf.local_size_op(),
                htf.process_set_included_op(0), htf.process_set_included_op(12345))

    expected = [r, n, fuseopt.local_rank(), fuseopt.local_size(), 1, -3]
    for mode, fn in (("eager", values), ("graph", tf.function(values))):
        got = [int(t.numpy()) for t in fn()]
        assert got == expected, (mode, got, expected)


def check_keras_module_signatures():
    """horovod.tensorflow.keras's own argument orders and refusals."""
    r, n = hvd.rank(), hvd.size()
    # allreduce(value, name, average): average=False is a sum, name positional.
    close(hvd.allreduce(np.full(2, r + 1.0, np.float32), "k.sum", False), np.full(2, total_of(n)),
          "keras allreduce positional")
    close(hvd.reducescatter(np.ones((n, 2), np.float32), "k.rs", hvd.Sum), np.full((1, 2), n),
          "keras reducescatter")
    harness.expect_error(RuntimeError, lambda: hvd.broadcast_global_variables(0),
                         "broadcast_variables")
    import fuseopt.tensorflow as tf_hvd  # horovod.tensorflow's names take process_set=
    harness.expect_error(hvd.InvalidArgumentError,
                         lambda: tf_hvd.allreduce(np.ones(2), process_set=object()), "ProcessSet")
    assert hvd.mpi_built() and not hvd.gloo_built() and not hvd.mpi_threads_supported()
    assert hvd.nccl_built() == 0 and hvd.is_homogeneous()
    if n > 1:
        # A set that was never added is an error, not the global set.
        harness.expect_error(hvd.InvalidArgumentError,
                             lambda: tf_hvd.allgather(np.ones((1, 2)),
                                                      process_set=hvd.ProcessSet([1])),
                             "has not been added")


def total_of(n):
    return sum(k + 1 for k in range(n))


def check_abandoned_bucket_is_finished_by_the_next_start():
    # A graph execution that stops between a gradient bucket's start op and
    # the wait (here: a session fetching only the start) leaves the bucket in
    # flight; the next start of that op must finish it rather than fail with
    # "already in flight".
    from fuseopt.tensorflow import ops
    n = hvd.size()
    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant(np.full(3, hvd.rank() + 1.0, np.float32))
        reduced = ops._started_allreduce([x], ["abandon.x"], ops.Sum, 1.0, 1.0, 0, None)
        # the start's PyFunc, then the status kernel that passes its token on
        start = [o for o in graph.get_operations() if o.name.startswith("fuseopt_allreduce_start")]
    assert [o.type for o in start] == ["PyFunc", "FuseoptCheckStatus"], start
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(start[-1].outputs[0])  # abandoned: never waited
        for _ in range(2):
            out = session.run(reduced)[0]
            close(out, np.full(3, n * (n + 1) / 2.0), "allreduce after an abandoned start")


def check_explicit_groups_are_reduced_as_units():
    """Horovod's groups=/num_groups= on the Keras optimizer and the tape: each
    group is one allreduce call (one fused unit), the rest go together, and
    the update is the same as without groups."""
    import keras
    from fuseopt.tensorflow import ops
    calls = []
    real = ops.allreduce_named

    def recording(tensors, names, *args, **kwargs):
        calls.append(len(tensors))
        return real(tensors, names, *args, **kwargs)

    def train(**group_args):
        keras.utils.set_random_seed(5)
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2)])
        k1, b1, k2, b2 = model.trainable_variables
        if group_args.get("groups") == "lists":
            group_args["groups"] = [[k2, k1]]
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), **group_args)
        x = tf.ones([2, 3]) * (hvd.rank() + 1)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x) ** 2)
        del calls[:]
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables))
        return [v.numpy() for v in model.trainable_variables], list(calls)

    ops.allreduce_named = recording
    try:
        plain, plain_calls = train()
        lists, list_calls = train(groups="lists")
        split, split_calls = train(groups=3)
        older, older_calls = train(num_groups=2)
    finally:
        ops.allreduce_named = real
    assert plain_calls == [4], plain_calls
    assert list_calls == [2, 2], list_calls     # the ungrouped biases, then the group
    assert split_calls == [2, 1, 1], split_calls
    assert older_calls == [2, 2], older_calls
    for got in (lists, split, older):
        for a, b in zip(got, plain):
            close(a, b, "grouped update equals the ungrouped one")
    harness.expect_error(hvd.InvalidArgumentError,
                         lambda: hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), groups=0),
                         "positive integer")


def check_fp16_compressor_dtypes():
    # Horovod's compress(t) -> (tensor, ctx): every floating dtype travels as
    # float16 and comes back as itself; other dtypes pass untouched.
    import fuseopt.tensorflow as htf
    for dtype in (tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.uint8, tf.int8, tf.uint16,
                  tf.int16, tf.int32, tf.int64, tf.bool):
        sent, ctx = htf.Compression.fp16.compress(tf.ones([5], dtype=dtype))
        assert sent.dtype == (tf.float16 if dtype.is_floating else dtype), (dtype, sent.dtype)
        back = htf.Compression.fp16.decompress(sent, ctx)
        assert back.dtype == dtype, (dtype, back.dtype)
        close(tf.cast(back, tf.float64), np.ones(5), "fp16 round trip of %s" % dtype.name)


def check_errors():
    harness.expect_error(hvd.InvalidArgumentError,
                         lambda: hvd.allreduce(tf.constant([True, False])), "bool")
    # As Horovod's TensorFlow ops: tf.errors classes, which are fuseopt's too.
    import fuseopt.tensorflow as htf
    r, n = hvd.rank(), hvd.size()
    bad = harness.expect_error(tf.errors.InvalidArgumentError,
                               lambda: htf.allreduce(tf.constant([True])), "bool")
    assert isinstance(bad, htf.InvalidArgumentError), type(bad).__mro__
    if n > 1:
        for fn, word in ((lambda: htf.allreduce(tf.ones([r + 1]), name="e.shape"), "shape"),
                         (lambda: htf.broadcast(tf.ones([1]), root_rank=r, name="e.root"),
                          "root"),
                         (lambda: htf.grouped_allgather(
                             [tf.ones([1, 1 + r])], name="e.gshape"), "shape")):
            e = harness.expect_error(tf.errors.FailedPreconditionError, fn)
            assert isinstance(e, htf.MismatchError) and word in str(e), (type(e).__mro__, e)
        # Inside a traced graph and a TF1 session the same classes come from
        # fuseopt's compiled status kernel (tf.numpy_function alone would make
        # each an UnknownError), with fuseopt's class and message.
        @tf.function
        def gathered(x):
            return htf.allgather(x, name="e.graph")

        e = harness.expect_error(tf.errors.FailedPreconditionError,
                                 lambda: gathered(tf.ones([1, r + 1])), "MismatchError",
                                 "ranks disagree")
        assert "e.graph" in e.message, e.message
        close(gathered(tf.ones([1, 2])), np.ones([n, 2]), "the traced op runs after its error")
        with tf.Graph().as_default():
            y = htf.broadcast(tf.ones([1]), root_rank=r, name="e.tf1")
            with tf.compat.v1.Session() as session:
                harness.expect_error(tf.errors.FailedPreconditionError,
                                     lambda: session.run(y), "MismatchError", "root=")

    @tf.function
    def exchanged(x, splits):
        return htf.alltoall(x, splits=splits)[0]

    harness.expect_error(tf.errors.InvalidArgumentError,
                         lambda: exchanged(tf.ones([3]), tf.constant([5] * n, tf.int32)),
                         "InvalidArgumentError", "splits")
    # Allgathered sparse rows can only be summed or averaged, unscaled (as
    # Horovod): the rest is refused, not silently summed.
    rows = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([0]), tf.constant([3, 2]))
    for op, word in ((htf.Min, "Min"), (htf.Max, "Max"), (htf.Product, "Product"),
                     (htf.Adasum, "Adasum")):
        harness.expect_error(htf.UnsupportedError, lambda: htf.allreduce(rows, op=op), word,
                             "sparse_as_dense")
    harness.expect_error(htf.UnsupportedError,
                         lambda: htf.allreduce(rows, prescale_factor=2.0), "prescale_factor")
    harness.expect_error(NotImplementedError, lambda: htf.allreduce(rows, op=htf.Min), "Min")
    # As Horovod's tape and both optimizers: a predivide factor needs Average.
    harness.expect_error(htf.InvalidArgumentError,
                         lambda: htf.DistributedGradientTape(tf.GradientTape(), op=htf.Sum,
                                                             gradient_predivide_factor=2.0),
                         "gradient_predivide_factor")

    @tf.function(jit_compile=True)
    def xla(x):
        return hvd.allreduce(x)

    try:
        xla(tf.ones([2]))
    except Exception as e:  # TF wraps it in a StagingError during tracing
        assert "jit_compile" in str(e) and "XLA" in str(e), str(e)
    else:
        raise AssertionError("jit_compile=True did not raise")


CHECKS = [check_keras_module_signatures, check_ops_eager_and_graph,
          check_grouped_rows_in_place_broadcast_and_value_ops,
          check_broadcast_gradient_in_a_tf1_graph,
          check_gradients_through_collectives, check_alltoall_and_reducescatter_gradients,
          check_abandoned_bucket_is_finished_by_the_next_start,
          check_explicit_groups_are_reduced_as_units, check_fp16_compressor_dtypes,
          check_errors]

if __name__ == "__main__":
    harness.run(CHECKS)
