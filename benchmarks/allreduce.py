#!/usr/bin/env python
"""Allreduce benchmark: fuseopt against raw MPI (mpi4py) and torch.distributed/gloo.

    python benchmarks/allreduce.py [--quick] [--reps N] [--contenders LIST] [--out DIR]

One ``mpiexec -n 2`` job per contender and repetition (harness.py's notes). The workloads
(a)-(e), marked so in the worker code, and the figures: docs/benchmarks.md, "What each
script measures". Per iteration every rank times the operation from its own start, after
a barrier; the figure is the slowest rank's time, whose median per job the tables take the
median of.
"""
import functools
import math
import operator
import os
import statistics
import sys
import time
import types

import harness
import report

CONTENDERS = ("fuseopt", "mpi4py", "gloo")
NRANKS = harness.NRANKS
KIB = 1024
MIB = 1024 * KIB
SIZES_FULL = [4 * KIB, 64 * KIB, 256 * KIB, 1 * MIB, 16 * MIB, 64 * MIB, 256 * MIB]
BATCH_COUNT = 200
BATCH_BYTES = 16 * KIB
LONE_BYTES = 4 * KIB
IDLE_GAP_S = 0.020
IDLE_SLEEP_S = 3.0
HALF_COUNTS = [256 * 1024, 4 * 1024 * 1024]
HALF_DTYPES = ("float32", "float16", "bfloat16")
# The gradients of torch_train.py's and tf_train.py's MLP: 8 buffers, 33.6 MB.
MLP_DIMS = (1024, 2048, 2048, 1024, 10)
MLP_SHAPES = [s for a, b in zip(MLP_DIMS, MLP_DIMS[1:]) for s in ((a, b), (b,))]
TARGETS = report.references("allreduce")["targets"]


def settings(quick):
    """Iteration budgets; identical on every rank so the loops stay in step."""
    # half_reps stays at 30 in a quick run: the 16-bit rows time single calls after a
    # barrier, and ten of them (the old quick budget) put float16's ratio anywhere
    # between 0.43x and 0.94x in runs of the same code.
    if quick:
        return dict(sizes=[s for s in SIZES_FULL if s <= 64 * MIB], target_s=0.2,
                    min_iters=3, max_iters=1000, batch_warm=3, batch_reps=12, half_reps=30)
    return dict(sizes=SIZES_FULL, target_s=0.5, min_iters=5, max_iters=2000, batch_warm=5,
                batch_reps=40, half_reps=30)


# ---- worker side: each contender as the same small set of operations ------------------
# Contenders run in separate jobs on purpose: fuseopt's loop thread calls MPI concurrently
# with the Python thread, so mpi4py and fuseopt must never share a process.

def contender(name, rank, size, **ops):
    """ops: barrier(), allreduce_(buf, name), typed_buffer(count, dtype) (None: no such
    type), batch {variant: fn(bufs, names, flat)}, mlp_grads {variant: fn(arrays, names)
    -> the results, kept until the next call}, gather(values) -> every rank's values,
    versions, close(); wrap(numpy array) -> what allreduce_ takes (default: the array)."""
    defaults = dict(close=lambda: None, wrap=lambda arr: arr, mlp_grads={})
    return types.SimpleNamespace(name=name, rank=rank, size=size, **dict(defaults, **ops))


