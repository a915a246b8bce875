"""Uneven data: ranks run out at different steps and join; the others keep
training, with joined ranks contributing neutral values to reductions, and
allgather and broadcast failing while a rank has joined (as Horovod's)."""
import numpy as np

import fuseopt
import rank_harness as harness
from data import assert_close, values


def steps_of(rank):
    return 3 + 2 * rank


def check_uneven_steps_with_join():
    r, n = fuseopt.rank(), fuseopt.size()
    for step in range(steps_of(r)):
        active = [k for k in range(n) if steps_of(k) > step]
        grads = {k: values(("g", step), k, (10,), np.float64) for k in active}
        avg = fuseopt.allreduce(grads[r], name="grad", op=fuseopt.Average)
        assert_close(avg, sum(grads.values()) / n, "average at step %d" % step)
        mx = fuseopt.allreduce(grads[r], name="grad.max", op=fuseopt.Max)
        assert_close(mx, np.max(np.stack(list(grads.values())), 0), "max at step %d" % step)
        gather = lambda: fuseopt.allgather(np.full((2,), r, np.int32), name="rows")  # noqa: E731
        root = active[-1]
        bcast = lambda: fuseopt.broadcast(np.full(3, r, np.int64), root, name="bcast")  # noqa
        if len(active) == n:
            assert_close(gather(), np.repeat(np.arange(n, dtype=np.int32), 2),
                         "allgather step %d" % step)
            assert_close(bcast(), np.full(3, root, np.int64), "broadcast step %d" % step)
        else:
            harness.expect_error(fuseopt.InvalidArgumentError, gather, "joined")
            harness.expect_error(fuseopt.InvalidArgumentError, bcast, "joined")
    # The last rank has the most steps, so it joins last: join() says so
    # on every rank, as Horovod's does.
    last = fuseopt.join()
    assert last == n - 1, "join() returned %r, expected the last rank to join, %d" % (last, n - 1)
    # Everyone has joined; the runtime is back to normal.
    out = fuseopt.allreduce(np.ones(4, np.float32), name="after.join", op=fuseopt.Sum)
    assert_close(out, np.full(4, n, np.float32), "after join")
    fuseopt.join()  # joining again with nothing in flight completes at once


def check_joined_rank_contributes_identity_even_with_prescale():
    r, n = fuseopt.rank(), fuseopt.size()
    if r == n - 1:
        last = fuseopt.join()  # the last rank has no data at all: it joins first
        assert n > 2 or last == 0, last
        return
    active = n - 1
    x = np.array([5, -7, 100], np.int32) * (r + 1)
    mn = fuseopt.allreduce(x, name="j.min", op=fuseopt.Min, prescale_factor=2.0)
    assert_close(mn, np.array([10, -14 * active, 200], np.int32), "min with prescale")
    p = fuseopt.allreduce(np.array([2.0, 3.0], np.float32), name="j.prod", op=fuseopt.Product,
                          prescale_factor=3.0)
    assert_close(p, np.array([6.0, 9.0], np.float32) ** active, "product with prescale")
    m = fuseopt.allreduce(np.array([2.0, 3.0], np.float32), name="j.max", op=fuseopt.Max,
                          prescale_factor=-1.0)
    assert_close(m, np.array([-2.0, -3.0], np.float32), "max with negative prescale")
    harness.expect_error(fuseopt.InvalidArgumentError,
                         lambda: fuseopt.alltoall(np.zeros(n, np.float32), name="j.a2a"),
                         "joined", "lost")
    # As Horovod (test_horovod_join_allgather / _broadcast): an error, not a
    # result that silently leaves the joined rank out.
    harness.expect_error(fuseopt.InvalidArgumentError,
                         lambda: fuseopt.allgather(np.zeros((1, 2), np.float32), name="j.ag"),
                         "allgather", "joined", "join")
    harness.expect_error(fuseopt.InvalidArgumentError,
                         lambda: fuseopt.broadcast(np.zeros(2, np.float32), 0, name="j.bc"),
                         "broadcast", "joined")
    fuseopt.join()


def check_join_waits_for_own_pending_and_mismatch_after_join():
    r, n = fuseopt.rank(), fuseopt.size()
    # Cache a name, then let rank 0 change its shape and join at once: its
    # request must still be compared with the others' (a mismatch), not be
    # served with someone else's shape.
    fuseopt.allreduce(np.ones(4, np.float32), name="j.w")
    if r == 0:
        h = fuseopt.allreduce_async(np.ones(4, np.float32), name="j.w")
        g = fuseopt.allgather_async(np.full(2, r, np.int64), name="j.g")
        fuseopt.join()
        harness.expect_error(fuseopt.MismatchError, h.wait, "j.w", "float32[4]", "float32[8]")
        assert_close(g.wait(), np.repeat(np.arange(n, dtype=np.int64), 2), "allgather before join")
    else:
        harness.expect_error(fuseopt.MismatchError,
                             lambda: fuseopt.allreduce(np.ones(8, np.float32), name="j.w"),
                             "j.w")
        out = fuseopt.allgather(np.full(2, r, np.int64), name="j.g")
        assert_close(out, np.repeat(np.arange(n, dtype=np.int64), 2), "allgather")
        fuseopt.join()


if __name__ == "__main__":
    harness.run([check_uneven_steps_with_join,
                 check_joined_rank_contributes_identity_even_with_prescale,
                 check_join_waits_for_own_pending_and_mismatch_after_join])
