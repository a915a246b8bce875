"""Every collective x dtype x op against exact expectations.

Usage: collectives.py FUSION_THRESHOLD_BYTES"""
import functools
import sys
import time

import ml_dtypes
import numpy as np

import fuseopt
import fuseopt.core.requests
import rank_harness as harness
from fuseopt.base._native import ffi
from data import COMBINE, DTYPES, assert_close, reduce_expected, values

OPS = {"sum": fuseopt.Sum, "average": fuseopt.Average, "min": fuseopt.Min,
       "max": fuseopt.Max, "product": fuseopt.Product}
SHAPES = [(), (0,), (7,), (3, 5), (2, 0, 3)]


def reduced(name, shape, dtype, op="sum", values_op=None):
    """What every rank's values of name (drawn for values_op, op by default)
    reduce to by op. Computed once per process: the configurations that run one
    after the other in one launch share it (the reference, not the core, took
    most of a check's time)."""
    return _reduced(name, tuple(shape), np.dtype(dtype), op, values_op or op, fuseopt.size())


@functools.cache
def _reduced(name, shape, dtype, op, values_op, nranks):
    out = np.asarray(reduce_expected([values(name, r, shape, dtype, values_op)
                                      for r in range(nranks)], op))
    out.flags.writeable = False
    return out


def check_allreduce_every_dtype_op_shape():
    handles = []
    for dtype in DTYPES:
        for op_name, op in OPS.items():
            for shape in SHAPES:
                name = "ar.%s.%s.%s" % (np.dtype(dtype).name, op_name, shape)
                mine = values(name, fuseopt.rank(), shape, dtype, op_name)
                handles.append((name, fuseopt.allreduce_async(mine, name=name, op=op),
                                reduced(name, shape, dtype, op_name)))
    for name, h, expected in handles:
        assert_close(h.wait(), expected, name)


def check_allreduce_in_place_and_scaling():
    x = values("inplace", fuseopt.rank(), (100,), np.float32)
    fuseopt.allreduce_(x, name="inplace", op=fuseopt.Sum)
    assert_close(x, reduced("inplace", (100,), np.float32), "inplace")
    for dtype in (np.float32, np.float64, np.float16):
        y = values("scaled", fuseopt.rank(), (33,), dtype)
        out = fuseopt.allreduce(y, name="scaled.%s" % np.dtype(dtype).name, op=fuseopt.Sum,
                                prescale_factor=0.5, postscale_factor=4.0)
        expected = (reduced("scaled", (33,), dtype).astype(np.float64)
                    * 2.0).astype(dtype)
        assert_close(out, expected, "scaled %s" % dtype)

    # Out of place into outputs that start off a 16-byte boundary (views one
    # element in), odd lengths, over several shared-memory chunks: the
    # streaming stores' unaligned head and scalar tail (kernels/pair_sum.cc).
    for dtype, n in ((np.float32, 700003), (np.float64, 300001), (np.float32, 65537)):
        names = ["unaligned.%s.%d.%d" % (np.dtype(dtype).name, n, k) for k in range(2)]
        ins = [values(name, fuseopt.rank(), (n + 1,), dtype)[1:] for name in names]
        outs = [np.zeros(n + 1, dtype)[1:] for _ in names]
        fuseopt.api.ops.submit_grouped_allreduce(ins, names, fuseopt.Sum, 1.0, 1.0, False,
                                                 outs=outs).wait()
        for name, out in zip(names, outs):
            expected = reduce_expected([values(name, r, (n + 1,), dtype)[1:]
                                        for r in range(fuseopt.size())], "sum")
            assert_close(out, expected, name)


