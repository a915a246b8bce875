"""What Horovod's test_tensorflow.py promises of the plain module's
collectives, checked here (our own checks, values from first principles),
each eagerly and inside tf.function: every reduce op and the scale factors,
gradients of allreduce (Sum and Average), grouped_allreduce, allgather of
uneven rows and broadcast from every root; alltoall with uneven splits, an
empty tensor and an even split that does not divide; reducescatter's
Average, scale factors, uneven rows and a scalar; join and barrier. Run by
tests/test_tensorflow.py at 4 ranks."""
import math
import os
import tempfile
import time

import numpy as np
import tensorflow as tf

import rank_harness as harness
from tf_common import close

import fuseopt.tensorflow as htf


def modes(fn):
    return (("eager", fn), ("graph", tf.function(fn)))


def total(n):
    return n * (n + 1) / 2.0


def check_reduce_ops_and_scale_factors():
    r, n = htf.rank(), htf.size()
    b = np.array([1.0, 2.0])
    for dtype in (tf.int32, tf.float16, tf.float32):
        x = tf.cast(tf.constant(b * (r + 1)), dtype)

        def body(x):
            return (htf.allreduce(x, op=htf.Min), htf.allreduce(x, op=htf.Max),
                    htf.allreduce(x, op=htf.Product),
                    htf.allreduce(x, op=htf.Sum, prescale_factor=2.0, postscale_factor=0.5))

        for mode, fn in modes(body):
            low, high, product, scaled = fn(x)
            what = "%s %s" % (mode, dtype.name)
            assert low.dtype == dtype and product.dtype == dtype, what
            close(tf.cast(low, tf.float64), b, what + " Min")
            close(tf.cast(high, tf.float64), n * b, what + " Max")
            close(tf.cast(product, tf.float64), math.factorial(n) * b ** n, what + " Product")
            if dtype != tf.int32:  # scale factors are for floats
                close(tf.cast(scaled, tf.float64), total(n) * b, what + " scaled Sum", 1e-3)


def check_gradients_of_reductions():
    """d/dw sum(op(w) * (r+1)): the gradient of a Sum allreduce is the Sum
    of the upstream gradients, n(n+1)/2; of Average their average; the same
    per tensor of grouped_allreduce (tensor i weighted i+1)."""
    r, n = htf.rank(), htf.size()
    w = tf.Variable(tf.ones([3]))
    v = tf.Variable(tf.ones([2]))

    def gradients():
        with tf.GradientTape(persistent=True) as tape:
            s = tf.reduce_sum(htf.allreduce(w, op=htf.Sum, name="gr.sum") * (r + 1))
            a = tf.reduce_sum(htf.allreduce(w, name="gr.avg") * (r + 1))
            gs = htf.grouped_allreduce([w, v], op=htf.Sum, name="gr.gsum")
            ga = htf.grouped_allreduce([w, v], name="gr.gavg")
            gsl = sum(tf.reduce_sum(o * (r + 1) * (i + 1)) for i, o in enumerate(gs))
            gal = sum(tf.reduce_sum(o * (r + 1) * (i + 1)) for i, o in enumerate(ga))
        return (tape.gradient(s, w), tape.gradient(a, w), tape.gradient(gsl, [w, v]),
                tape.gradient(gal, [w, v]))

    for mode, fn in modes(gradients):
        s, a, gs, ga = fn()
        close(s, np.full(3, total(n)), mode + " allreduce Sum gradient")
        close(a, np.full(3, total(n) / n), mode + " allreduce Average gradient")
        for i, (g_sum, g_avg) in enumerate(zip(gs, ga)):
            close(g_sum, np.full(g_sum.shape, (i + 1) * total(n)), mode + " grouped Sum %d" % i)
            close(g_avg, np.full(g_avg.shape, (i + 1) * total(n) / n),
                  mode + " grouped Average %d" % i)


def check_gradients_of_allgather_and_broadcast():
    """Rank r gathers r+1 rows; with row j of the result weighted j, rank
    r's rows get their own weights back (averaged over ranks, who all see
    the same). Broadcast from each root: the root gets the average of the
    upstream gradients, (n+1)/2, every other rank zero."""
    r, n = htf.rank(), htf.size()
    rows = tf.Variable(tf.ones([r + 1, 2]))
    w = tf.Variable(tf.ones([2]))
    weights = tf.reshape(tf.range(total(n), dtype=tf.float32), [-1, 1])

    def gradients():
        with tf.GradientTape(persistent=True) as tape:
            gathered = tf.reduce_sum(htf.allgather(rows, name="gg.rows") * weights)
            casts = [tf.reduce_sum(htf.broadcast(w, root, name="gg.bc.%d" % root) * (r + 1))
                     for root in range(n)]
        return tape.gradient(gathered, rows), [tape.gradient(c, w) for c in casts]

    offset = r * (r + 1) / 2.0
    for mode, fn in modes(gradients):
        gathered, casts = fn()
        close(gathered, np.repeat(offset + np.arange(r + 1.0), 2).reshape(r + 1, 2),
              mode + " allgather gradient")
        for root, g in enumerate(casts):
            close(g, np.full(2, (n + 1) / 2.0 if r == root else 0.0),
                  "%s broadcast gradient, root %d" % (mode, root))


