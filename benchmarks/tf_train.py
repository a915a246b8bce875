#!/usr/bin/env python
"""Keras training-step benchmark: fuseopt's DistributedOptimizer in ``model.fit``
against MultiWorkerMirroredStrategy (MWMS), on 2 local workers.

    python benchmarks/tf_train.py [--quick] [--reps N] [--contenders LIST] [--out DIR]
        [--inter-op N] [--no-probe-mwms-fit]
        [--fuseopt-variant NAME:FUSEOPT_VAR=VALUE[,...]]...

The workload, the contenders (and why MWMS runs a custom loop, not fit), how a step is
timed and the figures: docs/benchmarks.md, "What each script measures"; the method shared
with the other drivers: harness.py's notes. A job that fails or times out is reported and
left out of the medians; the other jobs go on.
"""
import argparse
import json
import os
import re
import statistics
import sys
import time

import harness
import report

NRANKS = harness.NRANKS
BATCH = 64
LR = 0.01
DIMS = (1024, 2048, 2048, 1024, 10)
N_PARAMS = sum(a * b + b for a, b in zip(DIMS, DIMS[1:]))
MWMS_IMPL = "RING"  # MWMS's collective implementation
BASE_CONTENDERS = ("single", "unconnected", "fuseopt", "mwms")
# contender -> (worker, how harness.run_job starts it)
KINDS = {"single": ("single", "single"), "unconnected": ("single", "unconnected"),
         "fuseopt": ("fuseopt", "mpi"), "mwms": ("mwms", "pair"), "mwms_fit": ("mwms", "pair")}
REF = report.references("tf_train")
TARGETS = REF["targets"]


def steps_for(quick):
    """(warm-up, timed) steps."""
    return (5, 20) if quick else (5, 40)


# ---- worker side ----------------------------------------------------------------------

def _setup(args):
    """TensorFlow with 1 intra-op thread and --inter-op inter-op threads, Keras, and what
    every worker's result starts with."""
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(args.inter_op)
    import keras
    warm, timed = steps_for(args.quick)
    return tf, keras, {
        "kind": args.worker, "rank": args.proc_index, "pid": os.getpid(), "tf": tf.__version__,
        "keras": keras.__version__, "inter_op": args.inter_op, "warmup": warm, "timed": timed,
        "threads": [tf.config.threading.get_intra_op_parallelism_threads(),
                    tf.config.threading.get_inter_op_parallelism_threads()]}


def _build_model(keras):
    keras.utils.set_random_seed(1234)
    layers = [keras.Input((DIMS[0],))]
    layers += [keras.layers.Dense(d, activation="relu") for d in DIMS[1:-1]]
    return keras.Sequential(layers + [keras.layers.Dense(DIMS[-1])])


def _dataset(tf, rank):
    """One fixed synthetic batch per process, seeded by rank."""
    import numpy as np
    rng = np.random.default_rng(1000 + rank)
    x = rng.standard_normal((BATCH, DIMS[0]), dtype=np.float32)
    y = rng.integers(0, DIMS[-1], BATCH).astype(np.int32)
    return tf.data.Dataset.from_tensors((x, y)).repeat()


def _loss(keras, **kw):
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, **kw)


def _checksum(model):
    import numpy as np
    ws = [w.astype(np.float64) for w in model.get_weights()]
    return [float(sum(np.sum(w) for w in ws)), float(sum(np.sum(w ** 2) for w in ws))]


class Steps:
    """Times steps begin(i) .. end(i): warm-up steps, then the timed ones. With a handshake
    (unconnected, Note [unconnected]) the timed steps start at GO, and after them the
    process keeps training until STOP."""

    def __init__(self, warm, timed, hs=None):
        self.warm, self.last, self.hs = warm, warm + timed - 1, hs
        self.step, self.t_start, self.filler = [], [], 0

    def begin(self, i):
        if i == self.warm:
            if self.hs is not None:
                self.hs.ready()
            self.t_begin, self.cpu_begin = time.perf_counter(), time.process_time()
        self.t0 = time.perf_counter()

    def end(self, i):
        """True once the process should stop training."""
        t1 = time.perf_counter()
        if self.warm <= i <= self.last:
            self.step.append((t1 - self.t0) * 1e3)
            self.t_start.append(self.t0)
            if i == self.last:
                self.t_end, self.cpu_end = t1, time.process_time()
                if self.hs is None:
                    return True
                self.hs.done()
        elif i > self.last:
            self.filler += 1
        return self.hs is not None and i >= self.last and self.hs.stopped()

    def record(self):
        timed = self.last + 1 - self.warm
        return dict(samples_ms={"step": [round(v, 4) for v in self.step]},
                    t_start=self.t_start, t_begin=self.t_begin, t_end=self.t_end,
                    cpu_ms_per_step=(self.cpu_end - self.cpu_begin) * 1e3 / timed,
                    filler_steps=self.filler, steps_trained=self.last + 1 + self.filler)


