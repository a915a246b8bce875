#!/usr/bin/env python
"""Keras training-step benchmark: fuseopt's DistributedOptimizer in ``model.fit``
against MultiWorkerMirroredStrategy (MWMS), on 2 local workers.

Usage (from the repository root)::

    python benchmarks/tf_train.py [--quick] [--reps N] [--out benchmarks/results]
        [--inter-op N] [--mwms-impl RING|AUTO] [--no-probe-mwms-fit] [--no-comm-floor]
        [--fuseopt-variant NAME:FUSEOPT_VAR=VALUE[,...]]... [--timeout S]

Workload: MLP 1024-2048-2048-1024-10 (Dense + ReLU, linear logits, ~8.4M
parameters in 8 tensors), sparse categorical cross-entropy (from logits), SGD
lr 0.01, batch 64 per worker, one fixed synthetic batch per process (seeded by
rank, served by ``tf.data.Dataset.from_tensors(...).repeat()``), weights seeded
identically everywhere. Every process runs with
``tf.config.threading.set_intra_op_parallelism_threads(1)`` and
``set_inter_op_parallelism_threads(--inter-op, default 1)``; no XLA
(``jit_compile=False``, which is also what Keras picks on a CPU-only machine).

Contenders, each a fresh set of processes (harness.py, Note [one job]):

  single       1 process, plain ``model.fit`` (scaling-efficiency baseline);
  unconnected  2 independent single processes at the same time, shaking hands
               with the driver after warm-up so that their timed steps start
               together: the compute-only baseline for 2 workers (harness.py,
               Note [unconnected]);
  fuseopt      ``mpiexec -n 2``; ``model.fit`` with
               ``hvd.DistributedOptimizer(SGD)`` and
               ``BroadcastGlobalVariablesCallback(0)``;
  mwms         2 processes with TF_CONFIG (two 127.0.0.1 ports),
               ``tf.distribute.MultiWorkerMirroredStrategy`` (CPU, collective
               implementation ``--mwms-impl``). NOT model.fit: Keras 3 fit
               under MWMS fails here (a symbolic build reduces PerReplica values,
               keras-team/keras#20585; the train step reduces scalar logs over
               axis 0). So MWMS runs a custom loop: a ``tf.function`` step that
               calls ``strategy.run`` (GradientTape, loss scaled by the global
               batch 128, ``optimizer.apply_gradients``, whose Keras TF backend
               all-reduces the gradients) on per-worker batches of 64 from
               ``strategy.distribute_datasets_from_function``. The same model,
               data, seeds and step count, so its final weights must equal
               fuseopt's. ``--probe-mwms-fit`` (default on) runs ``model.fit``
               under MWMS once and records the error it raises.

Step time: fit contenders use a Keras callback (``on_train_batch_begin`` ->
``on_train_batch_end``; a callback with ``on_train_batch_end`` makes Keras
dispatch synchronously and convert the logs to floats, so the interval covers
the whole step). MWMS: the same interval around one call of the compiled step
plus reading its loss. The first warm-up steps (tracing) are skipped. 2-worker
jobs: per step the slowest worker, then the median over steps (Note [slowest
rank]). Cells: median over ``--reps`` jobs, contenders interleaved (Note
[interleaving]).

Also per rep, ``commfloor``: allreduce only, no TensorFlow (mpi4py on the same
MPI vs fuseopt, the MLP's 8 gradient buffers), the floor under the
communication part of a fuseopt step. A job that fails or times out is
reported and left out of the medians; the other jobs go on. The report puts a
CAUTION above the verdicts when the run looks invalid (load above the core
count, the compute-only baseline slower than fuseopt, per-rep spread > 1.5x).

Overhead = 2-worker step - unconnected step. Scaling efficiency = 2-worker
throughput / (2 x single throughput) = single step / 2-worker step. Reference
figures and targets: results/references.json.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

import harness
import report

NRANKS = 2
BATCH = 64
LR = 0.01
DIMS = (1024, 2048, 2048, 1024, 10)
BASE_CONTENDERS = ("single", "unconnected", "fuseopt", "mwms")
REF = report.references("tf_train")
TARGETS = REF["targets"]


def steps_for(quick):
    """(warm-up, timed) steps."""
    return (5, 20) if quick else (5, 40)


# --------------------------------------------------------------------------
# Worker side.
# --------------------------------------------------------------------------

def _setup_tf(inter_op):
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(inter_op)
    return tf


def _build_model(keras):
    keras.utils.set_random_seed(1234)
    layers = [keras.Input((DIMS[0],))]
    for d in DIMS[1:-1]:
        layers.append(keras.layers.Dense(d, activation="relu"))
    layers.append(keras.layers.Dense(DIMS[-1]))
    return keras.Sequential(layers)


def _data(rank):
    import numpy as np
    rng = np.random.default_rng(1000 + rank)
    x = rng.standard_normal((BATCH, DIMS[0]), dtype=np.float32)
    y = rng.integers(0, DIMS[-1], BATCH).astype(np.int32)
    return x, y


def _checksum(model):
    import numpy as np
    ws = model.get_weights()
    return [float(sum(np.sum(w.astype(np.float64)) for w in ws)),
            float(sum(np.sum(w.astype(np.float64) ** 2) for w in ws))]


def _make_timer(keras, warm, timed, hs):
    pc = time.perf_counter

    class StepTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.rec = {"step": [], "t_start": []}
            self.t0 = None
            self.filler = 0
            self.t_begin = self.t_end = None
            self.cpu_begin = self.cpu_end = None

        def on_train_batch_begin(self, batch, logs=None):
            if batch == warm:
                if hs is not None:     # unconnected: start together
                    hs.ready()
                self.t_begin = pc()
                self.cpu_begin = time.process_time()
            self.t0 = pc()

        def on_train_batch_end(self, batch, logs=None):
            t1 = pc()
            if warm <= batch < warm + timed:
                self.rec["step"].append((t1 - self.t0) * 1e3)
                self.rec["t_start"].append(self.t0)
                if batch == warm + timed - 1:
                    self.t_end = t1
                    self.cpu_end = time.process_time()
                    if hs is not None:
                        hs.done()
                    else:
                        self.model.stop_training = True
            elif batch >= warm + timed:
                self.filler += 1
            if hs is not None and batch >= warm + timed - 1 and hs.stopped():
                self.model.stop_training = True

    return StepTimer()


def _dataset(tf, rank):
    x, y = _data(rank)
    return tf.data.Dataset.from_tensors((x, y)).repeat()


def _header(kind, rank, tf, keras, args):
    """What every worker's result file starts with."""
    return {"kind": kind, "rank": rank, "size": 1 if kind == "single" else NRANKS,
            "pid": os.getpid(), "tf": tf.__version__, "keras": keras.__version__,
            "inter_op": args.inter_op,
            "threads": [tf.config.threading.get_intra_op_parallelism_threads(),
                        tf.config.threading.get_inter_op_parallelism_threads()]}


