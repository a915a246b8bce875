"""Negotiation: ordering, the response cache, and cross-rank mismatches."""
import time

import numpy as np

import fuseopt
import rank_harness as harness
from data import assert_close, reduce_expected, values


def check_500_tensors_in_a_different_order_per_rank():
    r, n = fuseopt.rank(), fuseopt.size()
    names = ["order.%d" % i for i in range(500)]
    order = np.random.default_rng(r).permutation(len(names))
    handles = {}
    for i in order:
        handles[i] = fuseopt.allreduce_async(values(names[i], r, (i % 7 + 1,), np.float32),
                                             name=names[i], op=fuseopt.Sum)
    for i in range(len(names)):
        expected = reduce_expected([values(names[i], k, (i % 7 + 1,), np.float32)
                                    for k in range(n)], "sum")
        assert_close(handles[i].wait(), expected, names[i])


def _mismatch(name, fn_for_rank, *contains):
    """Every rank runs its variant; every rank must get the same clear error."""
    e = harness.expect_error(fuseopt.MismatchError, fn_for_rank, name, *contains)
    return str(e)


def check_mismatched_shape_dtype_op_root_kind():
    r, n = fuseopt.rank(), fuseopt.size()
    if n == 1:
        return
    others = ("rank " if n == 2 else "ranks ") + ", ".join(map(str, range(1, n)))
    shape = (3,) if r == 0 else (4,)
    _mismatch("mm.shape", lambda: fuseopt.allreduce(np.ones(shape, np.float32), name="mm.shape"),
              "rank 0 has allreduce float32[3]", others + " ha", "float32[4]")
    dtype = np.float32 if r == 0 else np.float64
    _mismatch("mm.dtype", lambda: fuseopt.allreduce(np.ones(3, dtype), name="mm.dtype"),
              "float32", "float64")
    op = fuseopt.Sum if r == 0 else fuseopt.Max
    _mismatch("mm.op", lambda: fuseopt.allreduce(np.ones(3, np.float32), name="mm.op", op=op),
              "op=sum", "op=max")
    root = 0 if r == 0 else 1
    _mismatch("mm.root", lambda: fuseopt.broadcast(np.ones(3, np.float32), root, name="mm.root"),
              "root=0", "root=1")
    if r == 0:
        fn = lambda: fuseopt.allreduce(np.ones(3, np.float32), name="mm.kind")  # noqa: E731
    else:
        fn = lambda: fuseopt.allgather(np.ones(3, np.float32), name="mm.kind")  # noqa: E731
    _mismatch("mm.kind", fn, "allreduce", "allgather")
    inner = (2, 3) if r == 0 else (2, 4)
    _mismatch("mm.inner", lambda: fuseopt.allgather(np.ones(inner, np.int32), name="mm.inner"),
              "[2,3]", "[2,4]")
    # A failed handle keeps its error: the second wait raises it again (an
    # in-place handle, whose wait is a single native call when all goes well).
    h = fuseopt.allreduce_async_(np.ones(shape, np.float32), name="mm.twice")
    first = harness.expect_error(fuseopt.MismatchError, h.wait, "float32[3]", "float32[4]")
    again = harness.expect_error(fuseopt.MismatchError, h.wait, "float32[3]", "float32[4]")
    assert str(again) == str(first), (first, again)
    # The runtime stays usable afterwards.
    out = fuseopt.allreduce(np.full(2, r, np.float32), name="after.mismatch", op=fuseopt.Sum)
    assert_close(out, np.full(2, n * (n - 1) / 2, np.float32), "after mismatch")


def check_cache_renegotiates_changed_shapes():
    r, n = fuseopt.rank(), fuseopt.size()
    for step, size in enumerate([3, 3, 5, 5, 3]):
        x = np.full(size, r + step, np.float32)
        out = fuseopt.allreduce(x, name="reshaped", op=fuseopt.Sum)
        assert_close(out, np.full(size, sum(k + step for k in range(n)), np.float32),
                     "reshaped step %d" % step)
    if n > 1:
        # Cached on every rank, then one rank changes shape: the cached bit
        # must not be trusted, and every rank must hear about the mismatch.
        fuseopt.allreduce(np.ones(3, np.float32), name="cached.then.bad")
        shape = (3,) if r == 0 else (6,)
        _mismatch("cached.then.bad",
                  lambda: fuseopt.allreduce(np.ones(shape, np.float32), name="cached.then.bad"),
                  "float32[3]", "float32[6]")