def worker_fit(args):
    """single / fuseopt: plain model.fit, timed by a callback."""
    tf, keras, out = _setup(args)
    rank, size, hvd, out["info"] = args.proc_index, 1, None, {}
    if args.worker == "fuseopt":
        import fuseopt
        import fuseopt.tensorflow.keras as hvd
        hvd.init()
        rank, size, out["info"] = hvd.rank(), hvd.size(), {"fuseopt_settings": fuseopt.settings()}
        if size != NRANKS:
            raise SystemExit("fuseopt worker expects %d ranks, got %d" % (NRANKS, size))
    steps = Steps(out["warmup"], out["timed"], harness.Handshake(args) if args.handshake else None)

    class StepTimer(keras.callbacks.Callback):
        # A callback with on_train_batch_end makes Keras dispatch synchronously and
        # convert the logs to floats, so begin -> end covers the whole step.
        def on_train_batch_begin(self, batch, logs=None):
            steps.begin(batch)

        def on_train_batch_end(self, batch, logs=None):
            if steps.end(batch):
                self.model.stop_training = True

    model = _build_model(keras)
    opt = keras.optimizers.SGD(LR)
    model.compile(optimizer=hvd.DistributedOptimizer(opt) if hvd else opt, loss=_loss(keras),
                  jit_compile=False)
    callbacks = ([hvd.callbacks.BroadcastGlobalVariablesCallback(0)] if hvd else []) + [StepTimer()]
    # Unconnected processes keep training until the driver says STOP; others stop after
    # their timed steps (stop_training; steps_per_epoch is the cap).
    t0 = time.perf_counter()
    hist = model.fit(_dataset(tf, rank), epochs=1, verbose=0, callbacks=callbacks,
                     steps_per_epoch=steps.last + 1 + (1000000 if steps.hs else 0))
    out.update(steps.record(), rank=rank, size=size, jit_compile=bool(model.jit_compile),
               env=harness.fuseopt_env(), params=int(model.count_params()),
               tensors=len(model.trainable_variables), fit_wall_s=time.perf_counter() - t0,
               loss_last=float(hist.history["loss"][-1]), checksum=_checksum(model))
    if hvd is not None:
        hvd.shutdown()
    harness.write_result(args.result_dir, rank, out)
    return 0


def worker_mwms(args):
    """mwms: a custom tf.function loop under MWMS (Keras 3's model.fit under MWMS fails
    here); with --mwms-fit, one model.fit attempt whose error is recorded."""
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": ["127.0.0.1:%s" % p for p in args.ports.split(",")]},
        "task": {"type": "worker", "index": args.proc_index}})
    tf, keras, out = _setup(args)
    impl = getattr(tf.distribute.experimental.CommunicationImplementation, MWMS_IMPL)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(implementation=impl))
    if strategy.num_replicas_in_sync != NRANKS:
        raise SystemExit("MWMS has %d replicas, expected %d"
                         % (strategy.num_replicas_in_sync, NRANKS))
    out.update(size=NRANKS, mwms_impl=MWMS_IMPL)
    with strategy.scope():
        model = _build_model(keras)
        opt = keras.optimizers.SGD(LR)
        if args.mwms_fit:
            model.compile(optimizer=opt, loss=_loss(keras))
        else:
            opt.build(model.trainable_variables)
    if args.mwms_fit:
        try:
            model.fit(_dataset(tf, args.proc_index), epochs=1, steps_per_epoch=3, verbose=0)
            out.update(fit_ok=True, error=None)
        except Exception as e:  # noqa: BLE001  (the point is to record it)
            msg = str(e)
            out.update(fit_ok=False, error_type=type(e).__name__, error=msg[:400] + (
                " [...] " + msg[-300:] if len(msg) > 700 else msg[400:]))
        harness.write_result(args.result_dir, args.proc_index, out)
        sys.stdout.flush()
        os._exit(0)     # a failed collective program may leave threads behind
    out.update(_mwms_loop(tf, keras, strategy, model, opt, Steps(out["warmup"], out["timed"])))
    harness.write_result(args.result_dir, args.proc_index, out)
    return 0