def worker_fit(args):
    """single / fuseopt: plain model.fit with the step-timer callback."""
    kind = args.worker
    tf = _setup_tf(args.inter_op)
    import keras
    rank, size, info, hvd = args.proc_index, 1, {}, None
    if kind == "fuseopt":
        import fuseopt
        import fuseopt.tensorflow.keras as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
        info["fuseopt_settings"] = fuseopt.settings()
        if size != NRANKS:
            raise SystemExit("fuseopt worker expects %d ranks, got %d" % (NRANKS, size))
    warm, timed = steps_for(args.quick)
    hs = harness.Handshake(args.timeout) if args.handshake else None
    model = _build_model(keras)
    opt = keras.optimizers.SGD(LR)
    if hvd is not None:
        opt = hvd.DistributedOptimizer(opt)
    model.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=False)
    timer = _make_timer(keras, warm, timed, hs)
    callbacks = ([hvd.callbacks.BroadcastGlobalVariablesCallback(0)] if hvd else []) + [timer]
    # Unconnected processes keep training until the driver says STOP; others
    # stop after their timed steps (stop_training; steps_per_epoch is the cap).
    steps = warm + timed + (1000000 if hs is not None else 0)
    t0 = time.perf_counter()
    hist = model.fit(_dataset(tf, rank), epochs=1, steps_per_epoch=steps, verbose=0,
                     callbacks=callbacks)
    wall = time.perf_counter() - t0
    out = dict(_header(kind, rank, tf, keras, args), size=size,
               jit_compile=bool(model.jit_compile), env=harness.fuseopt_env(), info=info,
               params=int(model.count_params()), tensors=len(model.trainable_variables),
               warmup=warm, timed=timed,
               samples_ms={"step": [round(v, 4) for v in timer.rec["step"]]},
               t_start=timer.rec["t_start"], t_begin=timer.t_begin, t_end=timer.t_end,
               cpu_ms_per_step=(timer.cpu_end - timer.cpu_begin) * 1e3 / timed,
               filler_steps=timer.filler, fit_wall_s=wall,
               loss_last=float(hist.history["loss"][-1]), checksum=_checksum(model),
               steps_trained=warm + timed + timer.filler)
    if hvd is not None:
        hvd.shutdown()
    harness.write_result(args.result_dir, kind, rank, out)
    return 0


