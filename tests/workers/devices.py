"""Every collective on 'device' memory through a device backend (NCCL or
HCCL) running against the test shims, with exact expectations.

Usage: devices.py nccl|hccl [SCENARIO]
  all       (default) every collective, dtype and op, fused buckets, scaling
  mismatch  rank 0 submits host memory, rank 1 device memory: both fail
  async     the shim injects an asynchronous error on one rank
  async-slow-exit  the same; rank 1 then takes 2 s more to exit than rank 0
  missing   the backend's library cannot be loaded
  nosymbol  the backend's library lacks a symbol the backend needs
  bogus     FUSEOPT_CUDA_BACKEND / FUSEOPT_NPU_BACKEND name no backend
  abi       requests of the first ABI's struct size (host memory)
"""
import sys
import time

import ml_dtypes
import numpy as np

import fuseopt
import rank_harness as harness
from data import DTYPES, reduce_expected, values
from device_memory import AclApi, CudaApi, DeviceArray, read_pointer
from fuseopt.base import devices
from fuseopt.core import requests as rq

BACKEND = sys.argv[1]
SCENARIO = sys.argv[2] if len(sys.argv) > 2 else "all"
OPS = {"sum": fuseopt.Sum, "average": fuseopt.Average, "min": fuseopt.Min, "max": fuseopt.Max,
       "product": fuseopt.Product}
api = None  # CudaApi or AclApi, made in main()
producer = 0  # the "framework" stream that computes inputs


def dev(event=0):
    return devices.Device(api.kind, 0, producer, event)


def ptr(p):
    return rq.ffi.cast("void*", p)


def name_of(dtype):
    return np.dtype(dtype).name


def everyone(name, shape, dtype, op="sum"):
    return [values(name, r, shape, dtype, op) for r in range(fuseopt.size())]


def exact(actual, expected, what):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, \
        "%s: %s%s != %s%s" % (what, actual.dtype, actual.shape, expected.dtype, expected.shape)
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    assert np.array_equal(a, e), "%s: got %s expected %s" % (what, a.ravel()[:8], e.ravel()[:8])


def device_input(name, shape, dtype, op="sum", event=True):
    """A device array holding this rank's values, produced on the producer
    stream (not yet run), plus its Device with a ready event (or none)."""
    arr = DeviceArray(api, shape, dtype)
    ev = api.event() if event else 0
    arr.produce(values(name, fuseopt.rank(), shape, dtype, op), producer, ev)
    return arr, dev(ev)


def allreduce_async(name, arr, out, d, op, pre=1.0, post=1.0, batch=None):
    args = (rq.ALLREDUCE, name, name_of(arr.dtype), arr.shape, ptr(arr.ptr), ptr(out.ptr))
    kwargs = dict(reduce_op=op, prescale=pre, postscale=post, device=d, keepalive=(arr, out))
    return batch.add(*args, **kwargs) if batch is not None else rq.enqueue(*args, **kwargs)


def check_allreduce_every_dtype_op_fused():
    """One batch: the core fuses each (dtype, op) group into one bucket."""
    batch, expected = rq.Batch(), []
    for dtype in DTYPES:
        for op_name, op in OPS.items():
            for shape in [(7,), (3, 5), (), (0,)]:
                name = "dev.ar.%s.%s.%s" % (name_of(dtype), op_name, shape)
                arr, d = device_input(name, shape, dtype, op_name)
                out = DeviceArray(api, shape, dtype)
                allreduce_async(name, arr, out, d, op, batch=batch)
                expected.append((name, out, reduce_expected(everyone(name, shape, dtype, op_name),
                                                            op_name)))
    before = fuseopt.metrics()
    for h in batch.submit():
        h.wait()
    after = fuseopt.metrics()
    for name, out, e in expected:
        exact(out.get(), e, name)
    # How the batch was fused, for tests/test_devices.py to judge against the
    # fusion threshold in force.
    print("[rank %d] fused batch: %d tensors in %d collectives, %d (dtype, op) groups"
          % (fuseopt.rank(), after["tensors"] - before["tensors"],
             after["collectives"] - before["collectives"], len(DTYPES) * len(OPS)), flush=True)