def _mwms_loop(tf, keras, strategy, model, opt, steps):
    """The custom loop: strategy.run of a GradientTape step, the loss scaled by the global
    batch; optimizer.apply_gradients all-reduces the gradients (Keras's TF backend). Per
    worker batches of 64 from distribute_datasets_from_function. A step is one call of the
    compiled step plus reading its loss."""
    loss_fn = _loss(keras, reduction=None)
    it = iter(strategy.distribute_datasets_from_function(
        lambda ctx: _dataset(tf, ctx.input_pipeline_id)))

    @tf.function
    def train_step(iterator):
        def step_fn(x, y):
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)),
                                                  global_batch_size=BATCH * NRANKS)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        per_replica = strategy.run(step_fn, args=next(iterator))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    t0 = time.perf_counter()
    for i in range(steps.last + 1):
        steps.begin(i)
        loss = float(train_step(it))
        steps.end(i)
    return dict(steps.record(), params=int(model.count_params()),
                tensors=len(model.trainable_variables), loop_wall_s=time.perf_counter() - t0,
                loss_last=loss, checksum=_checksum(model),
                data_path="strategy.distribute_datasets_from_function, 64 per worker")


# ---- driver side ----------------------------------------------------------------------

def run_job(c, args, mpiexec):
    """One job of contender c (harness.run_job): every process's result, stderr's tail."""
    worker, how = KINDS[c.split(":")[0]]  # fuseopt:NAME: fuseopt with the variant's env
    argv = [sys.executable, os.path.abspath(__file__), "--worker", worker, "--timeout",
            str(args.timeout), "--inter-op", str(args.inter_op)] + ["--quick"] * args.quick
    if worker == "mwms":
        argv += ["--ports", ",".join(map(str, harness.free_ports(NRANKS)))]
        argv += ["--mwms-fit"] * (c == "mwms_fit")
    env = harness.base_env(dict(args.variants.get(c, {}), TF_CPP_MIN_LOG_LEVEL="1"),
                           drop=("TF_CONFIG",))
    return harness.run_job(how, argv, env, args.timeout, c, mpiexec)


def job_value(contender, results):
    v = harness.step_figures(contender, results)
    if "per_rank_ms" in v:
        slowest = harness.slowest([r["samples_ms"]["step"] for r in results])
        v.update(max_step_ms=max(slowest), steps_over_1s=sum(1 for x in slowest if x > 1000),
                 n_steps=len(slowest))
    # process CPU time (all threads) per timed step vs wall time per step
    v["cpu_ms_per_step"] = statistics.mean(r["cpu_ms_per_step"] for r in results)
    v["wall_ms_per_step"] = statistics.mean((r["t_end"] - r["t_begin"]) * 1e3 / r["timed"]
                                            for r in results)
    return v


def summarize(jobs, contenders):
    summary = {}
    for c in contenders:
        vals = [j["values"] for j in jobs if j["contender"] == c]
        if vals:
            summary[c] = {"step_ms": statistics.median(v["step_ms"] for v in vals),
                          "per_rep_ms": [round(v["step_ms"], 3) for v in vals],
                          "cpu_busy_fraction": statistics.median(
                              v["cpu_ms_per_step"] / v["wall_ms_per_step"] for v in vals)}
    return summary


HEAD = ["contender", "median step ms", "steps/s", "samples/s", "overhead over unconnected (ms)",
        "scaling efficiency", "samples/s ÷ MWMS", "per-rep step ms"]


def table(s, contenders, args):
    mw, rows = s.get("mwms", {}).get("step_ms"), []
    for c in (c for c in contenders if c in s):
        step, eff = s[c]["step_ms"], report.efficiency(s, c)
        workers = 1 if c == "single" else NRANKS
        rows.append([c + {"mwms": " (custom strategy.run loop, not fit)",
                          "unconnected": " (compute only)"}.get(c, ""),
                     "%.2f" % step, "%.1f" % (1e3 / step), "%.0f" % (1e3 / step * BATCH * workers),
                     report.fmt(report.overhead(s, c)),
                     report.fmt(eff * 100 if eff is not None else None, "%.0f%%"),
                     report.fmt((mw / step) * (workers / NRANKS) if mw is not None else None,
                                "%.2fx"), ", ".join("%.1f" % v for v in s[c]["per_rep_ms"])])
    ref = REF["reference_ms"]
    return ["MLP %s (%.1fM params), batch %d/worker, SGD lr %g, %d warm-up + %d timed steps, "
            "intra_op 1 / inter_op %d threads per process, %d rep(s).\n"
            % ("-".join(map(str, DIMS)), N_PARAMS / 1e6, BATCH, LR, *steps_for(args.quick),
               args.inter_op, args.reps)] + report.table(HEAD, "lrrrrrrl", rows) + [
        "| reference (earlier, this machine) | single %g, unconnected %g, MWMS %g-%g "
        "| | | | | | |" % (ref["single"], ref["unconnected"], *ref["mwms"]), ""]