def fuseopt_contender():
    import numpy as np
    import fuseopt as fo
    fo.init()

    def typed_buffer(count, dtype):
        if dtype == "bfloat16":
            import ml_dtypes  # comes with TensorFlow; numpy has no bfloat16
            dtype = ml_dtypes.bfloat16
        return np.ones(count, dtype)

    def async_200(bufs, names, _flat):
        for h in [fo.allreduce_async_(b, name=n, op=fo.Sum) for b, n in zip(bufs, names)]:
            h.wait()

    def each(start):  # start(array, name) -> handle, for every gradient; then the waits
        return lambda arrays, names: [h.wait() for h in map(start, arrays, names)]

    return contender(
        "fuseopt", fo.rank(), fo.size(), barrier=fo.barrier, typed_buffer=typed_buffer,
        # The blocking call, as mpi4py's Allreduce: its wait runs the round itself.
        allreduce_=lambda buf, name: fo.allreduce_(buf, name=name, op=fo.Sum),
        batch={"grouped_200": lambda bufs, names, _flat:
               fo.grouped_allreduce_async_(bufs, names, op=fo.Sum).wait(),
               "async_200": async_200},
        mlp_grads={"in_place": each(lambda a, n: fo.allreduce_async_(a, name=n, op=fo.Sum)),
                   "out_of_place": each(lambda a, n: fo.allreduce_async(a, name=n, op=fo.Sum))},
        gather=lambda values: fo.allgather_object(list(values), name="bench.gather"),
        versions={"fuseopt": fo.__version__, "settings": fo.settings()}, close=fo.shutdown)


def mpi4py_contender():
    import numpy as np
    import mpi4py
    # MPICH's default thread level (MULTIPLE): with SERIALIZED its allreduce of 1-16
    # MiB takes another path, 2-3x slower here (docs/design.md, "MPICH's two modes").
    from mpi4py import MPI
    comm = MPI.COMM_WORLD

    def allreduce_(buf, _name=None):
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)

    def separate_200(bufs, _names, _flat):
        for b in bufs:
            allreduce_(b)

    def out_of_place(array):
        out = np.empty_like(array)
        comm.Allreduce(array, out, op=MPI.SUM)
        return out

    return contender(
        "mpi4py", comm.Get_rank(), comm.Get_size(), barrier=comm.Barrier, allreduce_=allreduce_,
        typed_buffer=lambda count, dtype: np.ones(count, dtype) if dtype == "float32" else None,
        batch={"one_3.2MB": lambda _bufs, _names, flat: allreduce_(flat),
               "separate_200": separate_200},
        mlp_grads={"in_place": lambda arrays, _names: [allreduce_(a) for a in arrays],
                   "out_of_place": lambda arrays, _names: [out_of_place(a) for a in arrays]},
        gather=comm.allgather,
        versions={"mpi4py": mpi4py.__version__,
                  "mpi_library": MPI.Get_library_version().strip().splitlines()[0]})


def gloo_contender():
    import datetime
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    rank, size = int(os.environ["PMI_RANK"]), int(os.environ["PMI_SIZE"])
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=300))

    def allreduce_(buf, _name=None, async_op=False):
        return dist.all_reduce(buf, op=dist.ReduceOp.SUM, async_op=async_op)

    def sync_200(bufs, _names, _flat):
        for b in bufs:
            allreduce_(b)

    def async_200(bufs, _names, _flat):
        for w in [allreduce_(b, async_op=True) for b in bufs]:
            w.wait()

    def gather(values):
        out = [None] * size
        dist.all_gather_object(out, list(values))
        return out

    return contender(
        "gloo", rank, size, barrier=dist.barrier, allreduce_=allreduce_, gather=gather,
        wrap=torch.from_numpy,  # shares memory: in place
        typed_buffer=lambda count, dtype: torch.ones(count, dtype=getattr(torch, dtype)),
        batch={"sync_200": sync_200, "async_200": async_200},
        versions={"torch": torch.__version__}, close=dist.destroy_process_group)


def _log(c, msg):
    if c.rank == 0:
        sys.stderr.write("[%s] %s\n" % (c.name, msg))
        sys.stderr.flush()


def _timed(c, fn, iters, before=None):
    """Per-iteration seconds on this rank; a barrier (then before()) ahead of each."""
    samples = []
    for _ in range(iters):
        c.barrier()
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return samples