def check_local_argument_errors():
    n = fuseopt.size()
    x = np.ones(4, np.float32)
    harness.expect_error(fuseopt.InvalidArgumentError,
                         lambda: fuseopt.broadcast(x, n, name="bad.root"), "root %d" % n)
    harness.expect_error(fuseopt.InvalidArgumentError,
                         lambda: fuseopt.broadcast(x, -1, name="bad.root"), "root -1")
    harness.expect_error(fuseopt.InvalidArgumentError,
                         lambda: fuseopt.allreduce(np.ones(3, bool), name="bad.dtype"),
                         "bool", "float32")
    harness.expect_error(fuseopt.InvalidArgumentError,
                         lambda: fuseopt.allreduce(np.ones(3, np.complex64), name="bad.dtype"),
                         "complex64")
    harness.expect_error(fuseopt.InvalidArgumentError,
                         lambda: fuseopt.alltoall(np.ones(4, np.float32), splits=[1] * (n + 1),
                                                  name="bad.splits"), "splits")
    harness.expect_error(fuseopt.InvalidArgumentError,
                         lambda: fuseopt.alltoall(np.ones(n, np.float32), splits=[n + 1] + [0] * (n - 1),
                                                  name="bad.splits"), "add up")
    view = np.ones((4, 4), np.float32)[:, 1]
    harness.expect_error(fuseopt.InvalidArgumentError,
                         lambda: fuseopt.allreduce_(view, name="bad.view"), "contiguous")
    ro = np.ones(4, np.float32)
    ro.flags.writeable = False
    harness.expect_error(fuseopt.InvalidArgumentError,
                         lambda: fuseopt.allreduce_(ro, name="bad.ro"), "read-only")
    # Non-contiguous input is fine out of place.
    out = fuseopt.allreduce(view, name="view.ok", op=fuseopt.Sum)
    assert_close(out, np.full(4, n, np.float32), "non-contiguous input")
    # The other byte order: '>f4' is named float32 too, and its bytes read as
    # native floats would be other numbers (1.5 reads as 4.6e-41). In place it
    # is refused, on either call path; out of place it is converted.
    swapped = np.array([1.5, -2.25, 3.0], dtype=np.dtype(np.float32).newbyteorder())
    for call in (fuseopt.allreduce_, lambda a, name: fuseopt.allreduce_async_(a, name=name).wait()):
        harness.expect_error(fuseopt.InvalidArgumentError, lambda: call(swapped, name="bad.order"),
                             "byte order")
    out = fuseopt.allreduce(swapped, name="order.ok", op=fuseopt.Sum)
    assert out.dtype.isnative, out.dtype
    assert_close(out, np.array([1.5, -2.25, 3.0], np.float32) * n, "other byte order")
    gathered = fuseopt.allgather(swapped, name="order.gathered")
    assert_close(gathered, np.tile(np.array([1.5, -2.25, 3.0], np.float32), n),
                 "other byte order, gathered")


def check_name_reuse_wait_timeout_and_poll():
    r, n = fuseopt.rank(), fuseopt.size()
    if n == 1:
        return
    # Rank 0 submits first; the others only after a pause.
    if r != 0:
        time.sleep(0.5)
    h = fuseopt.allreduce_async(np.ones(3, np.float32), name="late", op=fuseopt.Sum)
    if r == 0:
        harness.expect_error(fuseopt.InvalidArgumentError,
                             lambda: fuseopt.allreduce_async(np.ones(3, np.float32), name="late"),
                             "already in flight")
        assert not h.poll()
        harness.expect_error(fuseopt.TimeoutError, lambda: h.wait(timeout=0.1), "not complete")
    assert_close(h.wait(), np.full(3, n, np.float32), "late")
    assert h.poll()
    assert fuseopt.pending_handles() == 0, fuseopt.pending_handles()


def check_grouped_submission_is_all_or_nothing():
    r, n = fuseopt.rank(), fuseopt.size()
    arrays = [np.full(k + 1, r + k, np.float32) for k in range(40)]
    names = ["grp.%d" % k for k in range(40)]
    out = fuseopt.grouped_allreduce(arrays, names, op=fuseopt.Sum)
    for k, o in enumerate(out):
        assert_close(o, np.full(k + 1, sum(q + k for q in range(n)), np.float32), names[k])
    fuseopt.grouped_allreduce_(arrays, names, op=fuseopt.Sum)  # in place, same names: cached
    for k, a in enumerate(arrays):
        assert_close(a, np.full(k + 1, sum(q + k for q in range(n)), np.float32), "in place")
    # One bad member (a name repeated inside the group) refuses the whole
    # call: nothing is queued, so nothing can be left half-negotiated.
    before = fuseopt.pending_handles()
    harness.expect_error(fuseopt.InvalidArgumentError,
                         lambda: fuseopt.grouped_allreduce_async(
                             [np.ones(2, np.float32)] * 3, ["grp.a", "grp.b", "grp.a"]),
                         "grp.a", "already in flight")
    assert fuseopt.pending_handles() == before, fuseopt.pending_handles()
    # Unnamed members take the next automatic names only when accepted, so
    # ranks stay matched even if one of them had a refused group (rank 0 here).
    if r == 0:
        harness.expect_error(fuseopt.InvalidArgumentError,
                             lambda: fuseopt.grouped_allreduce_async(
                                 [np.ones(2, np.float32), np.ones(2, np.complex64)]),
                             "complex64")
    out = fuseopt.grouped_allreduce([np.full(2, r, np.float32), np.full(3, 1, np.int32)],
                                    op=fuseopt.Sum)
    assert_close(out[0], np.full(2, n * (n - 1) / 2, np.float32), "unnamed group 0")
    assert_close(out[1], np.full(3, n, np.int32), "unnamed group 1")


if __name__ == "__main__":
    harness.run([check_500_tensors_in_a_different_order_per_rank,
                 check_mismatched_shape_dtype_op_root_kind,
                 check_cache_renegotiates_changed_shapes,
                 check_local_argument_errors,
                 check_name_reuse_wait_timeout_and_poll,
                 check_grouped_submission_is_all_or_nothing])