def suspicions(s, jobs):
    """Why the verdicts of this run may not be trustworthy, if they may not."""
    single, unc = report.steps(s)
    load = statistics.median([j["loadavg_1m_before"] for j in jobs] or [0.0])
    suspect = []
    if load > (os.cpu_count() or 2) + 0.5:
        suspect.append("median 1-minute load %.1f on %d cores: other work shared the cores"
                       % (load, os.cpu_count() or 0))
    if "fuseopt" in s and unc is not None and s["fuseopt"]["step_ms"] < unc:
        suspect.append("the compute-only baseline (unconnected) is slower than fuseopt, which "
                       "computes the same and communicates too")
    if single is not None and unc is not None and single / unc < 0.75:
        suspect.append("unconnected ran at %.0f%% of single speed (cores taken by others)"
                       % (100 * single / unc))
    spread = [c for c in BASE_CONTENDERS if c in s and len(s[c]["per_rep_ms"]) > 1
              and max(s[c]["per_rep_ms"]) > 1.5 * min(s[c]["per_rep_ms"])]
    if spread:
        suspect.append("per-rep step times differ by more than 1.5x for %s" % ", ".join(spread))
    return suspect


def same_rep_ratios(jobs, num, den):
    """num's step / den's step per repetition (Note [interleaving]), and a note on them."""
    paired = harness.paired(jobs, lambda r: round(r[num]["values"]["step_ms"]
                                                  / r[den]["values"]["step_ms"], 3))
    return paired, "same-rep ratios %s, median %.2fx" % (
        ", ".join("%.2fx" % p for p in paired),
        statistics.median(paired) if paired else float("nan"))


def target_lines(s, jobs, contenders, targets, verdicts):
    """The verdicts (plain fuseopt only); fills targets and verdicts."""
    lines, unc = [], report.steps(s)[1]
    f, mw = (s.get(c, {}).get("step_ms") for c in ("fuseopt", "mwms"))
    if f is not None and unc is not None:
        target, ratio = TARGETS["step_vs_unconnected_max"], f / unc
        paired, said = same_rep_ratios(jobs, "fuseopt", "unconnected")
        targets["fuseopt_vs_unconnected"] = {"fuseopt_ms": f, "unconnected_ms": unc,
                                             "ratio": ratio, "target": target,
                                             "pass": ratio <= target, "paired_ratios": paired}
        lines.append(verdicts.line(ratio <= target, "fuseopt 2-rank fit step %.2f ms <= %.1f x "
                                   "unconnected %.2f ms = %.2f ms (ratio %.2fx; %s)" % (
                                       f, target, unc, target * unc, ratio, said)))
    if f is not None and mw is not None:
        target, ratio = TARGETS["throughput_vs_mwms_min"], mw / f
        paired, said = same_rep_ratios(jobs, "mwms", "fuseopt")
        targets["fuseopt_vs_mwms"] = {"fuseopt_ms": f, "mwms_ms": mw, "throughput_ratio": ratio,
                                      "target": target, "pass": ratio >= target,
                                      "paired_ratios": paired}
        lines.append(verdicts.line(ratio >= target, "fuseopt throughput / MWMS throughput = "
                                   "%.2fx >= %.1fx (MWMS %.2f ms vs fuseopt %.2f ms; %s)" % (
                                       ratio, target, mw, f, said)))
    if "fuseopt" in contenders and f is None:
        verdicts.append(False)
        lines.append("- **FAIL** targets: no fuseopt job completed (see the failures below).")
    return lines