def check_scaling_edge_cases():
    n = fuseopt.size()
    # Integers saturate instead of wrapping (out-of-range casts are undefined).
    out = fuseopt.allreduce(np.array([200, 3], np.uint8), name="sat", op=fuseopt.Max,
                            prescale_factor=2.0)
    assert out.tolist() == [255, 6], out
    # Integer Average divides exactly (no 1/size rounding below the quotient).
    out = fuseopt.allreduce(np.full(3, 7 * n, np.int64), name="iavg", op=fuseopt.Average)
    assert_close(out, np.full(3, 7 * n, np.int64), "integer average")
    # Nearly equal postscales in one round must not share a bucket's factor.
    a = fuseopt.allreduce_async(np.full(2, 1e8), name="post.a", op=fuseopt.Sum,
                                postscale_factor=1.0000001)
    b = fuseopt.allreduce_async(np.full(2, 1e8), name="post.b", op=fuseopt.Sum,
                                postscale_factor=1.0000004)
    assert_close(a.wait(), np.full(2, 1e8 * n * 1.0000001), "postscale a")
    assert_close(b.wait(), np.full(2, 1e8 * n * 1.0000004), "postscale b")


def check_fused_many_and_large():
    # Mixed sizes, some larger than any small threshold, all in flight at once.
    sizes = [1, 10, 100, 1000, 5000, 70000, 3] * 6
    handles = []
    for i, n in enumerate(sizes):
        name = "fuse.%d" % i
        handles.append((name, fuseopt.allreduce_async(
            values(name, fuseopt.rank(), (n,), np.float32), name=name, op=fuseopt.Sum), n))
    for name, h, n in handles:
        assert_close(h.wait(), reduced(name, (n,), np.float32), name)


def check_bucket_spanning_several_shared_memory_chunks():
    # ~57 MiB of sub-MiB tensors fuse into buckets larger than one 1-2 MiB
    # shared-memory slot, so tensors straddle chunk boundaries and both slots
    # of each rank take turns; powers-of-two scales keep the sums exact.
    sizes = [250007 + 13 * i for i in range(60)]
    names = ["span.%d" % i for i in range(len(sizes))]
    mine = [values(n, fuseopt.rank(), (k,), np.float32) for n, k in zip(names, sizes)]
    for step in range(2):
        outs = fuseopt.grouped_allreduce_async(mine, names=names, op=fuseopt.Sum,
                                               prescale_factor=0.5, postscale_factor=4.0).wait()
        for name, k, out in zip(names, sizes, outs):
            expected = reduced(name, (k,), np.float32) * 2
            assert_close(out, expected, "%s step %d" % (name, step))
    # The staged variant (other dtypes and ops) and 16-bit tensors over more
    # than one chunk, too.
    for dtype, op_name, n in ((np.int32, "max", 4500001), (np.float16, "sum", 9000003),
                              (np.int64, "min", 2100007)):
        name = "span.%s.%s" % (np.dtype(dtype).name, op_name)
        out = fuseopt.allreduce(values(name, fuseopt.rank(), (n,), dtype, op_name), name=name,
                                op=OPS[op_name])
        assert_close(out, reduced(name, (n,), dtype, op_name), name)


def _allreduce_on_wire(x, name, op, wire, **kwargs):
    """A float32 allreduce that travels as a 16-bit float (fuseopt_request_t::wire)."""
    out = np.empty_like(x)
    return fuseopt.core.requests.enqueue(
        fuseopt.core.requests.ALLREDUCE, name, "float32", x.shape, ffi.from_buffer(x),
        ffi.from_buffer(out), reduce_op=op, wire=wire, keepalive=(x, out),
        finish=lambda _: out, **kwargs)


@functools.cache
def _normal_inputs(rank, wire, n, op_name):
    """rank's float32 input of check_float32_travelling_as_16_bits, drawn once
    per process (read-only)."""
    rng = np.random.default_rng([rank, wire, n, list(OPS).index(op_name)])
    x = rng.standard_normal(n, dtype=np.float32) * 300
    if op_name == "product":
        x = np.abs(x) / 200 + 0.5
    x.flags.writeable = False
    return x