def check_alltoall_uneven_empty_and_refused():
    """Rank r sends (r+j) % 3 rows to rank j, each holding 100r + j: rank j
    receives them in rank order, with those counts as received splits."""
    r, n = htf.rank(), htf.size()
    sends = [(r + j) % 3 for j in range(n)]
    x = tf.constant(np.concatenate([np.full((c, 1), 100.0 * r + j) for j, c in enumerate(sends)]
                                   + [np.zeros((0, 1))]), tf.float32)
    expected = np.concatenate([np.full(((k + r) % 3, 1), 100.0 * k + r) for k in range(n)]
                              + [np.zeros((0, 1))])

    def body(x, splits):
        return htf.alltoall(x, splits=splits, name="a2a.uneven")

    for mode, fn in modes(body):
        got, received = fn(x, tf.constant(sends, tf.int32))
        close(got, expected, mode + " alltoall uneven rows")
        assert received.numpy().tolist() == [(k + r) % 3 for k in range(n)], (mode, received)
        empty, counts = fn(tf.zeros([0, 2]), tf.zeros([n], tf.int32))
        assert tuple(empty.shape) == (0, 2) and not counts.numpy().any(), (mode, empty.shape)
    harness.expect_error(htf.InvalidArgumentError,
                         lambda: htf.alltoall(tf.ones([n + 1, 1]), name="a2a.odd"), "split")


def check_reducescatter_average_scaling_uneven_and_scalar():
    r, n = htf.rank(), htf.size()

    def body(x, uneven):
        return (htf.reducescatter(x, name="rs.avg"),
                htf.reducescatter(x, op=htf.Sum, name="rs.scaled", prescale_factor=2.0,
                                  postscale_factor=3.0),
                htf.reducescatter(uneven, op=htf.Sum, name="rs.uneven"))

    for mode, fn in modes(body):
        avg, scaled, uneven = fn(tf.ones([2 * n, 2]) * (r + 1), tf.ones([2 * n + 1, 1]) * (r + 1))
        close(avg, np.full((2, 2), (n + 1) / 2.0), mode + " reducescatter Average")
        close(scaled, np.full((2, 2), 6.0 * total(n)), mode + " reducescatter scaled Sum")
        # Rows that do not divide evenly: the first (rows % n) ranks get one more.
        close(uneven, np.full((3 if r == 0 else 2, 1), total(n)), mode + " uneven rows")
    harness.expect_error(htf.InvalidArgumentError,
                         lambda: htf.reducescatter(tf.constant(1.0), name="rs.scalar"),
                         "dimension")


def check_join_eager_and_traced():
    """Rank 0 joins at once; the others' Sum allreduce counts it as zeros.
    join() returns the same rank everywhere: the last one to join."""
    r, n = htf.rank(), htf.size()
    traced_join = tf.function(lambda: htf.join())
    for mode, join in (("eager", htf.join), ("graph", traced_join)):
        if r == 0:
            last = join()
        else:
            out = htf.allreduce(tf.fill([2], r + 1.0), op=htf.Sum, name="join.%s" % mode)
            close(out, np.full(2, total(n) - 1.0), mode + " allreduce beside a joined rank")
            last = join()
        seen = htf.allgather_object(int(last), name="join.seen.%s" % mode)
        assert len(set(seen)) == 1 and 0 <= seen[0] < n, (mode, seen)
        if n > 1:
            assert seen[0] != 0, (mode, seen)  # rank 0 joined first


def check_barrier_in_tf_function():
    """A traced barrier returns only once every rank has reached it: files
    each rank writes before it are all there after it."""
    r, n = htf.rank(), htf.size()
    where = htf.broadcast_object(tempfile.mkdtemp(prefix="fuseopt-barrier-") if r == 0 else None,
                                 0, name="barrier.dir")

    @tf.function
    def wait():
        return htf.barrier()

    for round_ in range(3):
        if r == n - 1:
            # The last rank comes late: a barrier that did not wait would let
            # the others look before its file exists.
            time.sleep(0.3)
        open(os.path.join(where, "%d.%d" % (round_, r)), "w").close()
        wait()
        present = [os.path.exists(os.path.join(where, "%d.%d" % (round_, k))) for k in range(n)]
        assert all(present), (round_, present)
    htf.barrier()
    if r == 0:
        for name in os.listdir(where):
            os.remove(os.path.join(where, name))
        os.rmdir(where)


if __name__ == "__main__":
    harness.run([check_reduce_ops_and_scale_factors, check_gradients_of_reductions,
                 check_gradients_of_allgather_and_broadcast,
                 check_alltoall_uneven_empty_and_refused,
                 check_reducescatter_average_scaling_uneven_and_scalar,
                 check_join_eager_and_traced, check_barrier_in_tf_function])