def check_allreduce_single_in_place_without_event():
    # No ready event: the core must record one on the producer stream itself.
    for dtype in (np.float32, np.int32):
        name = "dev.inplace.%s" % name_of(dtype)
        arr, d = device_input(name, (100,), dtype, event=False)
        allreduce_async(name, arr, arr, d, fuseopt.Sum).wait()
        exact(arr.get(), reduce_expected(everyone(name, (100,), dtype), "sum"), name)


def check_scaling():
    n = fuseopt.size()
    cases = []  # (dtype, op name, pre, post, expected as a function of the sum/min)
    for dtype in (np.float32, np.float64, np.float16, ml_dtypes.bfloat16):
        cases += [(dtype, "sum", 0.5, 4.0), (dtype, "average", 1.0, 1.0),
                  (dtype, "average", 2.0, 0.5), (dtype, "min", 2.0, 1.0)]
    cases += [(np.int32, "sum", 2.0, 1.0), (np.int64, "average", 1.0, 1.0),
              (np.int32, "max", 1.0, 3.0)]
    for fused in (False, True):
        batch = rq.Batch() if fused else None
        pending = []
        for dtype, op_name, pre, post in cases:
            for k in range(3 if fused else 1):
                name = "dev.scaled.%s.%s.%s.%s.%d.%d" % (name_of(dtype), op_name, pre, post,
                                                         fused, k)
                arr, d = device_input(name, (9,), dtype, op_name)
                out = DeviceArray(api, (9,), dtype)
                h = allreduce_async(name, arr, out, d, OPS[op_name], pre, post, batch)
                ranks = [v.astype(np.float64) * pre for v in everyone(name, (9,), dtype, op_name)]
                red = {"sum": np.sum, "average": np.sum, "min": np.min, "max": np.max}[op_name]
                e = red(np.stack(ranks), 0)
                if op_name == "average":
                    e = np.trunc(e / n) if np.dtype(dtype).kind in "iu" else e / n
                pending.append((name, h, out, (e * post).astype(dtype)))
        handles = batch.submit() if fused else [p[1] for p in pending]
        for h in handles:
            h.wait()
        for name, _, out, e in pending:
            exact(out.get(), e, name)


def check_broadcast_fused_and_single():
    for root in range(fuseopt.size()):
        batch, expected = rq.Batch(), []
        for i, (shape, dtype) in enumerate([((4,), np.float32), ((2, 3), np.float32),
                                            ((5,), np.float32), ((1000,), np.int64)]):
            name = "dev.bcast.%d.%d" % (root, i)
            arr, d = device_input(name, shape, dtype)
            batch.add(rq.BROADCAST, name, name_of(dtype), shape, ptr(arr.ptr), ptr(arr.ptr),
                      root=root, device=d, keepalive=(arr,))
            expected.append((name, arr, values(name, root, shape, dtype)))
        for h in batch.submit():
            h.wait()
        for name, arr, e in expected:
            exact(arr.get(), e, name)


def allgather_check(name, rows_of):
    r = fuseopt.rank()
    arr, d = device_input(name, (rows_of(r), 3), np.float32)
    h = rq.enqueue(rq.ALLGATHER, name, "float32", arr.shape, ptr(arr.ptr), device=d,
                   keepalive=(arr,), finish=lambda raw: raw)
    raw = h.wait()
    assert raw.buffer is None and raw.device_pointer, "device result expected"
    got = read_pointer(api, raw.device_pointer, raw.nbytes, np.float32, (raw.first_dim, 3))
    e = np.concatenate([values(name, q, (rows_of(q), 3), np.float32)
                        for q in range(fuseopt.size())])
    exact(got, e, name)
    assert raw.recv_splits == [rows_of(q) for q in range(fuseopt.size())], raw.recv_splits


def check_allgather_even_and_uneven():
    allgather_check("dev.ag.even", lambda r: 2)
    allgather_check("dev.ag.uneven", lambda r: r + 1)
    allgather_check("dev.ag.empty_here", lambda r: 0 if r == 0 else 2)