def check_float32_travelling_as_16_bits():
    # The core's rounding on its copies gives the bits of a cast, a 16-bit
    # allreduce and a cast back, for every op, with scaling, through the
    # fusion buffer (small) and shared memory (over one 1-2 MiB slot).
    rq = fuseopt.core.requests
    r = fuseopt.rank()
    for wire, half in ((rq.WIRE_FLOAT16, np.float16), (rq.WIRE_BFLOAT16, ml_dtypes.bfloat16)):
        for op_name, op in OPS.items():
            for n, scales in ((37, (1.0, 1.0)), (1000, (0.5, 3.0)), (9000001, (1.0, 0.25))):
                if n > 1000 and op_name not in ("sum", "average"):
                    continue
                name = "wire.%d.%s.%d" % (wire, op_name, n)
                x = _normal_inputs(r, wire, n, op_name)
                # One after the other, each alone in its bucket: over more
                # than 2 ranks, which rank reduces an element (and so the
                # order of its sum) depends on its place in the bucket.
                got = _allreduce_on_wire(x, name, op, wire, prescale=scales[0],
                                         postscale=scales[1]).wait()
                ref = fuseopt.allreduce(x.astype(half), name=name + ".ref", op=op,
                                        prescale_factor=scales[0], postscale_factor=scales[1])
                assert got.dtype == np.float32
                assert np.array_equal(got, ref.astype(np.float32)), (name, got[:4], ref[:4])
    # One rank's float16 tensor and another's float32 sent as float16 reduce together.
    x = np.arange(5, dtype=np.float32) + 0.1 * r
    if r % 2:
        got = _allreduce_on_wire(x, "wire.mixed", fuseopt.Sum, rq.WIRE_FLOAT16).wait()
    else:
        got = fuseopt.allreduce(x.astype(np.float16), name="wire.mixed", op=fuseopt.Sum)
    gathered = fuseopt.allgather(got.astype(np.float32)[None], name="wire.mixed.all")
    assert (gathered == gathered[0]).all(), gathered
    # What may not travel as 16 bits is refused on the rank that asks.
    bad = [("int32", np.zeros(3, np.int32), rq.ALLREDUCE, rq.WIRE_FLOAT16, "float32 tensor"),
           ("broadcast", np.zeros(3, np.float32), rq.BROADCAST, rq.WIRE_FLOAT16, "allreduce"),
           ("code", np.zeros(3, np.float32), rq.ALLREDUCE, 7, "unknown wire type")]
    for name, arr, collective, wire, words in bad:
        try:
            rq.enqueue(collective, "wire.bad." + name, arr.dtype.name, arr.shape,
                       ffi.from_buffer(arr), ffi.from_buffer(arr), wire=wire)
        except fuseopt.InvalidArgumentError as e:
            assert words in str(e), (name, str(e))
        else:
            raise AssertionError("wire %s accepted for %s" % (wire, name))
    try:
        _allreduce_on_wire(np.zeros(3, np.float32), "wire.bad.adasum", fuseopt.Adasum,
                           rq.WIRE_BFLOAT16)
    except fuseopt.InvalidArgumentError as e:
        assert "Adasum" in str(e), str(e)
    else:
        raise AssertionError("Adasum accepted on a 16-bit wire")


@functools.cache
def _16bit_inputs(half, op_name, count, nranks):
    """Every rank's input of check_16bit_tensors_round_once_per_step, drawn once
    per process (read-only): the configurations of one launch share them. One
    draw, rotated by a prime per rank: every rank's input differs, and the draw
    does not cost each rank as many as there are ranks."""
    rng = np.random.default_rng([count, list(OPS).index(op_name)])
    x = rng.standard_normal(count, dtype=np.float32) * 300
    drawn = (np.abs(x) / 200 + 0.5 if op_name == "product" else x).astype(half)
    xs = [np.roll(drawn, 7919 * q) for q in range(nranks)]
    for x in xs:
        x.flags.writeable = False
    return xs