def notes(s, jobs, contenders, args, failures, probe):
    """Notes on the failures, the baselines, CPU use, the allreduce-only job, the variants,
    the set-up and the run itself."""
    single, unc = report.steps(s)
    out = ["**job failed** (not in the medians): %s, rep %d, after %.0f s: %s" % (
        fl["contender"], fl["rep"] + 1, fl["wall_s"],
        " ".join(fl["error"].split("--- ")[0].split())[:240]) for fl in failures]
    if single is not None and unc is not None:
        out.append("compute-only ceiling: unconnected efficiency (single / unconnected) = "
                   "%.0f%%." % (100 * single / unc))
    busy = ["%s %.0f%%" % (c, 100 * s[c]["cpu_busy_fraction"]) for c in contenders if c in s]
    if busy:
        out.append("process CPU time / wall time over the timed steps (per process, all "
                   "threads; 100%% = one core busy all the time): %s." % ", ".join(busy))
    out.append("A fuseopt fit step is about compute + its allreduce: the allreduce runs after "
               "the whole backward pass (in the Keras optimizer's apply), so nothing overlaps "
               "it. allreduce.py's 'MLP gradients' rows time those 8 buffers alone.")
    out += ["%s = fuseopt with %s (reported, not judged)." % (c, " ".join(
        "%s=%s" % kv for kv in args.variants[c].items())) for c in contenders if ":" in c]
    if "fuseopt" in s and args.inter_op == 1:
        out.append("inter_op=1 works with fuseopt: the blocking allreduce inside the "
                   "tf.numpy_function holds the only inter-op thread, but everything else "
                   "in the step depends on it, and fuseopt's own thread does the transfer; "
                   "no hang.")
    for c in contenders:
        v = [j["values"] for j in jobs if j["contender"] == c and "max_step_ms" in j["values"]]
        if v:
            out.append("%s: timed steps longer than 1 s: %d of %d (longest %.1f s; the median "
                       "is robust to them, the wall time is not)." % (
                           c, sum(x["steps_over_1s"] for x in v), sum(x["n_steps"] for x in v),
                           max(x["max_step_ms"] for x in v) / 1e3))
    return out + run_notes(jobs, contenders, probe)


def run_notes(jobs, contenders, probe):
    """Notes on how MWMS runs, the method and the run."""
    out = []
    if "mwms" in contenders:
        keras = next((r["keras"] for j in jobs for r in j["results"] if "keras" in r), "3")
        out.append("MWMS runs a custom training loop (tf.function step around strategy.run; "
                   "GradientTape + optimizer.apply_gradients; global batch 128 = 64 per "
                   "worker from distribute_datasets_from_function; collective implementation "
                   "%s), because Keras %s model.fit under MWMS fails (keras-team/keras#20585 "
                   "and the scalar-log reduction over axis 0)." % (MWMS_IMPL, keras))
    if probe is not None:
        out.append("MWMS model.fit probe (run once here): %s" % probe)
    out.append("Per job: median over timed steps of the slowest worker's step (2-worker jobs); "
               "unconnected: mean of the two processes' medians. Cells: median over jobs, "
               "contenders interleaved in a shuffled order per rep; paired = same rep.")
    ov = [j["values"]["timed_window_overlap"] for j in jobs if j["contender"] == "unconnected"]
    if ov:
        out.append("unconnected timed-window overlap: %s." % ", ".join(
            "%.0f%%" % (100 * o) for o in ov))
    out.append(report.load_note(jobs) + ".")
    fo, mc = ([j["checksums"] for j in jobs if j["contender"] == c] for c in ("fuseopt", "mwms"))
    if fo and mc:
        rel = abs(fo[0][1] - mc[0][1]) / max(1e-12, abs(mc[0][1]))
        out.append("workers agree in every 2-worker job; final sum(w^2) fuseopt vs MWMS "
                   "differ by %.1e (relative): same training." % rel)
    return out


def build_report(summary, jobs, contenders, args, failures, probe):
    verdicts, targets = report.Verdicts(), {}
    lines = table(summary, contenders, args)
    targets["suspect"] = suspicions(summary, jobs)
    if targets["suspect"]:
        lines.append("- **CAUTION, the verdicts below are not trustworthy**: "
                     + "; ".join(targets["suspect"]) + ". Rerun on a quiet machine.")
    lines += target_lines(summary, jobs, contenders, targets, verdicts)
    text = "\n".join(lines + [""] + ["- " + n for n in notes(
        summary, jobs, contenders, args, failures, probe)])
    return text, verdicts, targets


