"""Uneven data: ranks run out at different steps and join; the others keep
training, with joined ranks contributing neutral values."""
import numpy as np

import fuseopt
import harness
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
        rows = fuseopt.allgather(np.full((2,), r, np.int32), name="rows")
        assert_close(rows, np.repeat(np.array(active, np.int32), 2), "allgather step %d" % step)
        root = active[-1]
        b = fuseopt.broadcast(np.full(3, r, np.int64), root, name="bcast")
        assert_close(b, np.full(3, root, np.int64), "broadcast step %d" % step)
    fuseopt.join()
    # Everyone has joined; the runtime is back to normal.
    out = fuseopt.allreduce(np.ones(4, np.float32), name="after.join", op=fuseopt.Sum)
    assert_close(out, np.full(4, n, np.float32), "after join")
    fuseopt.join()  # joining again with nothing in flight completes at once


if __name__ == "__main__":
    harness.run([check_uneven_steps_with_join])