@functools.cache
def _reduced_in_16_bits(half, op_name, count, pre, post):
    """Two ranks' 16-bit tensors reduced as a 16-bit MPI reduction does: each
    value prescaled and rounded, combined in float32 and rounded, the result
    postscaled (with 1/2 for an average) and rounded."""
    xs = _16bit_inputs(half, op_name, count, 2)
    f = np.float32
    a, b = [(x.astype(f) * f(pre)).astype(half).astype(f) for x in xs]
    both = COMBINE[op_name](a, b)
    post = f(post / 2 if op_name == "average" else post)
    return (both.astype(half).astype(f) * post).astype(half)


@functools.cache
def _exactly_reduced_16bit(half, op_name, count, pre, nranks):
    """The exact reduction (float64) of every rank's prescaled 16-bit input, and
    a unit in the last place of the largest prescaled value."""
    combine = COMBINE[op_name]
    exact, largest = None, 0.0
    for x in _16bit_inputs(half, op_name, count, nranks):
        wide = x.astype(np.float64)
        wide *= pre
        largest = max(largest, np.abs(wide).max())
        exact = wide if exact is None else combine(exact, wide, out=exact)
    if op_name == "average":
        exact /= nranks
    return exact, float(ml_dtypes.finfo(half).eps) * largest


def check_16bit_tensors_round_once_per_step():
    # float16/bfloat16 tensors are reduced in their own dtype, in blocks of
    # their outputs: every op, scaled or not, in place and into new arrays,
    # within a slot, across slots and past the size where outputs stream.
    # Two ranks: the bits of a 16-bit reduction done step by step in numpy.
    # More: every rank holds the same bits, close to the exact result.
    r, n = fuseopt.rank(), fuseopt.size()
    cases = [(37, 1.0, 1.0), (1000, 0.5, 3.0), (1500007, 1.0, 0.25), (4500001, 1.0, 1.0)]
    for half in (np.float16, ml_dtypes.bfloat16):
        for op_name, op in OPS.items():
            for count, pre, post in cases:
                if count > 1500007 and op_name != "sum":
                    continue
                name = "h16.%s.%s.%d" % (np.dtype(half).name, op_name, count)
                xs = _16bit_inputs(half, op_name, count, n)
                mine = xs[r].copy()
                out = fuseopt.allreduce(mine, name=name, op=op, prescale_factor=pre,
                                        postscale_factor=post)
                fuseopt.allreduce_(mine, name=name + ".in_place", op=op, prescale_factor=pre,
                                   postscale_factor=post)
                assert out.dtype == half and np.array_equal(out.view(np.uint16),
                                                            mine.view(np.uint16)), name
                if n == 2:
                    ref = _reduced_in_16_bits(half, op_name, count, pre, post)
                    bad = np.flatnonzero(out.view(np.uint16) != ref.view(np.uint16))
                    assert bad.size == 0, (name, bad[:5], out[bad[:5]], ref[bad[:5]])
                    continue
                first = fuseopt.broadcast(out, root_rank=0, name=name + ".first")
                assert np.array_equal(out.view(np.uint16), first.view(np.uint16)), name
                exact, ulp = _exactly_reduced_16bit(half, op_name, count, pre, n)
                # n roundings, each off by half a unit of the largest value's place
                # (sums), or by half an epsilon of the value itself (products)
                np.testing.assert_allclose(out.astype(np.float64), exact * post,
                                           rtol=n * float(ml_dtypes.finfo(half).eps),
                                           atol=n * ulp * max(post, 1.0), err_msg=name)


def check_repeated_steps_hit_cache():
    names = ["step.%d" % i for i in range(30)]
    for step in range(15):
        hs = []
        for i, name in enumerate(names):
            x = values((name, step), fuseopt.rank(), (i + 1,), np.float32)
            hs.append((name, step, i, fuseopt.allreduce_async(x, name=name, op=fuseopt.Average)))
        for name, step_, i, h in hs:
            assert_close(h.wait(), reduced((name, step_), (i + 1,), np.float32, "average"),
                         "%s step %d" % (name, step_))