def worker_mwms(args):
    """mwms: custom tf.function loop under MultiWorkerMirroredStrategy (or, with
    --mwms-fit, a model.fit attempt whose error is recorded)."""
    idx = args.proc_index
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": ["127.0.0.1:%s" % p for p in args.ports.split(",")]},
        "task": {"type": "worker", "index": idx}})
    tf = _setup_tf(args.inter_op)
    impl = getattr(tf.distribute.experimental.CommunicationImplementation, args.mwms_impl)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(implementation=impl))
    import keras
    if strategy.num_replicas_in_sync != NRANKS:
        raise SystemExit("MWMS has %d replicas, expected %d"
                         % (strategy.num_replicas_in_sync, NRANKS))
    warm, timed = steps_for(args.quick)
    out = dict(_header("mwms", idx, tf, keras, args), mwms_impl=args.mwms_impl, warmup=warm,
               timed=timed)
    if args.mwms_fit:
        _mwms_fit_probe(tf, keras, strategy, idx, out)
        harness.write_result(args.result_dir, "mwms_fit", idx, out)
        sys.stdout.flush()
        os._exit(0)     # a failed collective program may leave threads behind
    out.update(_mwms_loop(tf, keras, strategy, warm, timed))
    harness.write_result(args.result_dir, "mwms", idx, out)
    return 0