def _bench(c, label, fn, n_warm, n_timed, before=None, **extra):
    """n_warm untimed, then n_timed timed calls of fn; every rank's samples (gathered
    outside the timing, in µs) and extra."""
    _timed(c, fn, n_warm, before)
    return _recorded(c, label, _timed(c, fn, n_timed, before), **extra)


def _recorded(c, label, samples, **extra):
    """This rank's samples (s) logged, and every rank's gathered, in µs, with extra."""
    _log(c, "%s: median(rank0)=%.1f us %s" % (label, 1e6 * statistics.median(samples), extra))
    return dict(samples_us=[[round(s * 1e6, 1) for s in row] for row in c.gather(samples)],
                **extra)


def _checked(c, buf, name):
    """A call allreducing buf in place, and whether one gave the right sum."""
    wrapped = c.wrap(buf)
    buf.fill(c.rank + 1)
    c.allreduce_(wrapped, name)
    ok = bool((buf == c.size * (c.size + 1) / 2.0).all())
    buf.fill(0)
    return (lambda: c.allreduce_(wrapped, name)), ok


def _measure_idle(c, label):
    """(d) CPU used while both ranks sleep: the loop thread's idle cost."""
    import resource
    c.barrier()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    time.sleep(IDLE_SLEEP_S)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    switches = (ru1.ru_nvcsw - ru0.ru_nvcsw) + (ru1.ru_nivcsw - ru0.ru_nivcsw)
    per_rank = c.gather([100.0 * cpu / wall, switches / wall])
    c.barrier()
    _log(c, "idle CPU (%s): %s %% of one core" % (label, [round(r[0], 3) for r in per_rank]))
    return {"cpu_pct": [r[0] for r in per_rank],
            "context_switches_per_s": [r[1] for r in per_rank], "sleep_s": IDLE_SLEEP_S}