def check_allgather():
    r, n = fuseopt.rank(), fuseopt.size()
    for dtype in DTYPES:
        name = "ag.%s" % np.dtype(dtype).name
        rows = lambda k: (k * 2 + 1) % 4  # noqa: E731  rank 1 of 2 sends 3 rows, some send 0
        mine = values(name, r, (rows(r), 3), dtype)
        out = fuseopt.allgather(mine, name=name)
        expected = np.concatenate([values(name, k, (rows(k), 3), dtype) for k in range(n)])
        assert_close(out, expected, name)
    # The first dimension may change between steps (response cache renegotiates).
    for step in range(4):
        mine = np.full((r + step % 2,), r + 10 * step, dtype=np.int32)
        out = fuseopt.allgather(mine, name="ag.changing")
        expected = np.concatenate([np.full((k + step % 2,), k + 10 * step, np.int32)
                                   for k in range(n)])
        assert_close(out, expected, "ag.changing step %d" % step)


def check_broadcast_every_root():
    n = fuseopt.size()
    for root in range(n):
        for dtype in DTYPES:
            name = "bc.%d.%s" % (root, np.dtype(dtype).name)
            mine = values(name, fuseopt.rank(), (4, 3), dtype)
            out = fuseopt.broadcast(mine, root, name=name)
            assert_close(out, values(name, root, (4, 3), dtype), name)
        buf = np.full(5, fuseopt.rank(), dtype=np.float32)
        fuseopt.broadcast_(buf, root, name="bc_.%d" % root)
        assert_close(buf, np.full(5, root, np.float32), "broadcast_ root %d" % root)


def check_alltoall():
    r, n = fuseopt.rank(), fuseopt.size()
    splits_of = lambda k: [(k + j) % 3 for j in range(n)]  # noqa: E731
    for dtype in (np.float32, np.int64, np.float16):
        name = "a2a.%s" % np.dtype(dtype).name
        rows = [sum(splits_of(k)) for k in range(n)]
        data = [values(name, k, (rows[k], 2), dtype) for k in range(n)]
        out, recv = fuseopt.alltoall(data[r], splits=splits_of(r), name=name)
        pieces = []
        for k in range(n):
            start = sum(splits_of(k)[:r])
            pieces.append(data[k][start:start + splits_of(k)[r]])
        assert_close(out, np.concatenate(pieces), name)
        assert recv.tolist() == [splits_of(k)[r] for k in range(n)], recv
    even = np.arange(2 * n, dtype=np.int32) + 100 * r
    out, recv = fuseopt.alltoall(even, name="a2a.even")
    expected = np.concatenate([np.arange(2 * n, dtype=np.int32)[2 * r:2 * r + 2] + 100 * k
                               for k in range(n)])
    assert_close(out, expected, "a2a.even")


def check_alltoall_across_thresholds_and_chunks():
    # Alltoall takes the shared-memory slots once the ranks have agreed that
    # the exchange holds FUSEOPT_SHM_MIN_BYTES or more in all (each knows only
    # its own counts): blocks between two ranks from none or a few bytes to
    # more than two slots (1-2 MiB, shared among the other ranks), odd byte
    # counts (3-byte rows), a rank that sends nothing, an exchange whose size
    # only rank 0 knows to be large (its block for itself: the agreement must
    # count it on every rank, under the "shm_min=" configuration too), a small
    # one and an empty one (MPI's path, after the agreement); outputs past
    # kStreamedOutputBytes (8 MiB, streamed, the rank's own block too), at odd
    # offsets.
    r, n = fuseopt.rank(), fuseopt.size()
    cases = ((np.float32, (1,), lambda s, d: (0, 1, 65536, 600001)[(s + 2 * d) % 4]),
             (np.int8, (3,), lambda s, d: 3 * ((s * 7 + d * 5) % 11) + 700001 * (s == d)),
             (np.int8, (3,), lambda s, d: 1400001 + s + 2 * d),
             (np.float16, (), lambda s, d: 0 if s == n - 1 else 900001 + s + d),
             (np.float32, (), lambda s, d: 200000 if s == d == 0 else 1),
             (np.int32, (2,), lambda s, d: s + d),
             (np.float32, (), lambda s, d: 0))
    for k, (dtype, row, rows) in enumerate(cases):
        name = "a2a.chunks.%d" % k
        data = [values(name, s, (sum(rows(s, d) for d in range(n)),) + row, dtype)
                for s in range(n)]
        out, recv = fuseopt.alltoall(data[r], splits=[rows(r, d) for d in range(n)], name=name)
        starts = [sum(rows(s, d) for d in range(r)) for s in range(n)]
        expected = np.concatenate([data[s][starts[s]:starts[s] + rows(s, r)] for s in range(n)])
        assert out.shape == expected.shape, (name, out.shape, expected.shape)
        assert_close(out, expected, name)
        assert recv.tolist() == [rows(s, r) for s in range(n)], (name, recv)


