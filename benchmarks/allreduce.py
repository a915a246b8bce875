#!/usr/bin/env python
"""Allreduce benchmark: fuseopt against raw MPI (mpi4py) and torch.distributed/gloo.

Usage (from the repository root)::

    python benchmarks/allreduce.py [--quick] [--reps N] [--out benchmarks/results]

The driver (this file without ``--worker``) runs one ``mpiexec -n 2`` job per
contender and repetition, interleaved in a shuffled order each repetition
(harness.py, Note [interleaving]). Each job is this same file with ``--worker
CONTENDER``; it measures every workload and rank 0 prints one JSON line
(prefixed by a marker) to stdout.

Contenders run in separate processes on purpose: fuseopt's loop thread calls
MPI concurrently with the Python thread, so mpi4py and fuseopt must never
share a process.

Workloads (float32, op Sum, in place where the contender allows):
  a. one allreduce of 4 KiB .. 256 MiB (``--quick``: up to 64 MiB, fewer
     iterations); median per-op latency, a barrier before every iteration;
  b. 200 x 16 KiB submitted together (fuseopt: one grouped_allreduce_async_
     call, judged against the targets, and 200 allreduce_async_ then wait
     all; mpi4py: one 3.2 MB Allreduce and 200 separate ones; gloo: 200 sync
     all_reduce calls and 200 async_op=True calls then wait);
  c. a lone 4 KiB allreduce after a 20 ms idle gap (after a barrier);
  d. fuseopt only: CPU used by the process while both ranks sleep 3 s after
     init (the loop thread's idle cost), in % of one core;
  e. 16-bit floats: 256K and 4M elements as float32, float16 and bfloat16
     (fuseopt and gloo; raw MPI has no standard 16-bit float type, so its
     float32 row is the reference). Halving the bytes should halve the time:
     the target is float16/bfloat16 <= 0.6x fuseopt's float32 of the same count.

Per iteration every rank times the operation from its own start; the figure
used is the slowest rank's time (conservative: it includes any skew in how the
ranks left the barrier). Per job the median over iterations is taken, and the
table shows the median over jobs (repetitions). Raw per-rank samples go to
``<out>/allreduce.json``; ``<out>/allreduce.png`` plots bus bandwidth. Targets:
results/references.json.
"""
import argparse
import datetime
import json
import math
import os
import statistics
import sys
import tempfile
import time

import harness
import report

MARK = "@@FUSEOPT_ALLREDUCE_BENCH@@ "
CONTENDERS = ("fuseopt", "mpi4py", "gloo")
NRANKS = 2

KIB = 1024
MIB = 1024 * KIB
SIZES_FULL = [4 * KIB, 64 * KIB, 1 * MIB, 16 * MIB, 64 * MIB, 256 * MIB]
SIZES_QUICK = [s for s in SIZES_FULL if s <= 64 * MIB]

BATCH_COUNT = 200
BATCH_BYTES = 16 * KIB
LONE_BYTES = 4 * KIB
IDLE_GAP_S = 0.020
IDLE_SLEEP_S = 3.0
HALF_COUNTS = [256 * 1024, 4 * 1024 * 1024]
HALF_DTYPES = ("float32", "float16", "bfloat16")
TARGETS = report.references("allreduce")["targets"]


def settings(quick):
    """Iteration budgets; identical on every rank so the loops stay in step."""
    if quick:
        return dict(sizes=SIZES_QUICK, target_s=0.2, min_iters=3, max_iters=1000,
                    batch_warm=3, batch_reps=12, lone_warm=3, lone_reps=30,
                    half_counts=HALF_COUNTS, half_reps=10)
    return dict(sizes=SIZES_FULL, target_s=0.5, min_iters=5, max_iters=2000,
                batch_warm=5, batch_reps=40, lone_warm=3, lone_reps=30,
                half_counts=HALF_COUNTS, half_reps=30)