def _one_size(c, cfg, nbytes):
    """(a) one allreduce of nbytes; as many iterations as fit the time budget."""
    import numpy as np
    run, ok = _checked(c, np.zeros(nbytes // 4, dtype=np.float32), "bench.single.%d" % nbytes)
    # Deterministic (ranks must agree): many warm-ups for small messages, 2 for big ones.
    n_warm = max(2, min(50, (64 * MIB) // nbytes))
    t0 = time.perf_counter()
    warm = _timed(c, run, n_warm)
    # Budget by wall time per iteration, barrier included, the same on every rank.
    est = max(row[0] for row in c.gather([(time.perf_counter() - t0) / n_warm]))
    # A noisy warm-up must not leave a small size with a handful of samples.
    iters = int(min(cfg["max_iters"], max(cfg["min_iters"], n_warm,
                                          math.ceil(cfg["target_s"] / max(est, 1e-7)))))
    return _bench(c, "single " + report.size_label(nbytes), run, 0, iters, bytes=nbytes,
                  iters=iters, verified=ok, warmup_us=[round(s * 1e6, 1) for s in warm])


def _half_precision(c, cfg):
    """(e) 16-bit floats against float32 of the same element count, the dtypes taking
    turns call by call (a barrier before each), so that a slow spell of the machine
    falls on all of them alike. The float32 calls after the first run after 16-bit ones
    on purpose: a vector kernel that leaves the upper ymm state dirty slows every later
    SSE loop (once: float32 at 4M elements 2.7 -> 13 ms), and shows here."""
    half = {}
    for count in HALF_COUNTS:
        calls = {}  # dtype -> (name, the call)
        for dtype in HALF_DTYPES:
            buf = c.typed_buffer(count, dtype)
            if buf is not None:
                name = "bench.half.%s.%d" % (dtype, count)
                calls[dtype] = name, functools.partial(c.allreduce_, buf, name)
                _timed(c, calls[dtype][1], 3)
        samples = {dtype: [] for dtype in calls}
        for _ in range(cfg["half_reps"]):
            for dtype, (_, run) in calls.items():
                samples[dtype] += _timed(c, run, 1)
        for dtype, (name, _) in calls.items():
            half["%s/%d" % (dtype, count)] = _recorded(c, name, samples[dtype], count=count,
                                                       dtype=dtype)
    return half


def _mlp_grads(c, cfg):
    """(f) the MLP's 8 gradients (33.6 MB), in place and into new arrays, as a training
    step meets them: written just before (the backward pass), the variants interleaved
    call by call so that they meet the same machine. New arrays either live until the
    next call, as a step's averaged gradients do, or are dropped before it (both show
    whether fresh pages, or reused ones, are written). Also back to back with nothing
    written between calls (info): 33.6 MB then stays in this VM's 32 MiB L3 for the
    in-place call, which a training step, whose own work evicts it, never sees."""
    import numpy as np
    arrays = [np.zeros(shape, np.float32) for shape in MLP_SHAPES]
    names = ["bench.mlp.%d" % i for i in range(len(arrays))]
    wrapped = [c.wrap(a) for a in arrays]
    calls = {}
    for variant, fn in c.mlp_grads.items():
        def call(fn=fn, held=[None]):
            held[0] = fn(wrapped, names)  # the previous results go once the new ones exist
        calls[variant] = call
        if variant != "in_place":  # and the results go as soon as they arrive
            calls[variant + "_dropped"] = lambda fn=fn: fn(wrapped, names)
    if not calls:
        return {}
    out = {v: [] for v in calls}
    order = list(calls)
    for i in range(3 + cfg["half_reps"]):  # the first 3 warm up
        for variant in order[i % len(order):] + order[:i % len(order)]:
            for a in arrays:  # the backward pass writes the gradients
                a.fill(i % 7)
            sample = _timed(c, calls[variant], 1)
            if i >= 3:
                out[variant] += sample
    nbytes = sum(a.nbytes for a in arrays)
    result = {variant: _recorded(c, "mlp grads " + variant, samples, bytes=nbytes)
              for variant, samples in out.items()}
    for variant in c.mlp_grads:
        result[variant + "_back_to_back"] = _bench(
            c, "mlp grads %s back to back" % variant, calls[variant], 3, cfg["half_reps"],
            bytes=nbytes)
    return result


def _batch(c, cfg):
    """(b) 200 x 16 KiB submitted together, in each form the contender offers."""
    import numpy as np
    flat = np.zeros(BATCH_COUNT * BATCH_BYTES // 4, dtype=np.float32)
    # Separate arrays for the per-tensor contenders (views of one buffer
    # would hand them contiguous memory they could not get in real use).
    bufs = [np.zeros(BATCH_BYTES // 4, dtype=np.float32) for _ in range(BATCH_COUNT)]
    args = ([c.wrap(b) for b in bufs], ["bench.batch.%03d" % i for i in range(BATCH_COUNT)],
            c.wrap(flat))
    out = {}
    for variant, fn in c.batch.items():
        for b in bufs + [flat]:
            b.fill(c.rank + 1)
        fn(*args)
        touched = flat if variant == "one_3.2MB" else np.concatenate(bufs)
        ok = bool((touched == c.size * (c.size + 1) / 2.0).all())
        for b in bufs + [flat]:
            b.fill(0)
        out[variant] = _bench(c, "batch " + variant, lambda: fn(*args), cfg["batch_warm"],
                              cfg["batch_reps"], count=BATCH_COUNT, bytes_each=BATCH_BYTES,
                              verified=ok)
    return out


def worker_main(args):
    import numpy as np
    cfg = settings(args.quick)
    c = {"fuseopt": fuseopt_contender, "mpi4py": mpi4py_contender,
         "gloo": gloo_contender}[args.worker]()
    if c.size != NRANKS:
        raise SystemExit("expected %d ranks, got %d" % (NRANKS, c.size))
    w = {}
    if c.name == "fuseopt":  # (d), right after init; the others have no loop thread
        w["idle_cpu_after_init"] = _measure_idle(c, "after init")
    w["single"] = {str(n): _one_size(c, cfg, n) for n in cfg["sizes"]}
    w["half_precision"] = _half_precision(c, cfg)
    w["batch_200x16KiB"] = _batch(c, cfg)
    w["mlp_grads"] = _mlp_grads(c, cfg)
    # (c) a lone allreduce after an idle gap
    run, ok = _checked(c, np.zeros(LONE_BYTES // 4, np.float32), "bench.lone.%d" % LONE_BYTES)
    w["lone_4KiB_after_gap"] = _bench(c, "lone 4 KiB after idle", run, 3, 30,
                                      lambda: time.sleep(IDLE_GAP_S), bytes=LONE_BYTES,
                                      gap_s=IDLE_GAP_S, verified=ok)
    if c.name == "fuseopt":  # (d) again, once the response cache holds every name used
        w["idle_cpu_after_work"] = _measure_idle(c, "after workloads")
    out = {"contender": c.name, "size": c.size, "quick": args.quick, "versions": c.versions,
           "workloads": w}
    c.close()
    harness.write_result(args.result_dir, c.rank, out)
    return 0


# ---- driver side ----------------------------------------------------------------------

def wrong_results(result):
    """The workloads whose result was not the expected sum."""
    w = result["workloads"]
    bad = [k for k, v in w["single"].items() if not v.get("verified", True)]
    bad += ["batch/" + k for k, v in w["batch_200x16KiB"].items() if not v.get("verified", True)]
    return bad + ([] if w["lone_4KiB_after_gap"].get("verified", True) else ["lone"])


def run_one(c, rep, pos, args, mpiexec):
    """One job (harness.measured_job): rank 0's result; a failed or wrong one ends the run."""
    def job():
        results, stderr = harness.run_job(
            "mpi", [sys.executable, os.path.abspath(__file__), "--worker", c]
            + ["--quick"] * args.quick, harness.base_env(), args.timeout, c, mpiexec)
        return {"result": results[0], "stderr": stderr}, stderr
    rec = harness.measured_job(args, c, rep, pos, job, lambda rec: "done")
    if rec.get("failed"):
        raise SystemExit(2)
    bad = wrong_results(rec["result"])
    if bad:
        harness.log("\nWRONG RESULTS from %s: %s\n%s\n" % (c, bad, rec["stderr"]))
        raise SystemExit(3)
    return rec


def metrics(job, sizes):
    """One job's figures by name (µs): medians over iterations of the slowest rank's time
    (harness.py, Note [slowest rank]) and of rank 0's, and (idle) the busiest rank's CPU %."""
    w, m = job["result"]["workloads"], {}

    def add(key, rec, rank0_key=None):
        m[key] = statistics.median(harness.slowest(rec["samples_us"]))
        if rank0_key:
            m[rank0_key] = statistics.median(rec["samples_us"][0])

    for n in sizes:
        if str(n) in w["single"]:
            add("single/%d" % n, w["single"][str(n)], "single_rank0/%d" % n)
    for variant, rec in w["batch_200x16KiB"].items():
        add("batch/" + variant, rec, "batch_rank0/" + variant)
    for key, rec in w.get("half_precision", {}).items():
        add("half/" + key, rec)
    for variant, rec in w.get("mlp_grads", {}).items():
        add("mlp/" + variant, rec)
    add("lone", w["lone_4KiB_after_gap"], "lone_rank0")
    # the fastest rank's time: the op's latency net of barrier skew
    m["lone_fastest_rank"] = statistics.median(
        min(vals) for vals in zip(*w["lone_4KiB_after_gap"]["samples_us"]))
    for key in ("idle_cpu_after_init", "idle_cpu_after_work"):
        if key in w:
            m[key] = max(w[key]["cpu_pct"])
    return m


def summarize(jobs, sizes):
    """{contender: {metric: {"median": x, "per_job": [...]}}} over repetitions."""
    per = {}
    for job in jobs:
        for k, v in metrics(job, sizes).items():
            per.setdefault(job["contender"], {}).setdefault(k, []).append(v)
    return {c: {k: {"median": statistics.median(v), "per_job": v} for k, v in m.items()}
            for c, m in per.items()}


def fmt_time(us):
    if us is None:
        return "—"
    if us < 1000:
        return "%.1f µs" % us
    if us < 1e6:
        return "%.2f ms" % (us / 1e3)
    return "%.2f s" % (us / 1e6)


def busbw_gbs(nbytes, us, n=NRANKS):
    # Bus bandwidth as nccl-tests define it: algbw * 2(n-1)/n.
    return nbytes / (us * 1e-6) * (2.0 * (n - 1) / n) / 1e9


class Table:
    """The rows of the Markdown table, the verdicts given in them and, per ratio, its value in
    each repetition (harness.py, Note [interleaving]: such jobs ran next to each other)."""

    def __init__(self, summary, jobs, sizes):
        self.summary, self.jobs, self.sizes = summary, jobs, sizes
        self.rows, self.verdicts, self.paired = [], [], {}

    def get(self, c, key):
        return self.summary.get(c, {}).get(key, {}).get("median")

    def row(self, label, cells, check="", value="", target="", result=""):
        self.rows.append([label, *cells, check, value, target, result])

    def judge(self, value, ok):
        """The Result cell: n/a without a value, else the verdict (counted)."""
        if value is None:
            return "n/a"
        self.verdicts.append(ok)
        return "**%s**" % report.verdict(ok)

    def ratio(self, key, label, cells, check, num, den, spec, limit=None, target="(info)",
              op=operator.le):
        """A row of num / den, each (contender, metric), judged by op(ratio, limit) unless
        limit is None; the per-repetition ratios go to paired[key]."""
        r = self.get(*num) / self.get(*den) if self.get(*num) and self.get(*den) else None
        self.paired[key] = harness.paired(self.jobs, lambda rep: metrics(
            rep[num[0]], self.sizes)[num[1]] / metrics(rep[den[0]], self.sizes)[den[1]])
        self.row(label, cells, check, spec % r if r else "—", target if limit is None else
                 target % limit, "" if limit is None else self.judge(r, r is not None
                                                                     and op(r, limit)))


def size_and_batch_rows(t, sizes):
    for n in sizes:
        key = "single/%d" % n
        cells = ["—" if x is None else "%s (%.2f GB/s)" % (fmt_time(x), busbw_gbs(n, x))
                 for x in (t.get(c, key) for c in CONTENDERS)]
        t.ratio("bw_ratio/%d" % n, "allreduce %s" % report.size_label(n), cells,
                "fuseopt BW / MPI BW",
                ("mpi4py", key), ("fuseopt", key), "%.3f", *(
                    (TARGETS["bw_ratio_min"], "≥ %.2f", operator.ge) if n >= 256 * KIB else ()))
    fo, one = t.get("fuseopt", "batch/grouped_200"), t.get("mpi4py", "batch/one_3.2MB")
    sync = t.get("gloo", "batch/sync_200")
    t.row("200 x 16 KiB submitted together", [
        "%s (grouped_allreduce_async_ + wait)" % fmt_time(fo),
        "%s (200 Allreduce)" % fmt_time(t.get("mpi4py", "batch/separate_200")),
        "%s (200 sync all_reduce)" % fmt_time(sync)])
    t.row("200 x 16 KiB, other forms", [
        "%s (200 allreduce_async_ + wait)" % fmt_time(t.get("fuseopt", "batch/async_200")),
        "%s (one 3.2 MB Allreduce)" % fmt_time(one),
        "%s (async_op=True + wait)" % fmt_time(t.get("gloo", "batch/async_200"))])
    grouped = ("fuseopt", "batch/grouped_200")
    t.ratio("batch_fuseopt_over_mpi_one", "↳ fuseopt vs one raw 3.2 MB MPI allreduce",
            ["", "", ""], "fuseopt time / MPI time", grouped, ("mpi4py", "batch/one_3.2MB"),
            "%.2fx", TARGETS["batch_vs_one_mpi_max"], "≤ %.1fx")
    t.ratio("batch_gloo_sync_over_fuseopt", "↳ fuseopt vs 200 gloo calls", ["", "", ""],
            "gloo time / fuseopt time", ("gloo", "batch/sync_200"), grouped, "%.1fx",
            TARGETS["batch_vs_gloo_min"], "≥ %.0fx", operator.ge)
    t.ratio("per_tensor_over_grouped", "↳ fuseopt per tensor vs grouped", ["", "", ""],
            "200 async_ / grouped", ("fuseopt", "batch/async_200"), grouped, "%.2fx",
            TARGETS["per_tensor_over_grouped_max"], "≤ %.1fx")
    label = "MLP gradients, 8 tensors 33.6 MB, written before each call, %s"
    t.row(label % "in place", [fmt_time(t.get(c, "mlp/in_place")) for c in CONTENDERS],
          "(reference)")
    for variant, how in (("out_of_place", "out of place, results kept until the next call"),
                         ("out_of_place_dropped", "out of place, results dropped")):
        t.ratio(variant + "_over_in_place", label % how,
                [fmt_time(t.get(c, "mlp/" + variant)) for c in CONTENDERS],
                "fuseopt / its in-place", ("fuseopt", "mlp/" + variant),
                ("fuseopt", "mlp/in_place"), "%.2fx",
                TARGETS["out_of_place_over_in_place_max"], "≤ %.2fx")
    label = "MLP gradients, back to back (nothing written between calls), %s"
    t.row(label % "in place", [fmt_time(t.get(c, "mlp/in_place_back_to_back"))
                               for c in CONTENDERS], "(reference)")
    t.ratio("back_to_back_out_of_place_over_in_place", label % "out of place",
            [fmt_time(t.get(c, "mlp/out_of_place_back_to_back")) for c in CONTENDERS],
            "fuseopt / its in-place", ("fuseopt", "mlp/out_of_place_back_to_back"),
            ("fuseopt", "mlp/in_place_back_to_back"), "%.2fx")


def other_rows(t):
    lone, limit = [t.get(c, "lone") for c in CONTENDERS], TARGETS["lone_us_max"]
    t.row("lone 4 KiB after %d ms idle" % (IDLE_GAP_S * 1000), map(fmt_time, lone),
          "fuseopt median", fmt_time(lone[0]), "≤ %.0f µs" % limit,
          t.judge(lone[0] or None, lone[0] is not None and lone[0] <= limit))
    idle, limit = t.get("fuseopt", "idle_cpu_after_init"), TARGETS["idle_cpu_pct_max"]
    idle_s = "%.2f %%" % idle if idle is not None else "—"
    t.row("idle CPU, %d s sleep after init" % IDLE_SLEEP_S, [idle_s, "—", "—"],
          "% of one core (max rank)", idle_s, "< %.0f %%" % limit,
          t.judge(idle, idle is not None and idle < limit))
    idle = t.get("fuseopt", "idle_cpu_after_work")
    if idle is not None:
        t.row("idle CPU, %d s sleep after the workloads" % IDLE_SLEEP_S,
              ["%.2f %%" % idle, "—", "—"], "(info)")
    for count in HALF_COUNTS:
        for dtype in HALF_DTYPES:
            key = "half/%s/%d" % (dtype, count)
            label = "%s x %dK elements" % (dtype, count // 1024)
            cells = [fmt_time(t.get(c, key)) for c in CONTENDERS]
            if dtype == "float32":
                t.row(label, cells, "(reference)")
            else:
                t.ratio("fuseopt_%s_over_float32/%d" % (dtype, count), label, cells,
                        "fuseopt %s / its float32" % dtype, ("fuseopt", key),
                        ("fuseopt", "half/float32/%d" % count), "%.2fx",
                        TARGETS["half_over_float32_max"], "≤ %.1fx")


def build_table(summary, jobs, sizes):
    """The Markdown table's lines, with its verdicts and paired ratios (a Table)."""
    t = Table(summary, jobs, sizes)
    size_and_batch_rows(t, sizes)
    other_rows(t)
    t.lines = report.table(["Workload", "fuseopt", "mpi4py (raw MPI)", "gloo", "Check", "Value",
                            "Target", "Result"], "l" * 8, t.rows)
    return t


def plot(summary, sizes, path):
    plt = report.pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for c in CONTENDERS:
        ms = [(n, summary.get(c, {}).get("single/%d" % n)) for n in sizes]
        ms = [(n, busbw_gbs(n, m["median"]), [busbw_gbs(n, v) for v in m["per_job"]])
              for n, m in ms if m]
        if ms:
            ax.errorbar([n for n, _, _ in ms], [y for _, y, _ in ms], marker="o", capsize=3,
                        label=c, yerr=[[y - min(b) for _, y, b in ms],
                                       [max(b) - y for _, y, b in ms]])
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([report.size_label(s) for s in sizes])
    ax.set_xlabel("message size (float32, Sum)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title("allreduce, %d ranks on one machine (median over jobs; bars: min-max)" % NRANKS)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    report.save(plt, fig, path, 120)


def notes(args, jobs, summary):
    lone = [summary.get("fuseopt", {}).get(k, {}).get("median")
            for k in ("lone", "lone_rank0", "lone_fastest_rank")]
    out = ["Per job: median over iterations of the slowest rank's time (barrier before each "
           "iteration); cells: median over %d job(s) per contender, run interleaved in shuffled "
           "order. Bus bandwidth = bytes/time x 2(n-1)/n (n=%d). Ratios: of those medians."
           % (args.reps, NRANKS), report.load_note(jobs) + "."]
    if lone[0] is not None:
        out.append("fuseopt lone 4 KiB: slowest rank %s, rank 0 %s, fastest rank %s."
                   % tuple(map(fmt_time, lone)))
    return out


def driver_main(args):
    contenders = harness.parse_contenders(args, CONTENDERS)
    mpiexec, started = harness.start(args, contenders)
    sizes = settings(args.quick)["sizes"]
    jobs, _ = harness.run_jobs(args, contenders, lambda c, rep, pos: run_one(
        c, rep, pos, args, mpiexec))
    summary = summarize(jobs, sizes)
    t = build_table(summary, jobs, sizes)
    text = "\n".join(t.lines + [""] + ["- " + n for n in notes(args, jobs, summary)])
    meta = report.run_meta(
        args, started, mpiexec, ranks=NRANKS, sizes=sizes,
        statistic="per job: median over iterations of the slowest rank's time; "
                  "table: median over jobs", targets=TARGETS)
    return report.finish(
        args, "allreduce", "allreduce benchmark",
        {"meta": meta, "summary": summary, "paired_ratios": t.paired, "table_markdown": text,
         "jobs": jobs}, text, lambda path: plot(summary, sizes, path), t.verdicts, more=[
            "Per-repetition paired ratios: " + ", ".join(
                "%s=[%s]" % (k, ", ".join("%.3g" % r for r in v)) for k, v in t.paired.items())])


def main(argv=None):
    p = harness.parser(__doc__, "sizes up to 64 MiB, fewer iterations", 600, CONTENDERS,
                       variants=False)
    args = harness.parse(p, argv, CONTENDERS)
    return worker_main(args) if args.worker else driver_main(args)


if __name__ == "__main__":
    sys.exit(main())