def check_reducescatter():
    r, n = fuseopt.rank(), fuseopt.size()
    for op_name in ("sum", "average", "min", "max"):
        for dtype in (np.float32, np.int32, np.float16):
            name = "rs.%s.%s" % (op_name, np.dtype(dtype).name)
            full = reduced(name, (5, 2), dtype, op_name, values_op="sum")
            out = fuseopt.reducescatter(values(name, r, (5, 2), dtype), name=name,
                                        op=OPS[op_name])
            start = sum(fuseopt.api.ops.reducescatter_rows(5, k, n) for k in range(r))
            assert_close(out, full[start:start + fuseopt.api.ops.reducescatter_rows(5, r, n)], name)


def check_gather_collectives_across_thresholds_and_chunks():
    # Allgather and reducescatter take the shared-memory slots from
    # FUSEOPT_SHM_MIN_BYTES (256 KiB by default) of data in all: sizes just
    # under, at and over it, and over several slots (1-2 MiB), odd row counts,
    # a rank that sends nothing while others send several slots, 16-bit
    # types and the kernels of every op.
    r, n = fuseopt.rank(), fuseopt.size()
    for k, total_rows in enumerate((65535, 65536, 65537, 1500001)):  # float32: 256 KiB = 65536
        name = "agrs.ag.%d" % k
        my_rows = lambda q: total_rows // n + (q == n - 1) * (total_rows % n)  # noqa: E731
        out = fuseopt.allgather(values(name, r, (my_rows(r),), np.float32), name=name)
        expected = np.concatenate([values(name, q, (my_rows(q),), np.float32) for q in range(n)])
        assert_close(out, expected, name)
    lopsided = lambda q: 0 if q == 0 else 700001 * q  # noqa: E731
    out = fuseopt.allgather(values("agrs.lopsided", r, (lopsided(r), 2), np.float16),
                            name="agrs.lopsided")
    expected = np.concatenate([values("agrs.lopsided", q, (lopsided(q), 2), np.float16)
                               for q in range(n)])
    assert_close(out, expected, "agrs.lopsided")
    cases = ((np.float32, "sum", 65535), (np.float32, "average", 65536 + 7),
             (np.float64, "sum", 1500007), (np.float16, "sum", 2100001),
             (ml_dtypes.bfloat16, "max", 700003), (np.int32, "min", 1300001),
             (np.float32, "average", 3000017))
    for dtype, op_name, rows in cases:
        name = "agrs.rs.%s.%s.%d" % (np.dtype(dtype).name, op_name, rows)
        full = reduced(name, (rows,), dtype, op_name)
        out = fuseopt.reducescatter(values(name, r, (rows,), dtype, op_name), name=name,
                                    op=OPS[op_name])
        start = sum(fuseopt.api.ops.reducescatter_rows(rows, q, n) for q in range(r))
        assert_close(out, full[start:start + fuseopt.api.ops.reducescatter_rows(rows, r, n)],
                     name)