def warmup_iters(nbytes):
    # Deterministic (ranks must agree): many for small messages, 2 for big ones.
    return max(2, min(50, (64 * MIB) // nbytes))


def size_label(nbytes):
    if nbytes >= MIB:
        return "%d MiB" % (nbytes // MIB)
    return "%d KiB" % (nbytes // KIB)


# --------------------------------------------------------------------------
# Worker side: one class per contender, same small interface.
# --------------------------------------------------------------------------

class Contender:
    """The interface; buffers are numpy arrays unless wrap() says otherwise."""

    def wrap(self, arr):
        return arr

    def close(self):
        pass


class FuseoptContender(Contender):
    name = "fuseopt"

    def __init__(self):
        import numpy as np
        import fuseopt
        self.np, self.fo = np, fuseopt
        fuseopt.init()
        self.rank, self.size = fuseopt.rank(), fuseopt.size()
        self._gathers = 0

    def versions(self):
        return {"fuseopt": getattr(self.fo, "__version__", "?"), "settings": self.fo.settings()}

    def barrier(self):
        self.fo.barrier()

    def allreduce_(self, buf, name):
        self.fo.allreduce_async_(buf, name=name, op=self.fo.Sum).wait()

    def typed_buffer(self, count, dtype):
        if dtype == "bfloat16":
            import ml_dtypes  # comes with TensorFlow; numpy has no bfloat16
            return self.np.ones(count, ml_dtypes.bfloat16)
        return self.np.ones(count, dtype)

    def batch_variants(self):
        return {"grouped_200": self._batch_grouped, "async_200": self._batch_async}

    def _batch_grouped(self, bufs, names, _flat):
        self.fo.grouped_allreduce_async_(bufs, names, op=self.fo.Sum).wait()

    def _batch_async(self, bufs, names, _flat):
        handles = [self.fo.allreduce_async_(b, name=n, op=self.fo.Sum)
                   for b, n in zip(bufs, names)]
        for h in handles:
            h.wait()

    def agree_max(self, value):
        out = self.fo.allreduce(self.np.array([value], dtype=self.np.float64),
                                name="bench.agree_max", op=self.fo.Max)
        return float(out[0])

    def gather(self, values):
        self._gathers += 1
        arr = self.np.asarray(values, dtype=self.np.float64).reshape(1, -1)
        out = self.fo.allgather(arr, name="bench.gather.%d" % self._gathers)
        return [list(map(float, row)) for row in out]

    def close(self):
        self.fo.shutdown()


class Mpi4pyContender(Contender):
    name = "mpi4py"

    def __init__(self):
        import numpy as np
        import mpi4py
        mpi4py.rc.thread_level = "serialized"
        from mpi4py import MPI
        self.np, self.MPI = np, MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()

    def versions(self):
        return {"mpi4py": __import__("mpi4py").__version__,
                "mpi_library": self.MPI.Get_library_version().strip().splitlines()[0]}

    def barrier(self):
        self.comm.Barrier()

    def allreduce_(self, buf, name):
        self.comm.Allreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)

    def typed_buffer(self, count, dtype):
        return self.np.ones(count, dtype) if dtype == "float32" else None

    def batch_variants(self):
        return {"one_3.2MB": self._batch_one, "separate_200": self._batch_separate}

    def _batch_one(self, _bufs, _names, flat):
        self.comm.Allreduce(self.MPI.IN_PLACE, flat, op=self.MPI.SUM)

    def _batch_separate(self, bufs, _names, _flat):
        for b in bufs:
            self.comm.Allreduce(self.MPI.IN_PLACE, b, op=self.MPI.SUM)

    def agree_max(self, value):
        return float(self.comm.allreduce(float(value), op=self.MPI.MAX))

    def gather(self, values):
        return [list(map(float, v)) for v in self.comm.allgather(list(values))]


class GlooContender(Contender):
    name = "gloo"

    def __init__(self):
        import numpy as np
        import torch
        import torch.distributed as dist
        torch.set_num_threads(1)
        self.np, self.torch, self.dist = np, torch, dist
        self.rank = int(os.environ["PMI_RANK"])
        self.size = int(os.environ["PMI_SIZE"])
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        if "MASTER_PORT" not in os.environ:
            raise RuntimeError("gloo worker needs MASTER_PORT (the driver sets it)")
        dist.init_process_group("gloo", init_method="env://", rank=self.rank,
                                world_size=self.size,
                                timeout=datetime.timedelta(seconds=300))

    def versions(self):
        return {"torch": self.torch.__version__}

    def wrap(self, arr):
        return self.torch.from_numpy(arr)  # shares memory: in place

    def barrier(self):
        self.dist.barrier()

    def allreduce_(self, buf, name):
        self.dist.all_reduce(buf, op=self.dist.ReduceOp.SUM)

    def typed_buffer(self, count, dtype):
        return self.torch.ones(count, dtype=getattr(self.torch, dtype))

    def batch_variants(self):
        return {"sync_200": self._batch_sync, "async_200": self._batch_async}

    def _batch_sync(self, bufs, _names, _flat):
        for b in bufs:
            self.dist.all_reduce(b, op=self.dist.ReduceOp.SUM)

    def _batch_async(self, bufs, _names, _flat):
        works = [self.dist.all_reduce(b, op=self.dist.ReduceOp.SUM, async_op=True)
                 for b in bufs]
        for w in works:
            w.wait()

    def agree_max(self, value):
        t = self.torch.tensor([float(value)], dtype=self.torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return float(t[0])

    def gather(self, values):
        out = [None] * self.size
        self.dist.all_gather_object(out, list(map(float, values)))
        return out

    def close(self):
        self.dist.destroy_process_group()


WORKER_CLASSES = {c.name: c for c in (FuseoptContender, Mpi4pyContender, GlooContender)}


def _log(c, msg):
    if c.rank == 0:
        sys.stderr.write("[%s] %s\n" % (c.name, msg))
        sys.stderr.flush()


def _timed(c, fn, iters, before=None):
    """Per-iteration seconds on this rank; barrier (then ``before``) first."""
    samples = []
    perf = time.perf_counter
    for _ in range(iters):
        c.barrier()
        if before is not None:
            before()
        t0 = perf()
        fn()
        samples.append(perf() - t0)
    return samples


def _record(c, samples, **extra):
    """Collects every rank's samples (outside timing), in microseconds."""
    per_rank = c.gather(samples)
    rec = {"samples_us": [[round(s * 1e6, 1) for s in row] for row in per_rank]}
    rec.update(extra)
    return rec


def _measure_idle(c, label):
    import resource
    c.barrier()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    time.sleep(IDLE_SLEEP_S)
    cpu1, wall1 = time.process_time(), time.perf_counter()
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    pct = 100.0 * (cpu1 - cpu0) / (wall1 - wall0)
    ctx_switches = (ru1.ru_nvcsw - ru0.ru_nvcsw) + (ru1.ru_nivcsw - ru0.ru_nivcsw)
    per_rank = c.gather([pct, ctx_switches / (wall1 - wall0)])
    c.barrier()
    _log(c, "idle CPU (%s): %s %% of one core" % (label, [round(r[0], 3) for r in per_rank]))
    return {"cpu_pct": [r[0] for r in per_rank],
            "context_switches_per_s": [r[1] for r in per_rank],
            "sleep_s": IDLE_SLEEP_S}


def _verify(c, buf, wrapped, name):
    expected = c.size * (c.size + 1) / 2.0
    buf.fill(c.rank + 1)
    c.allreduce_(wrapped, name)
    ok = bool((buf == expected).all())
    buf.fill(0)
    return ok


def worker_main(contender, quick):
    cfg = settings(quick)
    c = WORKER_CLASSES[contender]()
    if c.size != NRANKS:
        raise SystemExit("expected %d ranks, got %d" % (NRANKS, c.size))
    out = {"contender": contender, "size": c.size, "quick": quick, "versions": c.versions(),
           "workloads": {}}
    w = out["workloads"]
    # (d) idle CPU right after init (fuseopt only: the others have no loop thread).
    if contender == "fuseopt":
        c.barrier()
        w["idle_cpu_after_init"] = _measure_idle(c, "after init")
    w["single"] = _single_sizes(c, cfg)
    w["half_precision"] = _half_precision(c, cfg)
    w["batch_200x16KiB"] = _batch(c, cfg)
    w["lone_4KiB_after_gap"] = _lone(c, cfg)
    # (d) again, once the response cache holds every name used above.
    if contender == "fuseopt":
        w["idle_cpu_after_work"] = _measure_idle(c, "after workloads")
    c.close()
    if c.rank == 0:
        sys.stdout.write(MARK + json.dumps(out) + "\n")
        sys.stdout.flush()


def _single_sizes(c, cfg):
    """(a) one allreduce per size."""
    return {str(nbytes): _one_size(c, cfg, nbytes) for nbytes in cfg["sizes"]}


def _one_size(c, cfg, nbytes):
    import numpy as np
    buf = np.zeros(nbytes // 4, dtype=np.float32)
    wrapped = c.wrap(buf)
    name = "bench.single.%d" % nbytes
    ok = _verify(c, buf, wrapped, name)
    n_warm = warmup_iters(nbytes)
    t0 = time.perf_counter()
    warm = _timed(c, lambda: c.allreduce_(wrapped, name), n_warm)
    # Budget by wall time per iteration, barrier included.
    est = c.agree_max((time.perf_counter() - t0) / n_warm)
    # A noisy warm-up must not leave a small size with a handful of samples.
    floor = max(cfg["min_iters"], n_warm)
    wanted = math.ceil(cfg["target_s"] / max(est, 1e-7))
    iters = int(min(cfg["max_iters"], max(floor, wanted)))
    t0 = time.perf_counter()
    samples = _timed(c, lambda: c.allreduce_(wrapped, name), iters)
    elapsed = time.perf_counter() - t0
    rec = _record(c, samples, bytes=nbytes, iters=iters, verified=ok,
                  warmup_us=[round(s * 1e6, 1) for s in warm])
    _log(c, "single %-8s iters=%-5d median(rank0)=%.1f us  (%.2f s)  verified=%s"
         % (size_label(nbytes), iters, 1e6 * statistics.median(samples), elapsed, ok))
    return rec


def _half_precision(c, cfg):
    """(e) 16-bit floats against float32 of the same element count. The float32 row of
    the second count runs after 16-bit ones on purpose: a vector kernel that leaves the
    upper ymm state dirty slows every later SSE loop (once: float32 at 4M elements 2.7 ->
    13 ms), and shows here."""
    half = {}
    for count in cfg["half_counts"]:
        for dtype in HALF_DTYPES:
            rec = _one_half(c, cfg, count, dtype)
            if rec is not None:
                half["%s/%d" % (dtype, count)] = rec
    return half


def _one_half(c, cfg, count, dtype):
    buf = c.typed_buffer(count, dtype)
    if buf is None:
        return None
    name = "bench.half.%s.%d" % (dtype, count)
    _timed(c, lambda: c.allreduce_(buf, name), 3)
    samples = _timed(c, lambda: c.allreduce_(buf, name), cfg["half_reps"])
    rec = _record(c, samples, count=count, dtype=dtype)
    _log(c, "%s x %d: median(rank0)=%.1f us" % (dtype, count, 1e6 * statistics.median(samples)))
    return rec


def _batch(c, cfg):
    """(b) 200 x 16 KiB submitted together, in each form the contender offers."""
    import numpy as np
    flat = np.zeros(BATCH_COUNT * BATCH_BYTES // 4, dtype=np.float32)
    # Separate arrays for the per-tensor contenders (views of one buffer
    # would hand them contiguous memory they could not get in real use).
    bufs = [np.zeros(BATCH_BYTES // 4, dtype=np.float32) for _ in range(BATCH_COUNT)]
    wrapped = [c.wrap(b) for b in bufs]
    flat_w = c.wrap(flat)
    names = ["bench.batch.%03d" % i for i in range(BATCH_COUNT)]
    batch = {}
    for variant, fn in c.batch_variants().items():
        expected = c.size * (c.size + 1) / 2.0
        for b in bufs:
            b.fill(c.rank + 1)
        flat.fill(c.rank + 1)
        fn(wrapped, names, flat_w)
        touched = flat if variant == "one_3.2MB" else np.concatenate(bufs)
        ok = bool((touched == expected).all())
        for b in bufs:
            b.fill(0)
        flat.fill(0)
        run = lambda: fn(wrapped, names, flat_w)  # noqa: E731
        _timed(c, run, cfg["batch_warm"])
        samples = _timed(c, run, cfg["batch_reps"])
        batch[variant] = _record(c, samples, count=BATCH_COUNT, bytes_each=BATCH_BYTES,
                                 verified=ok)
        _log(c, "batch %-13s median(rank0)=%.1f us  verified=%s"
             % (variant, 1e6 * statistics.median(samples), ok))
    return batch


def _lone(c, cfg):
    """(c) a lone 4 KiB allreduce after an idle gap."""
    import numpy as np
    buf = np.zeros(LONE_BYTES // 4, dtype=np.float32)
    wrapped = c.wrap(buf)
    name = "bench.lone.%d" % LONE_BYTES
    ok = _verify(c, buf, wrapped, name)
    gap = lambda: time.sleep(IDLE_GAP_S)  # noqa: E731
    _timed(c, lambda: c.allreduce_(wrapped, name), cfg["lone_warm"], before=gap)
    samples = _timed(c, lambda: c.allreduce_(wrapped, name), cfg["lone_reps"], before=gap)
    rec = _record(c, samples, bytes=LONE_BYTES, gap_s=IDLE_GAP_S, verified=ok)
    _log(c, "lone 4 KiB after %d ms idle: median(rank0)=%.1f us"
         % (IDLE_GAP_S * 1000, 1e6 * statistics.median(samples)))
    return rec


# --------------------------------------------------------------------------
# Driver side.
# --------------------------------------------------------------------------

def run_job(mpiexec, contender, quick, timeout):
    """One job (harness.py, Note [one job]): (rank 0's result, wall seconds, stderr)."""
    cmd = [mpiexec, "-n", str(NRANKS), sys.executable, os.path.abspath(__file__),
           "--worker", contender] + (["--quick"] if quick else [])
    env = harness.base_env(dict(MASTER_ADDR="127.0.0.1",
                                MASTER_PORT=str(harness.free_ports(1)[0])))
    with tempfile.TemporaryDirectory(prefix="allreduce_") as tmp:
        stderr_path = os.path.join(tmp, "stderr")
        t0 = time.perf_counter()
        stdout = harness.run_simple(cmd, env, timeout, "%s job" % contender, stderr_path)
        wall = time.perf_counter() - t0
        stderr = harness.tail(stderr_path, None)
    results = [line[len(MARK):] for line in stdout.splitlines() if line.startswith(MARK)]
    if len(results) != 1:
        raise harness.JobFailed("%s job gave %d result lines: %s\n--- stdout (tail) ---\n"
                                "%s\n--- stderr (tail) ---\n%s" % (
                                    contender, len(results), " ".join(cmd), stdout[-2000:],
                                    stderr[-4000:]))
    return json.loads(results[0]), wall, stderr


def wrong_results(result):
    """The workloads whose result was not the expected sum."""
    w = result["workloads"]
    bad = [k for k, v in w.get("single", {}).items() if not v.get("verified", True)]
    bad += ["batch/" + k for k, v in w.get("batch_200x16KiB", {}).items()
            if not v.get("verified", True)]
    if not w["lone_4KiB_after_gap"].get("verified", True):
        bad.append("lone")
    return bad


def run_all(args, mpiexec, contenders):
    """Every job (harness.py, Note [interleaving]); stops at a failed or wrong one."""
    jobs = []
    for rep, pos, contender in harness.interleaved(contenders, args.reps, args.seed):
        load_before = os.getloadavg()[0]
        sys.stderr.write("[rep %d/%d] %s (load %.2f) ...\n"
                         % (rep + 1, args.reps, contender, load_before))
        sys.stderr.flush()
        try:
            result, wall, stderr = run_job(mpiexec, contender, args.quick, args.timeout)
        except harness.JobFailed as e:
            sys.stderr.write("\nBENCHMARK JOB FAILED\n%s\n" % e)
            raise SystemExit(2)
        if args.verbose:
            sys.stderr.write(stderr)
        bad = wrong_results(result)
        if bad:
            sys.stderr.write("\nWRONG RESULTS from %s: %s\n%s\n" % (contender, bad, stderr))
            raise SystemExit(3)
        sys.stderr.write("[rep %d/%d] %s done in %.1f s\n" % (rep + 1, args.reps, contender, wall))
        # The machine may be shared: keep how busy it was next to the numbers.
        jobs.append({"rep": rep, "position": pos, "contender": contender,
                     "wall_s": round(wall, 3), "loadavg_1m_before": load_before,
                     "loadavg_1m_after": os.getloadavg()[0], "result": result,
                     "stderr": stderr[-8000:]})
    return jobs


def slowest_rank_median_us(rec):
    """Median over iterations of the slowest rank's time (harness.py, Note [slowest rank])."""
    return statistics.median(harness.slowest(rec["samples_us"]))


def rank0_median_us(rec):
    return statistics.median(rec["samples_us"][0])


def fastest_rank_median_us(rec):
    """Median of the fastest rank's time: the op's latency net of barrier skew."""
    return statistics.median(min(vals) for vals in zip(*rec["samples_us"]))


def summarize(jobs, sizes):
    """{contender: {metric: {"median": x, "per_job": [...]}}} over repetitions."""
    per = {}

    def add(contender, key, value):
        per.setdefault(contender, {}).setdefault(key, []).append(value)

    for job in jobs:
        c, w = job["contender"], job["result"]["workloads"]
        for nbytes in sizes:
            rec = w["single"].get(str(nbytes))
            if rec:
                add(c, "single/%d" % nbytes, slowest_rank_median_us(rec))
                add(c, "single_rank0/%d" % nbytes, rank0_median_us(rec))
        for variant, rec in w["batch_200x16KiB"].items():
            add(c, "batch/%s" % variant, slowest_rank_median_us(rec))
            add(c, "batch_rank0/%s" % variant, rank0_median_us(rec))
        for key, rec in w.get("half_precision", {}).items():
            add(c, "half/" + key, slowest_rank_median_us(rec))
        rec = w["lone_4KiB_after_gap"]
        add(c, "lone", slowest_rank_median_us(rec))
        add(c, "lone_rank0", rank0_median_us(rec))
        add(c, "lone_fastest_rank", fastest_rank_median_us(rec))
        for key in ("idle_cpu_after_init", "idle_cpu_after_work"):
            if key in w:
                add(c, key, max(w[key]["cpu_pct"]))
    return {c: {k: {"median": statistics.median(v), "per_job": v} for k, v in m.items()}
            for c, m in per.items()}


def paired_ratios(jobs, sizes):
    """Per-repetition ratios behind the targets (jobs of one repetition ran next to each
    other, harness.py, Note [interleaving])."""
    def ratio(num, den):
        return harness.paired(jobs, lambda rep: slowest_rank_median_us(num(rep))
                              / slowest_rank_median_us(den(rep)))

    def single(c, n):
        return lambda rep: rep[c]["result"]["workloads"]["single"][str(n)]

    def batch(c, v):
        return lambda rep: rep[c]["result"]["workloads"]["batch_200x16KiB"][v]

    def half(dtype, n):
        return lambda rep: \
            rep["fuseopt"]["result"]["workloads"]["half_precision"]["%s/%d" % (dtype, n)]

    paired = {"bw_ratio/%d" % n: ratio(single("mpi4py", n), single("fuseopt", n))
              for n in sizes}
    paired["batch_fuseopt_over_mpi_one"] = ratio(batch("fuseopt", "grouped_200"),
                                                 batch("mpi4py", "one_3.2MB"))
    paired["batch_gloo_sync_over_fuseopt"] = ratio(batch("gloo", "sync_200"),
                                                   batch("fuseopt", "grouped_200"))
    for n in HALF_COUNTS:
        for dtype in HALF_DTYPES[1:]:
            paired["fuseopt_%s_over_float32/%d" % (dtype, n)] = ratio(half(dtype, n),
                                                                      half("float32", n))
    return paired


def fmt_time(us):
    if us is None or (isinstance(us, float) and math.isnan(us)):
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
    """The rows of the table and the verdicts given in them."""

    def __init__(self, summary):
        self.summary, self.rows, self.verdicts = summary, [], []

    def get(self, c, key):
        m = self.summary.get(c, {}).get(key)
        return None if m is None else m["median"]

    def verdict(self, ok):
        self.verdicts.append(ok)
        return "**%s**" % report.verdict(ok)

    def row(self, *cells):
        self.rows.append("| %s |" % " | ".join(cells))


def size_rows(t, sizes):
    for nbytes in sizes:
        key = "single/%d" % nbytes
        cells = []
        for c in CONTENDERS:
            us = t.get(c, key)
            cells.append("—" if us is None else "%s (%.2f GB/s)" % (fmt_time(us),
                                                                  busbw_gbs(nbytes, us)))
        fo, mp = t.get("fuseopt", key), t.get("mpi4py", key)
        ratio = (mp / fo) if fo and mp else None
        if nbytes >= MIB:
            target = "≥ %.2f" % TARGETS["bw_ratio_min"]
            res = t.verdict(ratio is not None and ratio >= TARGETS["bw_ratio_min"]) \
                if ratio else "n/a"
        else:
            target, res = "(info)", ""
        t.row("allreduce %s" % size_label(nbytes), *cells, "fuseopt BW / MPI BW",
              "%.3f" % ratio if ratio else "—", target, res)


def batch_rows(t):
    fo_b = t.get("fuseopt", "batch/grouped_200")
    mp_one = t.get("mpi4py", "batch/one_3.2MB")
    gl_sync = t.get("gloo", "batch/sync_200")
    t.row("200 x 16 KiB submitted together",
          "%s (grouped_allreduce_async_ + wait)" % fmt_time(fo_b),
          "%s (200 Allreduce)" % fmt_time(t.get("mpi4py", "batch/separate_200")),
          "%s (200 sync all_reduce)" % fmt_time(gl_sync), "", "", "", "")
    t.row("200 x 16 KiB, other forms",
          "%s (200 allreduce_async_ + wait)" % fmt_time(t.get("fuseopt", "batch/async_200")),
          "%s (one 3.2 MB Allreduce)" % fmt_time(mp_one),
          "%s (async_op=True + wait)" % fmt_time(t.get("gloo", "batch/async_200")),
          "", "", "", "")
    r1 = fo_b / mp_one if fo_b and mp_one else None
    limit = TARGETS["batch_vs_one_mpi_max"]
    t.row("↳ fuseopt vs one raw 3.2 MB MPI allreduce", "", "", "", "fuseopt time / MPI time",
          "%.2fx" % r1 if r1 else "—", "≤ %.1fx" % limit,
          t.verdict(r1 is not None and r1 <= limit) if r1 else "n/a")
    r2 = gl_sync / fo_b if fo_b and gl_sync else None
    limit = TARGETS["batch_vs_gloo_min"]
    t.row("↳ fuseopt vs 200 gloo calls", "", "", "", "gloo time / fuseopt time",
          "%.1fx" % r2 if r2 else "—", "≥ %.0fx" % limit,
          t.verdict(r2 is not None and r2 >= limit) if r2 else "n/a")


def lone_and_idle_rows(t):
    lone = [t.get(c, "lone") for c in CONTENDERS]
    t.row("lone 4 KiB after %d ms idle" % (IDLE_GAP_S * 1000), *map(fmt_time, lone),
          "fuseopt median", fmt_time(lone[0]), "≤ %.0f µs" % TARGETS["lone_us_max"],
          t.verdict(lone[0] <= TARGETS["lone_us_max"]) if lone[0] else "n/a")
    idle = t.get("fuseopt", "idle_cpu_after_init")
    idle_s = "%.2f %%" % idle if idle is not None else "—"
    t.row("idle CPU, %d s sleep after init" % IDLE_SLEEP_S, idle_s, "—", "—",
          "% of one core (max rank)", idle_s, "< %.0f %%" % TARGETS["idle_cpu_pct_max"],
          t.verdict(idle < TARGETS["idle_cpu_pct_max"]) if idle is not None else "n/a")
    idle2 = t.get("fuseopt", "idle_cpu_after_work")
    if idle2 is not None:
        t.row("idle CPU, %d s sleep after the workloads" % IDLE_SLEEP_S, "%.2f %%" % idle2,
              "—", "—", "(info)", "", "", "")


def half_rows(t):
    limit = TARGETS["half_over_float32_max"]
    for count in HALF_COUNTS:
        f32 = t.get("fuseopt", "half/float32/%d" % count)
        for dtype in HALF_DTYPES:
            label = "%s x %dK elements" % (dtype, count // 1024)
            cells = [fmt_time(t.get(c, "half/%s/%d" % (dtype, count))) for c in CONTENDERS]
            if dtype == "float32":
                t.row(label, *cells, "(reference)", "", "", "")
                continue
            fo = t.get("fuseopt", "half/%s/%d" % (dtype, count))
            ratio = fo / f32 if fo and f32 else None
            t.row(label, *cells, "fuseopt %s / its float32" % dtype,
                  "%.2fx" % ratio if ratio else "—", "≤ %.1fx" % limit,
                  t.verdict(ratio <= limit) if ratio else "n/a")


def build_table(summary, sizes):
    t = Table(summary)
    size_rows(t, sizes)
    batch_rows(t)
    lone_and_idle_rows(t)
    half_rows(t)
    header = ("| Workload | fuseopt | mpi4py (raw MPI) | gloo | Check | Value | Target | Result |\n"
              "|---|---|---|---|---|---|---|---|")
    return header + "\n" + "\n".join(t.rows), t.verdicts


def plot(summary, sizes, path):
    plt = report.pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for c in CONTENDERS:
        xs, ys, lo, hi = [], [], [], []
        for nbytes in sizes:
            m = summary.get(c, {}).get("single/%d" % nbytes)
            if not m:
                continue
            xs.append(nbytes)
            ys.append(busbw_gbs(nbytes, m["median"]))
            bws = [busbw_gbs(nbytes, v) for v in m["per_job"]]
            lo.append(ys[-1] - min(bws))
            hi.append(max(bws) - ys[-1])
        if xs:
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=c)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([size_label(s) for s in sizes])
    ax.set_xlabel("message size (float32, Sum)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title("allreduce, %d ranks on one machine (median over jobs; bars: min-max)" % NRANKS)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    report.save(plt, fig, path, 120)


def notes(args, jobs, summary):
    lone = {k: summary.get("fuseopt", {}).get(k, {}).get("median")
            for k in ("lone", "lone_rank0", "lone_fastest_rank")}
    out = [
        "Per job: median over iterations of the slowest rank's time (barrier before each "
        "iteration); cells: median over %d job(s) per contender, run interleaved in shuffled "
        "order. Bus bandwidth = bytes/time x 2(n-1)/n (n=%d). Ratios: of those medians."
        % (args.reps, NRANKS),
        report.load_note(jobs) + ".",
    ]
    if lone["lone"] is not None:
        out.append("fuseopt lone 4 KiB: slowest rank %s, rank 0 %s, fastest rank %s."
                   % tuple(fmt_time(lone[k]) for k in ("lone", "lone_rank0", "lone_fastest_rank")))
    return out


def driver_main(args):
    mpiexec = harness.find_mpiexec()
    os.makedirs(args.out, exist_ok=True)
    contenders = harness.parse_contenders(args.contenders, CONTENDERS)
    sizes = settings(args.quick)["sizes"]
    started = time.time()
    sys.stderr.write("mpiexec: %s; %d reps x %s; quick=%s\n"
                     % (mpiexec, args.reps, contenders, args.quick))
    jobs = run_all(args, mpiexec, contenders)
    summary = summarize(jobs, sizes)
    table, verdicts = build_table(summary, sizes)
    table = table + "\n\n" + "\n".join("- " + n for n in notes(args, jobs, summary))
    paired = paired_ratios(jobs, sizes)
    meta = report.run_meta(
        args, started, mpiexec, ranks=NRANKS, sizes=sizes,
        statistic="per job: median over iterations of the slowest rank's time; "
                  "table: median over jobs", targets=TARGETS)
    # allreduce.md has the readable table.
    paths = report.write_outputs(
        args.out, "allreduce", "allreduce benchmark",
        {"meta": meta, "summary": summary, "paired_ratios": paired, "table_markdown": table,
         "jobs": jobs}, table, lambda path: plot(summary, sizes, path))
    fails = report.print_outcome(table, paths, verdicts, more=[
        "Per-repetition paired ratios: " + ", ".join(
            "%s=[%s]" % (k, ", ".join("%.3g" % r for r in v)) for k, v in paired.items())])
    return 1 if (args.strict and fails) else 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    harness.add_common_args(p, "sizes up to 64 MiB, fewer iterations", 600, CONTENDERS)
    p.add_argument("--verbose", action="store_true", help="echo each job's stderr")
    p.add_argument("--worker", choices=CONTENDERS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker_main(args.worker, args.quick)
        return 0
    if args.reps < 1:
        p.error("--reps must be >= 1")
    return driver_main(args)


if __name__ == "__main__":
    sys.exit(main())