def _mwms_fit_probe(tf, keras, strategy, idx, out):
    with strategy.scope():
        model = _build_model(keras)
        model.compile(optimizer=keras.optimizers.SGD(LR),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    try:
        model.fit(_dataset(tf, idx), epochs=1, steps_per_epoch=3, verbose=0)
        out.update(fit_ok=True, error=None)
    except Exception as e:  # noqa: BLE001  (the point is to record it)
        msg = str(e)
        out.update(fit_ok=False, error_type=type(e).__name__,
                   error=msg[:400] + (" [...] " + msg[-300:] if len(msg) > 700 else msg[400:]))


def _mwms_loop(tf, keras, strategy, warm, timed):
    """The custom loop: warm-up, then the timed steps; their record."""
    with strategy.scope():
        model = _build_model(keras)
        opt = keras.optimizers.SGD(LR)
        opt.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    global_batch = BATCH * NRANKS
    it = iter(strategy.distribute_datasets_from_function(
        lambda ctx: _dataset(tf, ctx.input_pipeline_id)))

    @tf.function
    def train_step(iterator):
        def step_fn(x, y):
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                loss = tf.nn.compute_average_loss(loss_fn(y, logits),
                                                  global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        per_replica = strategy.run(step_fn, args=next(iterator))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    pc = time.perf_counter
    steps, starts = [], []
    t0w = pc()
    for i in range(warm + timed):
        if i == warm:
            t_begin = pc()
            cpu_begin = time.process_time()
        t0 = pc()
        loss = float(train_step(it))
        t1 = pc()
        if i >= warm:
            steps.append((t1 - t0) * 1e3)
            starts.append(t0)
    t_end = pc()
    return dict(cpu_ms_per_step=(time.process_time() - cpu_begin) * 1e3 / timed,
                params=int(model.count_params()), tensors=len(model.trainable_variables),
                samples_ms={"step": [round(v, 4) for v in steps]},
                t_start=starts, t_begin=t_begin, t_end=t_end, filler_steps=0,
                loop_wall_s=t_end - t0w, loss_last=loss, checksum=_checksum(model),
                steps_trained=warm + timed,
                data_path="strategy.distribute_datasets_from_function, 64 per worker")


def worker_commfloor(args):
    """allreduce only (no TF): the MLP's 8 gradient-sized float32 buffers
    (33.6 MB), raw mpi4py (8 calls; one fused buffer) and fuseopt (8 async,
    this process's FUSEOPT_* settings). Barrier before each iteration; per
    iteration the slowest rank."""
    import numpy as np
    from mpi4py import MPI
    import fuseopt
    import fuseopt.ops as fops
    fuseopt.init()
    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(comm.rank)
    arrs = []
    for i in range(len(DIMS) - 1):
        arrs.append(rng.standard_normal((DIMS[i], DIMS[i + 1]), dtype=np.float32))
        arrs.append(rng.standard_normal((DIMS[i + 1],), dtype=np.float32))
    flat = np.concatenate([a.ravel() for a in arrs])
    out = np.empty_like(flat)
    outs = [a.copy() for a in arrs]

    def mpi8():
        for a, o in zip(arrs, outs):
            comm.Allreduce(a, o)

    def mpi8_inplace():
        for o in outs:
            comm.Allreduce(MPI.IN_PLACE, o)

    def mpi1():
        comm.Allreduce(flat, out)

    def fo8():
        hs = [fops.allreduce_async(a, name="floor.%d" % k) for k, a in enumerate(arrs)]
        for h in hs:
            h.wait()

    forms = {"mpi4py_8_calls": mpi8, "mpi4py_8_in_place": mpi8_inplace,
             "mpi4py_1_fused": mpi1, "fuseopt_8_async": fo8}
    times = {k: [] for k in forms}
    iters = 6 if args.quick else 10
    for it in range(iters + 2):             # interleaved forms; 2 warm-up rounds
        for k, f in forms.items():
            comm.Barrier()
            t0 = time.perf_counter()
            f()
            dt = time.perf_counter() - t0
            slowest = comm.allreduce(dt, op=MPI.MAX)
            if it >= 2:
                times[k].append(slowest * 1e3)
    out_d = {"kind": "commfloor", "rank": comm.rank, "bytes": int(flat.nbytes),
             "samples_ms": {k: [round(v, 3) for v in vs] for k, vs in times.items()},
             "fuseopt_settings": fuseopt.settings()}
    fuseopt.shutdown()
    harness.write_result(args.result_dir, "commfloor", comm.rank, out_d)
    return 0


# --------------------------------------------------------------------------
# Driver side.
# --------------------------------------------------------------------------

def _env(extra=None):
    return harness.base_env(dict({"TF_CPP_MIN_LOG_LEVEL": "1"}, **(extra or {})),
                            drop=("TF_CONFIG",))


def _worker_cmd(kind, args, result_dir, extra=()):
    return [sys.executable, os.path.abspath(__file__), "--worker", kind,
            "--result-dir", result_dir, "--timeout", str(args.timeout),
            "--inter-op", str(args.inter_op), "--mwms-impl", args.mwms_impl] \
        + (["--quick"] if args.quick else []) + list(extra)


def run_job(contender, variants, mpiexec, args):
    """One job of a contender: fresh processes; returns the per-process results."""
    tmp = tempfile.mkdtemp(prefix="tf_train_")
    stderr_path = os.path.join(tmp, "stderr")
    try:
        if contender == "single":
            harness.run_simple(_worker_cmd("single", args, tmp), _env(), args.timeout,
                               contender, stderr_path)
            return harness.read_results(tmp, "single", 1)
        if contender == "unconnected":
            cmds = [_worker_cmd("single", args, tmp, ["--handshake", "--proc-index", str(i)])
                    for i in range(NRANKS)]
            harness.run_unconnected(cmds, _env(), args.timeout, tmp)
            return harness.read_results(tmp, "single", NRANKS)
        if contender in ("mwms", "mwms_fit"):
            ports = ",".join(str(p) for p in harness.free_ports(NRANKS))
            extra = ["--ports", ports] + (["--mwms-fit"] if contender == "mwms_fit" else [])
            cmds = [_worker_cmd("mwms", args, tmp, extra + ["--proc-index", str(i)])
                    for i in range(NRANKS)]
            harness.run_pair(cmds, _env(), args.timeout, contender, tmp)
            return harness.read_results(tmp, contender, NRANKS)
        kind = "commfloor" if contender == "commfloor" else "fuseopt"   # or a variant
        cmd = [mpiexec, "-n", str(NRANKS)] + _worker_cmd(kind, args, tmp)
        harness.run_simple(cmd, _env(variants.get(contender, {})), args.timeout, contender,
                           stderr_path)
        return harness.read_results(tmp, kind, NRANKS)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def job_value(contender, results):
    med = statistics.median
    if contender == "commfloor":
        return {k: med(v) for k, v in results[0]["samples_ms"].items()}
    if contender == "single":
        v = {"step_ms": med(results[0]["samples_ms"]["step"])}
    elif contender == "unconnected":
        v = harness.unconnected_figures(results)
    else:
        v = _two_worker_step(results)
    if all("cpu_ms_per_step" in r for r in results):
        # process CPU time (all threads) per timed step vs wall time per step
        v["cpu_ms_per_step"] = statistics.mean(r["cpu_ms_per_step"] for r in results)
        v["wall_ms_per_step"] = statistics.mean((r["t_end"] - r["t_begin"]) * 1e3 / r["timed"]
                                                for r in results)
    return v


def _two_worker_step(results):
    med = statistics.median
    steps = [r["samples_ms"]["step"] for r in results]
    slowest = harness.slowest(steps)
    v = {"step_ms": med(slowest), "per_rank_ms": [med(s) for s in steps],
         "max_step_ms": max(slowest), "steps_over_1s": sum(1 for x in slowest if x > 1000),
         "n_steps": len(slowest)}
    return v


def verify(contender, results):
    """2-worker jobs: the workers' final weights (harness.same_weights)."""
    if contender in ("single", "unconnected", "commfloor"):
        return None
    return harness.same_weights(contender, [r["checksum"] for r in results])


def summarize(jobs, contenders):
    summary = {}
    for c in contenders:
        vals = [j["values"] for j in jobs if j["contender"] == c]
        if not vals:
            continue
        if c == "commfloor":
            summary[c] = {k: statistics.median(v[k] for v in vals) for k in vals[0]}
            summary[c]["per_rep_ms"] = {k: [round(v[k], 2) for v in vals] for k in vals[0]}
            continue
        s = {"step_ms": statistics.median(v["step_ms"] for v in vals),
             "per_rep_ms": [round(v["step_ms"], 3) for v in vals]}
        cpu = [v["cpu_ms_per_step"] / v["wall_ms_per_step"] for v in vals
               if v.get("wall_ms_per_step")]
        if cpu:
            s["cpu_busy_fraction"] = statistics.median(cpu)
        summary[c] = s
    return summary


def same_rep_ratios(jobs, num, den):
    """num's step / den's step per repetition (Note [interleaving])."""
    return harness.paired(jobs, lambda r: round(r[num]["values"]["step_ms"]
                                                / r[den]["values"]["step_ms"], 3))


def table(s, contenders, args):
    single = s.get("single", {}).get("step_ms")
    unc = s.get("unconnected", {}).get("step_ms")
    mw = s.get("mwms", {}).get("step_ms")
    warm, timed = steps_for(args.quick)
    lines = ["MLP %s (%.1fM params), batch %d/worker, SGD lr %g, %d warm-up + %d timed steps, "
             "intra_op 1 / inter_op %d threads per process, %d rep(s).\n"
             % ("-".join(map(str, DIMS)), n_params() / 1e6, BATCH, LR, warm, timed,
                args.inter_op, args.reps),
             "| contender | median step ms | steps/s | samples/s | overhead over unconnected (ms) "
             "| scaling efficiency | samples/s ÷ MWMS | per-rep step ms |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for c in contenders:
        if c not in s or c == "commfloor":
            continue
        step = s[c]["step_ms"]
        workers = 1 if c == "single" else NRANKS
        over = step - unc if unc is not None and c not in ("single", "unconnected") else None
        eff = single / step if single is not None and c != "single" else None
        label = c + (" (custom strategy.run loop, not fit)" if c == "mwms" else "") \
            + (" (compute only)" if c == "unconnected" else "")
        lines.append("| %s | %.2f | %.1f | %.0f | %s | %s | %s | %s |" % (
            label, step, 1e3 / step, 1e3 / step * BATCH * workers, report.fmt(over),
            report.fmt(eff * 100 if eff is not None else None, "%.0f%%"),
            report.fmt((mw / step) * (workers / NRANKS) if mw is not None else None, "%.2fx"),
            ", ".join("%.1f" % v for v in s[c]["per_rep_ms"])))
    ref = REF["reference_ms"]
    lines.append("| reference (earlier, this machine) | single %g, unconnected %g, MWMS %g-%g "
                 "| | | | | | |" % (ref["single"], ref["unconnected"], *ref["mwms"]))
    return lines + [""]


def suspicions(s, jobs):
    """Why the verdicts of this run may not be trustworthy, if they may not."""
    single = s.get("single", {}).get("step_ms")
    unc = s.get("unconnected", {}).get("step_ms")
    loads = [j["loadavg_1m_before"] for j in jobs] or [0.0]
    suspect = []
    if statistics.median(loads) > (os.cpu_count() or 2) + 0.5:
        suspect.append("median 1-minute load %.1f on %d cores: other work shared the cores"
                       % (statistics.median(loads), os.cpu_count() or 0))
    if "fuseopt" in s and unc is not None and s["fuseopt"]["step_ms"] < unc:
        suspect.append("the compute-only baseline (unconnected) is slower than fuseopt, which "
                       "computes the same and communicates too")
    if single is not None and unc is not None and single / unc < 0.75:
        suspect.append("unconnected ran at %.0f%% of single speed (cores taken by others)"
                       % (100 * single / unc))
    spread = [c for c in ("single", "unconnected", "fuseopt", "mwms") if c in s
              and len(s[c]["per_rep_ms"]) > 1
              and max(s[c]["per_rep_ms"]) > 1.5 * min(s[c]["per_rep_ms"])]
    if spread:
        suspect.append("per-rep step times differ by more than 1.5x for %s" % ", ".join(spread))
    return suspect


def _same_rep(paired):
    return "same-rep ratios %s, median %.2fx" % (
        ", ".join("%.2fx" % p for p in paired),
        statistics.median(paired) if paired else float("nan"))


def target_lines(s, jobs, contenders, targets, verdicts):
    """The verdicts (plain fuseopt only); fills targets and verdicts."""
    lines, unc, mw = [], s.get("unconnected", {}).get("step_ms"), s.get("mwms", {}).get("step_ms")
    if "fuseopt" in s and unc is not None:
        f, target = s["fuseopt"]["step_ms"], TARGETS["step_vs_unconnected_max"]
        ratio = f / unc
        ok = ratio <= target
        paired = same_rep_ratios(jobs, "fuseopt", "unconnected")
        verdicts.append(ok)
        targets["fuseopt_vs_unconnected"] = {"fuseopt_ms": f, "unconnected_ms": unc,
                                             "ratio": ratio, "target": target, "pass": ok,
                                             "paired_ratios": paired}
        lines.append("- **%s** target: fuseopt 2-rank fit step %.2f ms <= %.1f x unconnected "
                     "%.2f ms = %.2f ms (ratio %.2fx; %s) -> **%s**" % (
                         report.verdict(ok), f, target, unc, target * unc, ratio,
                         _same_rep(paired), report.verdict(ok)))
    if "fuseopt" in s and mw is not None:
        f, target = s["fuseopt"]["step_ms"], TARGETS["throughput_vs_mwms_min"]
        ratio = mw / f
        ok = ratio >= target
        paired = same_rep_ratios(jobs, "mwms", "fuseopt")
        verdicts.append(ok)
        targets["fuseopt_vs_mwms"] = {"fuseopt_ms": f, "mwms_ms": mw, "throughput_ratio": ratio,
                                      "target": target, "pass": ok, "paired_ratios": paired}
        lines.append("- **%s** target: fuseopt throughput / MWMS throughput = %.2fx >= %.1fx "
                     "(MWMS %.2f ms vs fuseopt %.2f ms; %s) -> **%s**" % (
                         report.verdict(ok), ratio, target, mw, f, _same_rep(paired),
                         report.verdict(ok)))
    if "fuseopt" in contenders and "fuseopt" not in s:
        verdicts.append(False)
        lines.append("- **FAIL** targets: no fuseopt job completed (see the failures below).")
    return lines


def fuseopt_notes(s, contenders, failures):
    """Notes on the failures, the compute-only ceiling, CPU use and the allreduce-only job."""
    single = s.get("single", {}).get("step_ms")
    unc = s.get("unconnected", {}).get("step_ms")
    notes = []
    for fl in failures:
        first = " ".join(fl["error"].split("--- ")[0].split())[:240]
        notes.append("**job failed** (not in the medians): %s, rep %d, after %.0f s: %s"
                     % (fl["contender"], fl["rep"] + 1, fl["wall_s"], first))
    if single is not None and unc is not None:
        notes.append("compute-only ceiling: unconnected efficiency (single / unconnected) = "
                     "%.0f%%." % (100 * single / unc))
    busy = [(c, s[c]["cpu_busy_fraction"]) for c in contenders
            if c in s and "cpu_busy_fraction" in s[c]]
    if busy:
        notes.append("process CPU time / wall time over the timed steps (per process, all "
                     "threads; 100%% = one core busy all the time): %s."
                     % ", ".join("%s %.0f%%" % (c, 100 * b) for c, b in busy))
    if "commfloor" in s:
        cf = s["commfloor"]
        notes.append("allreduce only, no TensorFlow (%s; the same 8 gradient buffers, "
                     "%.1f MB, 2 ranks, median of the slowest rank): raw MPI %.2f ms as 8 "
                     "Allreduce calls (%.2f ms in place), %.2f ms as one fused buffer; fuseopt "
                     "(8 async + wait) %.2f ms. A fuseopt fit step is about compute + its "
                     "allreduce: the allreduce runs after the whole backward pass (in the "
                     "Keras optimizer's apply), so nothing overlaps it."
                     % ("mpi4py on this MPICH", n_params() * 4 / 1e6, cf["mpi4py_8_calls"],
                        cf["mpi4py_8_in_place"], cf["mpi4py_1_fused"], cf["fuseopt_8_async"]))
    return notes


def run_notes(s, jobs, contenders, args, mwms_fit_probe):
    """Notes on the variants, the contenders' set-up and the run itself."""
    notes = ["%s = fuseopt with %s (reported, not judged)."
             % (c, " ".join("%s=%s" % kv for kv in args.variants[c].items()))
             for c in contenders if c.startswith("fuseopt:")]
    if "fuseopt" in s and args.inter_op == 1:
        notes.append("inter_op=1 works with fuseopt: the blocking allreduce inside the "
                     "tf.numpy_function holds the only inter-op thread, but everything else "
                     "in the step depends on it, and fuseopt's own thread does the transfer; "
                     "no hang.")
    for c in contenders:
        js = [j for j in jobs if j["contender"] == c and "max_step_ms" in j["values"]]
        if js:
            notes.append("%s: timed steps longer than 1 s: %d of %d (longest %.1f s; the "
                         "median is robust to them, the wall time is not)." % (
                             c, sum(j["values"]["steps_over_1s"] for j in js),
                             sum(j["values"]["n_steps"] for j in js),
                             max(j["values"]["max_step_ms"] for j in js) / 1e3))
    if "mwms" in contenders:
        notes.append("MWMS runs a custom training loop (tf.function step around "
                     "strategy.run; GradientTape + optimizer.apply_gradients; global batch 128 "
                     "= 64 per worker from distribute_datasets_from_function; collective "
                     "implementation %s), because Keras %s model.fit under MWMS fails "
                     "(keras-team/keras#20585 and the scalar-log reduction over axis 0)."
                     % (args.mwms_impl, keras_version()))
    if mwms_fit_probe is not None:
        notes.append("MWMS model.fit probe (run once here): %s" % mwms_fit_probe)
    notes.append("Per job: median over timed steps of the slowest worker's step (2-worker jobs); "
                 "unconnected: mean of the two processes' medians. Cells: median over jobs, "
                 "contenders interleaved in a shuffled order per rep; paired = same rep.")
    ov = [j["values"].get("timed_window_overlap") for j in jobs if j["contender"] == "unconnected"]
    if ov:
        notes.append("unconnected timed-window overlap: %s." % ", ".join("%.0f%%" % (100 * o)
                                                                       for o in ov))
    notes.append(report.load_note(jobs) + ".")
    fo = [j["checksums"] for j in jobs if j["contender"] == "fuseopt"]
    mc = [j["checksums"] for j in jobs if j["contender"] == "mwms"]
    if fo and mc:
        rel = abs(fo[0][1] - mc[0][1]) / max(1e-12, abs(mc[0][1]))
        notes.append("workers agree in every 2-worker job; final sum(w^2) fuseopt vs MWMS "
                     "differ by %.1e (relative): same training." % rel)
    return notes


def build_report(summary, jobs, contenders, args, mwms_fit_probe, failures=()):
    verdicts, targets = [], {}
    lines = table(summary, contenders, args)
    suspect = suspicions(summary, jobs)
    if suspect:
        lines.append("- **CAUTION, the verdicts below are not trustworthy**: " + "; ".join(suspect)
                     + ". Rerun on a quiet machine.")
    targets["suspect"] = suspect
    lines += target_lines(summary, jobs, contenders, targets, verdicts)
    notes = fuseopt_notes(summary, contenders, failures) \
        + run_notes(summary, jobs, contenders, args, mwms_fit_probe)
    return "\n".join(lines + [""] + ["- " + n for n in notes]), verdicts, targets


def n_params():
    return sum(DIMS[i] * DIMS[i + 1] + DIMS[i + 1] for i in range(len(DIMS) - 1))


def keras_version():
    try:
        from importlib.metadata import version
        return version("keras")
    except Exception:  # noqa: BLE001
        return "3"


def plot(summary, contenders, path):
    plt = report.pyplot()
    names = [c for c in contenders if c in summary and c != "commfloor"]
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    report.step_bars(ax, names, [summary[c]["step_ms"] for c in names], "mwms",
                     [summary[c]["per_rep_ms"] for c in names])
    if "unconnected" in summary:
        k = TARGETS["step_vs_unconnected_max"]
        t = k * summary["unconnected"]["step_ms"]
        ax.axhline(t, color="green", ls="--", lw=1,
                   label="%.1f x unconnected (%.1f ms)" % (k, t))
    if "mwms" in summary:
        k = TARGETS["throughput_vs_mwms_min"]
        t = summary["mwms"]["step_ms"] / k
        ax.axhline(t, color="purple", ls=":", lw=1, label="MWMS / %.1f (%.1f ms)" % (k, t))
    ax.legend(fontsize=8, loc="upper left")
    ax.set_xticklabels([n if n != "mwms" else "mwms\n(custom loop)" for n in names],
                       rotation=15, fontsize=8)
    ax.set_title("Keras MLP 1024-2048-2048-1024-10, batch %d/worker, 2 workers "
                 "(dots: reps)" % BATCH, fontsize=10)
    report.save(plt, fig, path, 110)


def _short_error(msg):
    """One line; a PerReplica value's numpy dump cut out."""
    msg = " ".join(msg.split())
    msg = re.sub(r"numpy= ?array\(.*?\)>", "numpy=...>", msg)
    return msg[:300]


def probe_mwms_fit(args, mpiexec):
    """Runs model.fit under MWMS once: (what happened, in a line; the raw results)."""
    sys.stderr.write("[probe] MWMS model.fit ... ")
    sys.stderr.flush()
    t0 = time.perf_counter()
    raw = None
    try:
        raw = run_job("mwms_fit", {}, mpiexec, args)
        r = raw[0]
        said = ("model.fit succeeded" if r["fit_ok"] else
                "model.fit raised %s: %s" % (r["error_type"], _short_error(r["error"])))
    except harness.JobFailed as e:
        said = "the probe job itself failed: %s" % " ".join(str(e).split())[:300]
    sys.stderr.write("%.1f s: %s\n" % (time.perf_counter() - t0, said[:200]))
    return said, raw


def run_one(c, rep, pos, args, mpiexec, jobs, failures):
    """One job; to jobs, or to failures (a hang is a result too: the other jobs go on)."""
    load = os.getloadavg()[0]
    sys.stderr.write("[rep %d/%d] %-14s (load %.2f) ... " % (rep + 1, args.reps, c, load))
    sys.stderr.flush()
    t0 = time.perf_counter()
    try:
        results = run_job(c, args.variants, mpiexec, args)
        values = job_value(c, results)
        checks = verify(c, results)
    except harness.JobFailed as e:
        wall = time.perf_counter() - t0
        sys.stderr.write("FAILED after %.1f s\n%s\n" % (wall, str(e)[-3000:]))
        failures.append({"rep": rep, "position": pos, "contender": c, "wall_s": round(wall, 1),
                         "loadavg_1m_before": load, "error": str(e)[-6000:]})
        return
    wall = time.perf_counter() - t0
    if c == "commfloor":
        said = ", ".join("%s %.2f ms" % kv for kv in values.items())
    else:
        said = "%.2f ms" % values["step_ms"]
    sys.stderr.write("%.1f s: %s\n" % (wall, said))
    jobs.append({"rep": rep, "position": pos, "contender": c, "quick": args.quick,
                 "env": args.variants.get(c, {}), "wall_s": round(wall, 2),
                 "loadavg_1m_before": load, "loadavg_1m_after": os.getloadavg()[0],
                 "values": values, "checksums": checks, "results": results})


def driver_main(args):
    mpiexec = harness.find_mpiexec()
    os.makedirs(args.out, exist_ok=True)
    base = harness.parse_contenders(args.contenders, BASE_CONTENDERS)
    args.variants = harness.parse_variants(args.fuseopt_variant,
                                           lambda k: k.startswith("FUSEOPT_"))
    contenders = base + list(args.variants) + (["commfloor"] if args.comm_floor else [])
    started = time.time()
    sys.stderr.write("mpiexec: %s; %d reps x %s; quick=%s; inter_op=%d\n"
                     % (mpiexec, args.reps, contenders, args.quick, args.inter_op))
    probe = (None, None)
    if args.probe_mwms_fit and "mwms" in base:
        probe = probe_mwms_fit(args, mpiexec)
    jobs, failures = [], []
    for rep, pos, c in harness.interleaved(contenders, args.reps, args.seed):
        run_one(c, rep, pos, args, mpiexec, jobs, failures)
    meta = report.run_meta(
        args, started, mpiexec, workers=NRANKS, steps=steps_for(args.quick),
        batch_per_worker=BATCH, lr=LR, dims=DIMS, params=n_params(), inter_op=args.inter_op,
        intra_op=1, mwms_impl=args.mwms_impl,
        mwms_mode="custom loop (tf.function + strategy.run), not model.fit",
        contenders=contenders, variants=args.variants, reference_ms=REF["reference_ms"])
    return write_outputs(args, meta, contenders, jobs, failures,
                         {"summary": probe[0], "results": probe[1]})


def write_outputs(args, meta, contenders, jobs, failures, probe):
    summary = summarize(jobs, contenders)
    text, verdicts, targets = build_report(summary, jobs, contenders, args, probe["summary"],
                                           failures)
    paths = report.write_outputs(
        args.out, "tf_train", "Keras training-step benchmark",
        {"meta": meta, "summary": summary, "targets": targets, "failures": failures,
         "mwms_fit_probe": probe, "table_markdown": text, "jobs": jobs}, text,
        lambda path: plot(summary, contenders, path))
    fails = report.print_outcome(text, paths, verdicts, " (CAUTION: suspect run, see above)"
                                 if targets.get("suspect") else "")
    return 1 if (args.strict and fails) else 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    harness.add_common_args(p, "fewer timed steps (20 instead of 40)", 300, BASE_CONTENDERS)
    p.add_argument("--inter-op", type=int, default=1, help="inter-op threads per process")
    p.add_argument("--mwms-impl", default="RING", choices=("RING", "AUTO"))
    p.add_argument("--probe-mwms-fit", dest="probe_mwms_fit", action="store_true",
                   default=True, help="try model.fit under MWMS once and record the error "
                   "(default)")
    p.add_argument("--no-probe-mwms-fit", dest="probe_mwms_fit", action="store_false")
    p.add_argument("--no-comm-floor", dest="comm_floor", action="store_false", default=True,
                   help="skip the allreduce-only job (raw MPI vs fuseopt, no TF) per rep")
    p.add_argument("--fuseopt-variant", action="append", default=[],
                   help="NAME:FUSEOPT_VAR=VALUE[,...]: an extra fuseopt contender")
    harness.add_worker_args(p, ("single", "fuseopt", "mwms", "commfloor"))
    p.add_argument("--ports", help=argparse.SUPPRESS)
    p.add_argument("--mwms-fit", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker == "mwms":
        return worker_mwms(args)
    if args.worker == "commfloor":
        return worker_commfloor(args)
    if args.worker:
        return worker_fit(args)
    if args.reps < 1:
        p.error("--reps must be >= 1")
    return driver_main(args)


if __name__ == "__main__":
    sys.exit(main())