def check_reducescatter_results_kept_or_recycled():
    # Results of one name are recycled once dropped (output_pool): one the
    # caller keeps is never written by a later call.
    n = fuseopt.size()
    kept = [fuseopt.reducescatter(np.full((2 * n, 4), step, np.float32), name="rs.pool",
                                  op=fuseopt.Sum) for step in range(3)]
    for step in range(4):
        out = fuseopt.reducescatter(np.full((2 * n, 4), 1.0, np.float32), name="rs.pool",
                                    op=fuseopt.Sum)
        assert_close(out, np.full((2, 4), n, np.float32), "dropped result %d" % step)
        del out
    for step, out in enumerate(kept):
        assert_close(out, np.full((2, 4), step * n, np.float32), "kept result %d" % step)


def check_barrier_and_objects():
    fuseopt.barrier()
    fuseopt.barrier()
    obj = fuseopt.broadcast_object({"rank": fuseopt.rank(), "list": [1, 2]}, root_rank=0)
    assert obj == {"rank": 0, "list": [1, 2]}, obj
    gathered = fuseopt.allgather_object(("r", fuseopt.rank()))
    assert gathered == [("r", k) for k in range(fuseopt.size())], gathered


def check_blocking_allreduce_outlasting_a_wait_slice():
    # The blocking allreduce submits and waits in one native call for one wait
    # slice (100 ms); a rank that arrives later leaves the others to finish
    # through a Handle: the same results, in place and into a new array.
    # The waiting ranks sleep at the loop thread's timer slack while they help
    # with rounds, and get their own back: a slack of their own survives.
    r, n = fuseopt.rank(), fuseopt.size()
    own = 77000 + r
    _timer_slack(own)
    for step in range(2):
        if r == n - 1:
            time.sleep(0.35)
        buf = np.full(5, r + step, np.float32)
        assert fuseopt.allreduce_(buf, name="late.inplace", op=fuseopt.Sum) is buf
        new = fuseopt.allreduce(np.full(3, r, np.float64), name="late.new", op=fuseopt.Sum)
        expect = sum(k + step for k in range(n))
        assert_close(buf, np.full(5, expect, np.float32), "late in place")
        assert_close(new, np.full(3, sum(range(n)), np.float64), "late new array")
        assert _timer_slack() == own, (_timer_slack(), own)
    _timer_slack(50000)


def _timer_slack(ns=None):
    """This thread's timer slack (prctl PR_GET_TIMERSLACK), after setting it to ns."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if ns is not None:
        assert libc.prctl(29, ctypes.c_ulong(ns), 0, 0, 0) == 0  # PR_SET_TIMERSLACK
    return libc.prctl(30, 0, 0, 0, 0)  # PR_GET_TIMERSLACK


CHECKS = [check_allreduce_every_dtype_op_shape, check_blocking_allreduce_outlasting_a_wait_slice, check_allreduce_in_place_and_scaling,
          check_scaling_edge_cases,
          check_float32_travelling_as_16_bits, check_16bit_tensors_round_once_per_step,
          check_fused_many_and_large, check_bucket_spanning_several_shared_memory_chunks,
          check_repeated_steps_hit_cache, check_allgather,
          check_broadcast_every_root, check_alltoall, check_alltoall_across_thresholds_and_chunks,
          check_reducescatter,
          check_gather_collectives_across_thresholds_and_chunks,
          check_reducescatter_results_kept_or_recycled,
          check_barrier_and_objects]


def configuration(arg):
    """One configuration from the command line: "default", a fusion threshold
    in bytes, "no-shm" (the shared-memory path off), "stores=KIND" (how the
    shared-memory slots are written: cached or streamed), or "shm_min=BYTES"
    (the shared-memory path from that size)."""
    if arg == "default":
        return {}
    if arg == "no-shm":
        return {"shm_min_bytes": -1}
    if arg.startswith("stores="):
        return {"shm_stores": arg.split("=", 1)[1]}
    if arg.startswith("shm_min="):
        return {"shm_min_bytes": int(arg.split("=", 1)[1])}
    return {"fusion_threshold": int(arg)}


if __name__ == "__main__":
    # Each argument is a configuration to run every check under, in turn, in
    # this one launch (test_collectives.py); none: the default.
    harness.run_configs(CHECKS, [configuration(a) for a in sys.argv[1:]] or [{}])