def check_alltoall_with_splits():
    n, r = fuseopt.size(), fuseopt.rank()
    splits = [(r + q) % 3 for q in range(n)]  # rows from r to q
    name = "dev.a2a"
    arr, d = device_input(name, (sum(splits), 2), np.int32)
    h = rq.enqueue(rq.ALLTOALL, name, "int32", arr.shape, ptr(arr.ptr), splits=splits,
                   device=d, keepalive=(arr,), finish=lambda raw: raw)
    raw = h.wait()
    got = read_pointer(api, raw.device_pointer, raw.nbytes, np.int32, (raw.first_dim, 2))
    parts = []
    for q in range(n):
        theirs = [(q + p) % 3 for p in range(n)]
        start = sum(theirs[:r])
        parts.append(values(name, q, (sum(theirs), 2), np.int32)[start:start + theirs[r]])
    exact(got, np.concatenate(parts), name)


def check_reducescatter_even_uneven_average():
    n, r = fuseopt.size(), fuseopt.rank()
    # Even parts: one native reduce-scatter (NCCL: ncclAvg / pre-multiplied
    # sum for the factors); uneven: allreduce and slice; factors on HCCL and
    # on integers through host memory.
    for rows, op_name, dtype, pre, post in [
            (2 * n, "sum", np.float32, 1.0, 1.0), (2 * n + 1, "sum", np.int32, 1.0, 1.0),
            (2 * n, "average", np.float64, 1.0, 1.0), (3, "max", np.float16, 1.0, 1.0),
            (2 * n, "sum", np.float32, 0.5, 4.0), (2 * n + 1, "average", np.float32, 2.0, 1.0),
            (2 * n, "sum", np.int64, 3.0, 1.0)]:
        name = "dev.rs.%d.%s.%s.%s" % (rows, op_name, pre, post)
        arr, d = device_input(name, (rows, 2), dtype, op_name)
        mine = rows // n + (1 if r < rows % n else 0)
        out = DeviceArray(api, (mine, 2), dtype)
        rq.enqueue(rq.REDUCESCATTER, name, name_of(dtype), arr.shape, ptr(arr.ptr),
                   ptr(out.ptr), reduce_op=OPS[op_name], prescale=pre, postscale=post, device=d,
                   keepalive=(arr, out)).wait()
        scaled = [(v.astype(np.float64) * pre).astype(dtype)
                  for v in everyone(name, (rows, 2), dtype, op_name)]
        full = (reduce_expected(scaled, op_name).astype(np.float64) * post).astype(dtype)
        start = sum(rows // n + (1 if q < rows % n else 0) for q in range(r))
        exact(out.get(), full[start:start + mine], name)


def check_join_with_device_tensors():
    """The last rank joins; the others' device allreduce counts it as zeros
    (the joined rank uploads identity values to its device)."""
    n, r = fuseopt.size(), fuseopt.rank()
    if r < n - 1:
        name = "dev.join"
        arr, d = device_input(name, (5,), np.float32)
        allreduce_async(name, arr, arr, d, fuseopt.Sum).wait()
        exact(arr.get(), reduce_expected([values(name, q, (5,), np.float32)
                                          for q in range(n - 1)], "sum"), name)
    fuseopt.join()


def check_steady_state_steps_hit_the_response_cache():
    """Training submits the same names every step: after the first step they
    are negotiated by the cache's bit vector, and still reduce correctly."""
    before = fuseopt.metrics()["cache_hits"]
    for step in range(4):
        batch, expected = rq.Batch(), []
        for i, dtype in enumerate((np.float32, np.float16, np.int64)):
            name = "dev.step.%d" % i
            arr, d = device_input(name + ".%d" % step, (6,), dtype)
            allreduce_async(name, arr, arr, d, fuseopt.Average, batch=batch)
            expected.append((name, arr, reduce_expected(everyone(name + ".%d" % step, (6,), dtype),
                                                        "average")))
        for h in batch.submit():
            h.wait()
        for name, arr, e in expected:
            exact(arr.get(), e, "%s step %d" % (name, step))
    assert fuseopt.metrics()["cache_hits"] - before >= 9, fuseopt.metrics()


def check_second_device_on_one_rank_is_refused_everywhere():
    """A fusion plan is the same on every rank, so a rank cannot switch
    devices: rank 0 moving to device 1 fails that tensor on every rank,
    with rank 0's reason; device 0 keeps working."""
    name = "dev.second"
    arr, d = device_input(name, (3,), np.float32)
    if fuseopt.rank() == 0:
        d = d._replace(index=1)
    h = allreduce_async(name, arr, arr, d, fuseopt.Sum)
    harness.expect_error(fuseopt.UnsupportedError, h.wait, "rank 0:", "one device per rank")
    arr, d = device_input(name, (3,), np.float32)
    allreduce_async(name, arr, arr, d, fuseopt.Sum).wait()
    exact(arr.get(), reduce_expected(everyone(name, (3,), np.float32), "sum"), name)


def check_host_tensors_still_use_mpi():
    x = np.arange(5, dtype=np.float32) + fuseopt.rank()
    out = fuseopt.allreduce(x, name="host.after.devices", op=fuseopt.Sum)
    exact(out, sum(np.arange(5, dtype=np.float32) + q for q in range(fuseopt.size())), "host")


ALL = [check_allreduce_every_dtype_op_fused, check_allreduce_single_in_place_without_event,
       check_scaling, check_broadcast_fused_and_single, check_allgather_even_and_uneven,
       check_alltoall_with_splits, check_reducescatter_even_uneven_average,
       check_join_with_device_tensors, check_steady_state_steps_hit_the_response_cache,
       check_second_device_on_one_rank_is_refused_everywhere, check_host_tensors_still_use_mpi]


def check_mismatch():
    name = "dev.mismatch"
    if fuseopt.rank() == 0:
        x = np.ones(4, np.float32)
        h = fuseopt.allreduce_async(x, name=name, op=fuseopt.Sum)
    else:
        arr, d = device_input(name, (4,), np.float32)
        h = allreduce_async(name, arr, arr, d, fuseopt.Sum)
    harness.expect_error(fuseopt.MismatchError, h.wait, name, "on %s" %
                         {devices.CUDA: "cuda", devices.NPU: "npu"}[api.kind])


def check_missing_library():
    arr, d = device_input("dev.missing", (4,), np.float32)
    h = allreduce_async("dev.missing", arr, arr, d, fuseopt.Sum)
    hint = {"nccl": "pip install nvidia-nccl-cu12", "hccl": "Ascend CANN"}[BACKEND]
    lib_name = {"nccl": "FUSEOPT_NCCL_LIBRARY", "hccl": "FUSEOPT_HCCL_LIBRARY"}[BACKEND]
    e = harness.expect_error(fuseopt.UnsupportedError, h.wait, "cannot load", hint, lib_name)
    if fuseopt.rank() == 0:
        print("missing-library error: %s" % e, flush=True)
    check_host_tensors_still_use_mpi()  # the runtime goes on for host memory


def check_library_without_a_symbol():
    # FUSEOPT_NCCL_LIBRARY / FUSEOPT_HCCL_LIBRARY name the other vendor's shim.
    arr, d = device_input("dev.nosym", (4,), np.float32)
    h = allreduce_async("dev.nosym", arr, arr, d, fuseopt.Sum)
    first = {"nccl": "ncclGetUniqueId", "hccl": "HcclGetRootInfo"}[BACKEND]
    harness.expect_error(fuseopt.UnsupportedError, h.wait, "does not export " + first)


def check_unknown_backend_name():
    # FUSEOPT_CUDA_BACKEND / FUSEOPT_NPU_BACKEND = "bogus" (set by the test)
    arr, d = device_input("dev.bogus", (4,), np.float32)
    h = allreduce_async("dev.bogus", arr, arr, d, fuseopt.Sum)
    harness.expect_error(fuseopt.UnsupportedError, h.wait, "no device backend named 'bogus'",
                         "known: nccl, hccl")


def check_requests_of_the_first_abi_size():
    """A caller built against the header before the device fields passes the
    older struct_size; its requests are host requests, walked at its stride,
    whatever its padding bytes hold."""
    ffi, lib = rq.ffi, rq.lib
    old = ffi.offsetof("fuseopt_request_t", "device_id")  # old sizeof, with padding
    raw = ffi.new("char[]", b"\xff" * (2 * old))  # garbage where device_type now is
    xs = [np.arange(6, dtype=np.float32) * (fuseopt.rank() + k + 1) for k in range(2)]
    outs = [np.zeros(6, np.float32) for _ in range(2)]
    keep = []
    for k in range(2):
        req = ffi.cast("fuseopt_request_t*", raw + k * old)
        ffi.memmove(raw + k * old, b"\0" * ffi.offsetof("fuseopt_request_t", "device_type"),
                    ffi.offsetof("fuseopt_request_t", "device_type"))
        req.struct_size = old
        req.collective = lib.FUSEOPT_ALLREDUCE
        keep.append(ffi.new("char[]", b"abi.old.%d" % k))
        req.name = keep[-1]
        req.dtype = lib.FUSEOPT_FLOAT32
        req.reduce_op = lib.FUSEOPT_SUM
        keep.append(ffi.new("int64_t[]", [6]))
        req.ndim, req.shape = 1, keep[-1]
        req.input, req.output = ffi.from_buffer(xs[k]), ffi.from_buffer(outs[k])
        req.prescale = req.postscale = 1.0
    handles = ffi.new("int64_t[]", 2)
    ctx = fuseopt.core.world.context()
    assert lib.fuseopt_enqueue_many(ctx, ffi.cast("fuseopt_request_t*", raw), 2, handles) == 0, \
        ffi.string(lib.fuseopt_last_error())
    for k in range(2):
        assert lib.fuseopt_wait(ctx, handles[k], -1) == 0, ffi.string(lib.fuseopt_last_error())
        e = sum(np.arange(6, dtype=np.float32) * (q + k + 1) for q in range(fuseopt.size()))
        exact(outs[k], e, "old-size request %d" % k)
    tiny = ffi.new("fuseopt_request_t*")
    tiny.struct_size = 16
    rc = lib.fuseopt_enqueue(ctx, tiny, handles)
    assert rc == lib.FUSEOPT_INVALID_ARG and b"struct_size" in ffi.string(lib.fuseopt_last_error())
    # Out-of-range device fields are refused at the call, before negotiation.
    for kind, index, text in [(-1, 0, b"unknown device type"), (3, 0, b"unknown device type"),
                              (lib.FUSEOPT_DEVICE_CUDA, -1, b"negative device index")]:
        bad = ffi.new("fuseopt_request_t*")
        bad.struct_size = ffi.sizeof("fuseopt_request_t")
        bad.collective, bad.dtype, bad.reduce_op = lib.FUSEOPT_ALLREDUCE, lib.FUSEOPT_FLOAT32, 0
        bad.name, bad.ndim = keep[0], 0
        bad.input = bad.output = ffi.from_buffer(outs[0])
        bad.prescale = bad.postscale = 1.0
        bad.device_type, bad.device_id = kind, index
        rc = lib.fuseopt_enqueue(ctx, bad, handles)
        assert rc == lib.FUSEOPT_INVALID_ARG and text in ffi.string(lib.fuseopt_last_error()), \
            (kind, index, ffi.string(lib.fuseopt_last_error()))


def scenario_async():
    """The shim fails the 3rd collective on rank 1; every rank must raise."""
    fuseopt.init()
    word = {"nccl": "NCCL", "hccl": "HCCL"}[BACKEND]
    for i in range(2):
        arr, d = device_input("dev.ok.%d" % i, (8,), np.float32)
        allreduce_async("dev.ok.%d" % i, arr, arr, d, fuseopt.Sum).wait()
    arr, d = device_input("dev.fails", (8,), np.float32)
    h = allreduce_async("dev.fails", arr, arr, d, fuseopt.Sum)
    harness.expect_error(fuseopt.BackendError, h.wait, word, "asynchronous error")
    rank = fuseopt.rank()
    print("[rank %d] async error raised as expected" % rank, flush=True)
    # The loop has stopped on this rank with an error, so fuseopt skips
    # MPI_Finalize at exit (MPI may still hold the failed collective's
    # requests): a plain exit is clean. os._exit(0) here would now be reported
    # as a rank that left while fuseopt still ran in it.
    fuseopt.shutdown()
    if SCENARIO == "async-slow-exit" and rank == 1:
        time.sleep(2.0)  # rank 0's process is gone by now: this one must not be killed


def main():
    global api, producer
    api = CudaApi() if BACKEND == "nccl" else AclApi()
    producer = api.stream()
    if SCENARIO.startswith("async"):
        return scenario_async()
    harness.run({"all": ALL, "mismatch": [check_mismatch],
                 "missing": [check_missing_library], "bogus": [check_unknown_backend_name],
                 "nosymbol": [check_library_without_a_symbol],
                 "abi": [check_requests_of_the_first_abi_size]}[SCENARIO])


if __name__ == "__main__":
    main()