def plot(summary, contenders, path):
    plt = report.pyplot()
    names = [c for c in contenders if c in summary]
    unc, mw = (summary.get(c, {}).get("step_ms") for c in ("unconnected", "mwms"))
    k, q = TARGETS["step_vs_unconnected_max"], TARGETS["throughput_vs_mwms_min"]
    lines = []
    if unc is not None:
        lines.append((k * unc, "green", "--", "%.1f x unconnected (%.1f ms)" % (k, k * unc)))
    if mw is not None:
        lines.append((mw / q, "purple", ":", "MWMS / %.1f (%.1f ms)" % (q, mw / q)))
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    report.step_bars(ax, names, [summary[c]["step_ms"] for c in names], "mwms",
                     [summary[c]["per_rep_ms"] for c in names], lines=lines, loc="upper left",
                     labels=[n if n != "mwms" else "mwms\n(custom loop)" for n in names])
    ax.set_title("Keras MLP 1024-2048-2048-1024-10, batch %d/worker, 2 workers "
                 "(dots: reps)" % BATCH, fontsize=10)
    report.save(plt, fig, path, 110)


def probe_mwms_fit(args, mpiexec):
    """Runs model.fit under MWMS once: (what happened, in a line; the raw results)."""
    harness.log("[probe] MWMS model.fit ... ")
    t0 = time.perf_counter()
    raw = None
    try:
        raw = run_job("mwms_fit", args, mpiexec)[0]
        r = raw[0]
        # One line; a PerReplica value's numpy dump cut out.
        error = re.sub(r"numpy= ?array\(.*?\)>", "numpy=...>", " ".join(str(r["error"]).split()))
        said = ("model.fit succeeded" if r["fit_ok"] else
                "model.fit raised %s: %s" % (r["error_type"], error[:300]))
    except harness.JobFailed as e:
        said = "the probe job itself failed: %s" % " ".join(str(e).split())[:300]
    harness.log("%.1f s: %s\n" % (time.perf_counter() - t0, said[:200]))
    return said, raw


def run_one(c, rep, pos, args, mpiexec):
    """One job (harness.measured_job); a failed one (a hang is a result too) is recorded
    and the other jobs go on."""
    def job():
        results, stderr = run_job(c, args, mpiexec)
        return dict(quick=args.quick, env=args.variants.get(c, {}), results=results,
                    values=job_value(c, results), checksums=None if c in harness.BASELINES
                    else harness.same_weights(c, [r["checksum"] for r in results])), stderr
    return harness.measured_job(args, c, rep, pos, job,
                                lambda rec: "%.2f ms" % rec["values"]["step_ms"])


def driver_main(args):
    contenders = harness.parse_contenders(args, BASE_CONTENDERS)
    mpiexec, started = harness.start(args, contenders, inter_op=args.inter_op)
    probe = (None, None)
    if args.probe_mwms_fit and "mwms" in contenders:
        probe = probe_mwms_fit(args, mpiexec)
    jobs, failures = harness.run_jobs(args, contenders, lambda c, rep, pos: run_one(
        c, rep, pos, args, mpiexec))
    meta = report.run_meta(
        args, started, mpiexec, workers=NRANKS, steps=steps_for(args.quick),
        batch_per_worker=BATCH, lr=LR, dims=DIMS, params=N_PARAMS, inter_op=args.inter_op,
        intra_op=1, mwms_impl=MWMS_IMPL,
        mwms_mode="custom loop (tf.function + strategy.run), not model.fit",
        contenders=contenders, variants=args.variants, reference_ms=REF["reference_ms"])
    summary = summarize(jobs, contenders)
    text, verdicts, targets = build_report(summary, jobs, contenders, args, failures, probe[0])
    return report.finish(
        args, "tf_train", "Keras training-step benchmark",
        {"meta": meta, "summary": summary, "targets": targets, "failures": failures,
         "mwms_fit_probe": {"summary": probe[0], "results": probe[1]}, "table_markdown": text,
         "jobs": jobs}, text, lambda path: plot(summary, contenders, path), verdicts,
        " (CAUTION: suspect run, see above)" if targets["suspect"] else "")


def main(argv=None):
    p = harness.parser(__doc__, "fewer timed steps (20 instead of 40)", 300, BASE_CONTENDERS)
    p.add_argument("--inter-op", type=int, default=1, help="inter-op threads per process")
    p.add_argument("--no-probe-mwms-fit", dest="probe_mwms_fit", action="store_false",
                   help="skip trying model.fit under MWMS once (to record the error it raises)")
    p.add_argument("--ports", help=argparse.SUPPRESS)
    p.add_argument("--mwms-fit", action="store_true", help=argparse.SUPPRESS)
    args = harness.parse(p, argv, ("single", "fuseopt", "mwms"))
    worker = {"mwms": worker_mwms}.get(args.worker, worker_fit)
    return worker(args) if args.worker else driver_main(args)


if __name__ == "__main__":
    sys.exit(main())
