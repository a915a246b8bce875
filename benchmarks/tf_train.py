#!/usr/bin/env python
"""Keras training-step benchmark: fuseopt's DistributedOptimizer in ``model.fit``
against MultiWorkerMirroredStrategy (MWMS), on 2 local workers.

Usage (from the repository root)::

    python benchmarks/tf_train.py [--quick] [--reps N] [--out benchmarks/results]
        [--inter-op N] [--mwms-impl RING|AUTO] [--no-probe-mwms-fit] [--no-comm-floor]
        [--fuseopt-variant NAME:FUSEOPT_VAR=VALUE[,...]]... [--timeout S]
    python benchmarks/tf_train.py --rerender benchmarks/results/tf_train.json

Workload: MLP 1024-2048-2048-1024-10 (Dense + ReLU, linear logits, ~8.4M
parameters in 8 tensors), sparse categorical cross-entropy (from logits), SGD
lr 0.01, batch 64 per worker, one fixed synthetic batch per process (seeded by
rank, served by ``tf.data.Dataset.from_tensors(...).repeat()``), weights seeded
identically everywhere. Every process runs with
``tf.config.threading.set_intra_op_parallelism_threads(1)`` and
``set_inter_op_parallelism_threads(--inter-op, default 1)``; no XLA
(``jit_compile=False``, which is also what Keras picks on a CPU-only machine).

Contenders, each a fresh set of processes (this file with ``--worker ...``):

  single       1 process, plain ``model.fit`` (scaling-efficiency baseline);
  unconnected  2 independent single processes at the same time: they shake
               hands with the driver after warm-up so their timed steps start
               together, and keep training after their timed steps until both
               are done, so every timed step ran with both cores busy. The
               compute-only baseline for 2 workers (mean of the two medians);
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
jobs: per step the slowest worker, then the median over steps. Cells: median
over ``--reps`` jobs, contenders interleaved in a shuffled order per rep.

In fuseopt jobs the worker wraps ``fuseopt.ops.allreduce_async`` (in its own
process, not in the library) to time stamp each gradient's enqueue and
completion, which splits a step into compute before the allreduce, the
allreduce inside the ``tf.numpy_function``, and the rest (SGD update, Keras).

Also per rep, ``commfloor``: allreduce only, no TensorFlow (mpi4py on the same
MPI vs fuseopt, the MLP's 8 gradient buffers), the floor under the
communication part of a fuseopt step. A job that fails or times out is
reported and left out of the medians; the other jobs go on. The report puts a
CAUTION above the verdicts when the run looks invalid (load above the core
count, the compute-only baseline slower than fuseopt, per-rep spread > 1.5x).

Overhead = 2-worker step - unconnected step. Scaling efficiency = 2-worker
throughput / (2 x single throughput) = single step / 2-worker step.
"""
import argparse
import datetime
import json
import os
import platform
import queue
import random
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

NRANKS = 2
BATCH = 64
LR = 0.01
DIMS = (1024, 2048, 2048, 1024, 10)
BASE_CONTENDERS = ("single", "unconnected", "fuseopt", "mwms")
TARGET_STEP_VS_UNCONNECTED = 1.4      # fuseopt step <= 1.4 x unconnected
TARGET_THROUGHPUT_VS_MWMS = 3.5       # fuseopt throughput >= 3.5 x MWMS
# Measured on this machine earlier (ms/step), for orientation only.
REFERENCE = {"single": 26.0, "unconnected": 26.5, "mwms": (130.0, 135.0)}

READY = "@@TF_TRAIN_READY@@"
DONE = "@@TF_TRAIN_DONE@@"


def steps_for(quick):
    """(warm-up, timed) steps."""
    return (5, 20) if quick else (5, 40)


# --------------------------------------------------------------------------
# Worker side.
# --------------------------------------------------------------------------

def _say(msg):
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


class _StdinLines:
    """Unbuffered line reader on fd 0 (select() must see what is unread)."""

    def __init__(self):
        self.buf = b""

    def poll(self, timeout):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = max(0.0, deadline - time.monotonic())
            r, _, _ = select.select([0], [], [], left)
            if not r:
                return None
            chunk = os.read(0, 4096)
            if not chunk:
                raise SystemExit("driver closed stdin")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode().strip()

    def expect(self, word, timeout):
        line = self.poll(timeout)
        if line != word:
            raise SystemExit("expected %r from the driver, got %r" % (word, line))


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


class _AllreduceProbe:
    """Wraps fuseopt.ops.allreduce_async in this process: (enqueue, done) per tensor."""

    def __init__(self):
        import fuseopt.ops as fops
        self.events = []
        self.lock = threading.Lock()
        orig = fops.allreduce_async
        probe = self

        class Handle:
            def __init__(self, h, t0):
                self._h, self._t0 = h, t0

            def wait(self, *a, **k):
                r = self._h.wait(*a, **k)
                with probe.lock:
                    probe.events.append((self._t0, time.perf_counter()))
                return r

            def __getattr__(self, name):
                return getattr(self._h, name)

        def allreduce_async(*a, **k):
            t0 = time.perf_counter()
            return Handle(orig(*a, **k), t0)

        fops.allreduce_async = allreduce_async

    def take(self):
        with self.lock:
            ev, self.events = self.events, []
        return ev


def _make_timer(keras, warm, timed, stdin, probe, timeout):
    pc = time.perf_counter

    class StepTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.rec = {"step": [], "t_start": [], "pre": [], "comm": [], "post": [],
                        "t_enq": [], "t_done": []}
            self.t0 = None
            self.filler = 0
            self.deadline = None
            self.t_begin = self.t_end = None
            self.cpu_begin = self.cpu_end = None

        def on_train_batch_begin(self, batch, logs=None):
            if stdin is not None and batch == warm:     # unconnected: start together
                _say(READY)
                stdin.expect("GO", timeout)
            if batch == warm:
                self.t_begin = pc()
                self.cpu_begin = time.process_time()
            if probe is not None:
                probe.take()
            self.t0 = pc()

        def on_train_batch_end(self, batch, logs=None):
            t1 = pc()
            if warm <= batch < warm + timed:
                self.rec["step"].append((t1 - self.t0) * 1e3)
                self.rec["t_start"].append(self.t0)
                if probe is not None:
                    ev = probe.take()
                    if ev:
                        a, b = min(e[0] for e in ev), max(e[1] for e in ev)
                        self.rec["pre"].append((a - self.t0) * 1e3)
                        self.rec["comm"].append((b - a) * 1e3)
                        self.rec["post"].append((t1 - b) * 1e3)
                        self.rec["t_enq"].append(a)
                        self.rec["t_done"].append(b)
                if batch == warm + timed - 1:
                    self.t_end = t1
                    self.cpu_end = time.process_time()
                    if stdin is not None:
                        _say(DONE)
                        self.deadline = time.monotonic() + timeout
                    else:
                        self.model.stop_training = True
            elif batch >= warm + timed:
                self.filler += 1
            if stdin is not None and batch >= warm + timed - 1:
                line = stdin.poll(0)
                if line == "STOP":
                    self.model.stop_training = True
                elif line is not None:
                    raise SystemExit("unexpected %r from the driver" % line)
                elif time.monotonic() > self.deadline:
                    raise SystemExit("no STOP from the driver")

    return StepTimer()


def _dataset(tf, rank):
    x, y = _data(rank)
    return tf.data.Dataset.from_tensors((x, y)).repeat()


def worker_fit(args):
    """single / fuseopt: plain model.fit with the step-timer callback."""
    kind = args.worker
    tf = _setup_tf(args.inter_op)
    import keras
    rank, size, info, hvd, probe = args.proc_index, 1, {}, None, None
    if kind == "fuseopt":
        import fuseopt
        import fuseopt.tensorflow.keras as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
        info["fuseopt_settings"] = fuseopt.settings()
        if size != NRANKS:
            raise SystemExit("fuseopt worker expects %d ranks, got %d" % (NRANKS, size))
        probe = _AllreduceProbe()
    warm, timed = steps_for(args.quick)
    stdin = _StdinLines() if args.handshake else None
    model = _build_model(keras)
    opt = keras.optimizers.SGD(LR)
    if hvd is not None:
        opt = hvd.DistributedOptimizer(opt)
    model.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=False)
    timer = _make_timer(keras, warm, timed, stdin, probe, args.timeout)
    callbacks = ([hvd.callbacks.BroadcastGlobalVariablesCallback(0)] if hvd else []) + [timer]
    # Unconnected processes keep training until the driver says STOP; others
    # stop after their timed steps (stop_training; steps_per_epoch is the cap).
    steps = warm + timed + (1000000 if stdin is not None else 0)
    t0 = time.perf_counter()
    hist = model.fit(_dataset(tf, rank), epochs=1, steps_per_epoch=steps, verbose=0,
                     callbacks=callbacks)
    wall = time.perf_counter() - t0
    out = {"kind": kind, "rank": rank, "size": size, "pid": os.getpid(),
           "tf": tf.__version__, "keras": keras.__version__, "inter_op": args.inter_op,
           "threads": [tf.config.threading.get_intra_op_parallelism_threads(),
                       tf.config.threading.get_inter_op_parallelism_threads()],
           "jit_compile": bool(model.jit_compile),
           "env": {k: v for k, v in os.environ.items() if k.startswith("FUSEOPT_")},
           "info": info, "params": int(model.count_params()),
           "tensors": len(model.trainable_variables), "warmup": warm, "timed": timed,
           "samples_ms": {k: [round(v, 4) for v in vs] for k, vs in timer.rec.items()
                          if not k.startswith("t_")},
           "t_start": timer.rec["t_start"], "t_enq": timer.rec["t_enq"],
           "t_done": timer.rec["t_done"], "t_begin": timer.t_begin, "t_end": timer.t_end,
           "cpu_ms_per_step": (timer.cpu_end - timer.cpu_begin) * 1e3 / timed,
           "filler_steps": timer.filler, "fit_wall_s": wall,
           "loss_last": float(hist.history["loss"][-1]), "checksum": _checksum(model),
           "steps_trained": warm + timed + timer.filler}
    if hvd is not None:
        hvd.shutdown()
    with open(os.path.join(args.result_dir, "%s.%d.json" % (kind, rank)), "w") as f:
        json.dump(out, f)
    return 0


def worker_mwms(args):
    """mwms: custom tf.function loop under MultiWorkerMirroredStrategy (or, with
    --mwms-fit, a model.fit attempt whose error is recorded)."""
    idx = args.proc_index
    ports = args.ports.split(",")
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": ["127.0.0.1:%s" % p for p in ports]},
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
    out = {"kind": "mwms", "rank": idx, "size": NRANKS, "pid": os.getpid(),
           "tf": tf.__version__, "keras": keras.__version__, "inter_op": args.inter_op,
           "threads": [tf.config.threading.get_intra_op_parallelism_threads(),
                       tf.config.threading.get_inter_op_parallelism_threads()],
           "mwms_impl": args.mwms_impl, "warmup": warm, "timed": timed}
    name = "mwms_fit" if args.mwms_fit else "mwms"
    if args.mwms_fit:
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
                       error=msg[:400] + (" [...] " + msg[-300:] if len(msg) > 700 else
                                          msg[400:]))
        with open(os.path.join(args.result_dir, "%s.%d.json" % (name, idx)), "w") as f:
            json.dump(out, f)
        sys.stdout.flush()
        os._exit(0)     # a failed collective program may leave threads behind

    with strategy.scope():
        model = _build_model(keras)
        opt = keras.optimizers.SGD(LR)
        opt.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    global_batch = BATCH * NRANKS

    def dataset_fn(ctx):
        return _dataset(tf, ctx.input_pipeline_id)

    it = iter(strategy.distribute_datasets_from_function(dataset_fn))

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
    rec = {"step": [], "t_start": []}
    loss = None
    t_begin = t_end = None
    t0w = pc()
    for i in range(warm + timed):
        if i == warm:
            t_begin = pc()
            cpu_begin = time.process_time()
        t0 = pc()
        loss = float(train_step(it))
        t1 = pc()
        if i >= warm:
            rec["step"].append((t1 - t0) * 1e3)
            rec["t_start"].append(t0)
    t_end = pc()
    cpu_ms = (time.process_time() - cpu_begin) * 1e3 / timed
    out.update(cpu_ms_per_step=cpu_ms, params=int(model.count_params()),
               tensors=len(model.trainable_variables),
               samples_ms={"step": [round(v, 4) for v in rec["step"]]},
               t_start=rec["t_start"], t_begin=t_begin, t_end=t_end, filler_steps=0,
               loop_wall_s=t_end - t0w, loss_last=loss, checksum=_checksum(model),
               steps_trained=warm + timed,
               data_path="strategy.distribute_datasets_from_function, 64 per worker")
    with open(os.path.join(args.result_dir, "%s.%d.json" % (name, idx)), "w") as f:
        json.dump(out, f)
    return 0


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
    with open(os.path.join(args.result_dir, "commfloor.%d.json" % comm.rank), "w") as f:
        json.dump(out_d, f)
    return 0


# --------------------------------------------------------------------------
# Driver side.
# --------------------------------------------------------------------------

class JobFailed(RuntimeError):
    pass


def find_mpiexec():
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.isfile(here) and os.access(here, os.X_OK):
        return here
    found = shutil.which("mpiexec")
    if not found:
        raise SystemExit("mpiexec not found next to %s nor on PATH" % sys.executable)
    return found


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _kill_group(proc):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


def _base_env(extra=None):
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               TF_CPP_MIN_LOG_LEVEL="1")
    env.pop("TF_CONFIG", None)
    env.update(extra or {})
    return env


def _worker_cmd(kind, args, result_dir, extra=()):
    return [sys.executable, os.path.abspath(__file__), "--worker", kind,
            "--result-dir", result_dir, "--timeout", str(args.timeout),
            "--inter-op", str(args.inter_op), "--mwms-impl", args.mwms_impl] \
        + (["--quick"] if args.quick else []) + list(extra)


def _read_results(result_dir, kind, n):
    outs = []
    for r in range(n):
        path = os.path.join(result_dir, "%s.%d.json" % (kind, r))
        if not os.path.exists(path):
            raise JobFailed("missing result file %s" % path)
        with open(path) as f:
            outs.append(json.load(f))
    return outs


def _tail(path, n=4000):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


def run_simple(cmd, env, timeout, label, stderr_path):
    """Runs one command (its own process group); raises JobFailed on error/timeout."""
    with open(stderr_path, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                                start_new_session=True)
        try:
            stdout, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise JobFailed("%s timed out after %.0f s: %s\n--- stderr ---\n%s"
                            % (label, timeout, " ".join(cmd), _tail(stderr_path)))
    if proc.returncode != 0:
        raise JobFailed("%s failed (exit %s): %s\n--- stdout ---\n%s\n--- stderr ---\n%s"
                        % (label, proc.returncode, " ".join(cmd), stdout[-2000:],
                           _tail(stderr_path)))
    return stdout


def run_pair(cmds, env, timeout, label, tmp, grace=20.0):
    """Two processes started together (own process groups). If one fails, the
    other gets `grace` seconds, then is killed. Raises JobFailed."""
    procs, errs = [], []
    try:
        for i, cmd in enumerate(cmds):
            err = open(os.path.join(tmp, "%s.%d.stderr" % (label, i)), "w")
            errs.append(err)
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env,
                                          start_new_session=True))
        deadline = time.monotonic() + timeout
        failed_at = None
        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
                failed_at = now
            if now > deadline or (failed_at is not None and now > failed_at + grace):
                break
            time.sleep(0.05)
        problems = []
        for i, p in enumerate(procs):
            if p.poll() is None:
                _kill_group(p)
                problems.append("process %d killed (%s)" % (
                    i, "timeout %.0f s" % timeout if failed_at is None else "peer failed"))
            elif p.returncode != 0:
                problems.append("process %d exit %s" % (i, p.returncode))
        if problems:
            raise JobFailed("%s: %s\n%s" % (label, "; ".join(problems), "\n".join(
                "--- process %d stderr ---\n%s" % (i, _tail(e.name)) for i, e in enumerate(errs))))
    finally:
        for p in procs:
            if p.poll() is None:
                _kill_group(p)
        for e in errs:
            e.close()


def run_unconnected(args, tmp):
    procs, errs, queues = [], [], []
    try:
        for i in range(NRANKS):
            cmd = _worker_cmd("single", args, tmp, ["--handshake", "--proc-index", str(i)])
            err = open(os.path.join(tmp, "unconnected.%d.stderr" % i), "w")
            errs.append(err)
            p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                 text=True, env=_base_env(), start_new_session=True, bufsize=1)
            q = queue.Queue()
            threading.Thread(target=lambda p=p, q=q: [q.put(l.strip()) for l in p.stdout]
                             + [q.put(None)], daemon=True).start()
            procs.append(p)
            queues.append(q)
        deadline = time.monotonic() + args.timeout

        def expect(i, word):
            try:
                line = queues[i].get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise JobFailed("unconnected process %d: timed out waiting for %r" % (i, word))
            if line != word:
                raise JobFailed("unconnected process %d: expected %r, got %r\n--- stderr ---\n%s"
                                % (i, word, line, _tail(errs[i].name)))

        def send(word):
            for p in procs:
                p.stdin.write(word + "\n")
                p.stdin.flush()

        for i in range(NRANKS):
            expect(i, READY)
        send("GO")
        for i in range(NRANKS):
            expect(i, DONE)
        send("STOP")
        for p in procs:
            p.stdin.close()
        for i, p in enumerate(procs):
            try:
                rc = p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise JobFailed("unconnected process %d did not exit" % i)
            if rc != 0:
                raise JobFailed("unconnected process %d failed (exit %s)\n--- stderr ---\n%s"
                                % (i, rc, _tail(errs[i].name)))
    finally:
        for p in procs:
            if p.poll() is None:
                _kill_group(p)
        for e in errs:
            e.close()
    return _read_results(tmp, "single", NRANKS)


def run_job(contender, variants, mpiexec, args):
    """One job of a contender: fresh processes; returns the per-process results."""
    tmp = tempfile.mkdtemp(prefix="tf_train_")
    try:
        if contender == "single":
            run_simple(_worker_cmd("single", args, tmp), _base_env(), args.timeout, contender,
                       os.path.join(tmp, "stderr"))
            return _read_results(tmp, "single", 1)
        if contender == "unconnected":
            return run_unconnected(args, tmp)
        if contender in ("mwms", "mwms_fit"):
            ports = ",".join(str(p) for p in free_ports(NRANKS))
            extra = ["--ports", ports] + (["--mwms-fit"] if contender == "mwms_fit" else [])
            cmds = [_worker_cmd("mwms", args, tmp, extra + ["--proc-index", str(i)])
                    for i in range(NRANKS)]
            run_pair(cmds, _base_env(), args.timeout, contender, tmp)
            return _read_results(tmp, contender, NRANKS)
        if contender == "commfloor":
            cmd = [mpiexec, "-n", str(NRANKS)] + _worker_cmd("commfloor", args, tmp)
            run_simple(cmd, _base_env(), args.timeout, contender, os.path.join(tmp, "stderr"))
            return _read_results(tmp, "commfloor", NRANKS)
        # fuseopt and its variants
        cmd = [mpiexec, "-n", str(NRANKS)] + _worker_cmd("fuseopt", args, tmp)
        run_simple(cmd, _base_env(variants.get(contender, {})), args.timeout, contender,
                   os.path.join(tmp, "stderr"))
        return _read_results(tmp, "fuseopt", NRANKS)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def job_value(contender, results):
    v = _job_step(contender, results)
    if contender != "commfloor" and all("cpu_ms_per_step" in r for r in results):
        # process CPU time (all threads) per timed step vs wall time per step
        v["cpu_ms_per_step"] = statistics.mean(r["cpu_ms_per_step"] for r in results)
        v["wall_ms_per_step"] = statistics.mean((r["t_end"] - r["t_begin"]) * 1e3 / r["timed"]
                                                for r in results)
    return v


def _job_step(contender, results):
    med = statistics.median
    if contender == "single":
        return {"step_ms": med(results[0]["samples_ms"]["step"])}
    if contender == "commfloor":
        return {k: med(v) for k, v in results[0]["samples_ms"].items()}
    if contender == "unconnected":
        per = [med(r["samples_ms"]["step"]) for r in results]
        b = max(r["t_begin"] for r in results)
        e = min(r["t_end"] for r in results)
        span = max(r["t_end"] for r in results) - min(r["t_begin"] for r in results)
        return {"step_ms": statistics.mean(per), "per_process_ms": per,
                "timed_window_overlap": round(max(0.0, e - b) / span, 3) if span > 0 else None,
                "filler_steps": [r["filler_steps"] for r in results]}
    steps = [r["samples_ms"]["step"] for r in results]
    slowest = [max(v) for v in zip(*steps)]
    v = {"step_ms": med(slowest), "per_rank_ms": [med(s) for s in steps],
         "max_step_ms": max(slowest), "steps_over_1s": sum(1 for x in slowest if x > 1000),
         "n_steps": len(slowest)}
    if all(r["samples_ms"].get("comm") for r in results):
        v["phases_ms"] = {k: statistics.mean(med(r["samples_ms"][k]) for r in results)
                          for k in ("pre", "comm", "post")}
        # perf_counter is CLOCK_MONOTONIC, shared by the processes of one machine:
        # per step, the wait for the later rank's gradients (skew) and the time
        # from the later rank's enqueue to the last completion (transfer).
        if all(len(r.get("t_enq", [])) == len(steps[0]) for r in results):
            skew, xfer = [], []
            for enq, done in zip(zip(*[r["t_enq"] for r in results]),
                                 zip(*[r["t_done"] for r in results])):
                skew.append((max(enq) - min(enq)) * 1e3)
                xfer.append((max(done) - max(enq)) * 1e3)
            v["phases_ms"]["skew"] = med(skew)
            v["phases_ms"]["transfer"] = med(xfer)
    return v


def verify(contender, results):
    """2-worker jobs: every worker ends with the same weights."""
    if contender in ("single", "unconnected", "commfloor"):
        return None
    sums = [r["checksum"] for r in results]
    for a, b in zip(sums[0], sums[1]):
        if abs(a - b) > 1e-6 * max(1.0, abs(a)):
            raise JobFailed("%s: workers diverged: weight checksums %s vs %s"
                            % (contender, sums[0], sums[1]))
    return sums[0]


def fmt(v, spec="%.2f"):
    return "—" if v is None else spec % v


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
        ph = [v["phases_ms"] for v in vals if "phases_ms" in v]
        if ph:
            s["phases_ms"] = {k: statistics.median(p[k] for p in ph) for k in ph[0]}
        summary[c] = s
    return summary


def per_rep(jobs, c):
    return {j["rep"]: j["values"]["step_ms"] for j in jobs if j["contender"] == c}


def build_report(summary, jobs, contenders, args, mwms_fit_probe, failures=()):
    s = summary
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
        sps = 1e3 / step * BATCH * workers
        over = step - unc if unc is not None and c not in ("single", "unconnected") else None
        eff = single / step if single is not None and c != "single" else None
        vs_mw = (mw / step) * (workers / NRANKS) if mw is not None else None
        label = c + (" (custom strategy.run loop, not fit)" if c == "mwms" else "") \
            + (" (compute only)" if c == "unconnected" else "")
        lines.append("| %s | %.2f | %.1f | %.0f | %s | %s | %s | %s |" % (
            label, step, 1e3 / step, sps, fmt(over),
            fmt(eff * 100 if eff is not None else None, "%.0f%%"),
            fmt(vs_mw, "%.2fx"), ", ".join("%.1f" % v for v in s[c]["per_rep_ms"])))
    lines.append("| reference (earlier, this machine) | single 26, unconnected 26.5, MWMS "
                 "130-135 | | | | | | |")
    lines.append("")
    verdicts, targets = [], {}
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
    if suspect:
        lines.append("- **CAUTION, the verdicts below are not trustworthy**: " + "; ".join(suspect)
                     + ". Rerun on a quiet machine.")
    targets["suspect"] = suspect
    if "fuseopt" in s and unc is not None:
        f = s["fuseopt"]["step_ms"]
        ratio = f / unc
        ok = ratio <= TARGET_STEP_VS_UNCONNECTED
        fr, ur = per_rep(jobs, "fuseopt"), per_rep(jobs, "unconnected")
        paired = [round(fr[r] / ur[r], 3) for r in sorted(fr) if r in ur]
        verdicts.append(ok)
        targets["fuseopt_vs_unconnected"] = {"fuseopt_ms": f, "unconnected_ms": unc,
                                             "ratio": ratio, "target": TARGET_STEP_VS_UNCONNECTED,
                                             "pass": ok, "paired_ratios": paired}
        lines.append("- **%s** target: fuseopt 2-rank fit step %.2f ms <= %.1f x unconnected "
                     "%.2f ms = %.2f ms (ratio %.2fx; same-rep ratios %s, median %.2fx) "
                     "-> **%s**" % (
                         "PASS" if ok else "FAIL", f, TARGET_STEP_VS_UNCONNECTED, unc,
                         TARGET_STEP_VS_UNCONNECTED * unc, ratio,
                         ", ".join("%.2fx" % p for p in paired),
                         statistics.median(paired) if paired else float("nan"),
                         "PASS" if ok else "FAIL"))
    if "fuseopt" in s and mw is not None:
        f = s["fuseopt"]["step_ms"]
        ratio = mw / f
        ok = ratio >= TARGET_THROUGHPUT_VS_MWMS
        fr, mr = per_rep(jobs, "fuseopt"), per_rep(jobs, "mwms")
        paired = [round(mr[r] / fr[r], 3) for r in sorted(fr) if r in mr]
        verdicts.append(ok)
        targets["fuseopt_vs_mwms"] = {"fuseopt_ms": f, "mwms_ms": mw, "throughput_ratio": ratio,
                                      "target": TARGET_THROUGHPUT_VS_MWMS, "pass": ok,
                                      "paired_ratios": paired}
        lines.append("- **%s** target: fuseopt throughput / MWMS throughput = %.2fx >= %.1fx "
                     "(MWMS %.2f ms vs fuseopt %.2f ms; same-rep ratios %s, median %.2fx) "
                     "-> **%s**" % (
                         "PASS" if ok else "FAIL", ratio, TARGET_THROUGHPUT_VS_MWMS, mw, f,
                         ", ".join("%.2fx" % p for p in paired),
                         statistics.median(paired) if paired else float("nan"),
                         "PASS" if ok else "FAIL"))
    if "fuseopt" in contenders and "fuseopt" not in s:
        verdicts.append(False)
        lines.append("- **FAIL** targets: no fuseopt job completed (see the failures below).")
    notes = []
    for fl in failures:
        first = " ".join(fl["error"].split("--- ")[0].split())[:240]
        notes.append("**job failed** (not in the medians): %s, rep %d, after %.0f s: %s"
                     % (fl["contender"], fl["rep"] + 1, fl["wall_s"], first))
    if single is not None and unc is not None:
        notes.append("compute-only ceiling: unconnected efficiency (single / unconnected) = "
                     "%.0f%%." % (100 * single / unc))
    if "fuseopt" in s and "phases_ms" in s["fuseopt"]:
        p = s["fuseopt"]["phases_ms"]
        notes.append("fuseopt step split (median per step, mean over ranks, median over reps): "
                     "compute before the allreduce (fwd+bwd) %.2f ms, allreduce inside the "
                     "tf.numpy_function (first gradient enqueued -> last done, 8 tensors, "
                     "%.1f MB) %.2f ms, rest (SGD update + Keras) %.2f ms."
                     % (p["pre"], n_params() * 4 / 1e6, p["comm"], p["post"]))
        if "transfer" in p:
            notes.append("fuseopt allreduce split across ranks (shared monotonic clock): waiting "
                         "for the later rank to enqueue (compute skew) %.2f ms, later rank's "
                         "enqueue -> last completion %.2f ms." % (p["skew"], p["transfer"]))
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
    for c in contenders:
        if c.startswith("fuseopt:"):
            notes.append("%s = fuseopt with %s (reported, not judged)."
                         % (c, " ".join("%s=%s" % kv for kv in args.variants[c].items())))
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
    notes.append("1-minute load average when jobs started: median %.2f, max %.2f (%d cores)."
                 % (statistics.median(loads), max(loads), os.cpu_count() or 0))
    fo = [j["checksums"] for j in jobs if j["contender"] == "fuseopt"]
    mc = [j["checksums"] for j in jobs if j["contender"] == "mwms"]
    if fo and mc:
        rel = abs(fo[0][1] - mc[0][1]) / max(1e-12, abs(mc[0][1]))
        notes.append("workers agree in every 2-worker job; final sum(w^2) fuseopt vs MWMS "
                     "differ by %.1e (relative): same training." % rel)
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
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = [c for c in contenders if c in summary and c != "commfloor"]
    vals = [summary[c]["step_ms"] for c in names]
    colors = ["#999999" if n in ("single", "unconnected") else "#d62728" if n == "mwms"
              else "#1f77b4" for n in names]
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    xs = list(range(len(names)))
    ax.bar(xs, vals, color=colors)
    for x, c in zip(xs, names):
        reps = summary[c]["per_rep_ms"]
        ax.plot([x] * len(reps), reps, "k.", ms=4)
    for x, v in zip(xs, vals):
        ax.text(x, v, "%.1f" % v, ha="center", va="bottom", fontsize=8)
    if "unconnected" in summary:
        t = TARGET_STEP_VS_UNCONNECTED * summary["unconnected"]["step_ms"]
        ax.axhline(t, color="green", ls="--", lw=1,
                   label="%.1f x unconnected (%.1f ms)" % (TARGET_STEP_VS_UNCONNECTED, t))
    if "mwms" in summary:
        t = summary["mwms"]["step_ms"] / TARGET_THROUGHPUT_VS_MWMS
        ax.axhline(t, color="purple", ls=":", lw=1,
                   label="MWMS / %.1f (%.1f ms)" % (TARGET_THROUGHPUT_VS_MWMS, t))
    ax.legend(fontsize=8, loc="upper left")
    ax.set_xticks(xs)
    ax.set_xticklabels([n if n != "mwms" else "mwms\n(custom loop)" for n in names],
                       rotation=15, fontsize=8)
    ax.set_ylabel("median step time (ms)")
    ax.set_title("Keras MLP 1024-2048-2048-1024-10, batch %d/worker, 2 workers "
                 "(dots: reps)" % BATCH, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_variant(text):
    name, _, assigns = text.partition(":")
    if not name or not assigns:
        raise SystemExit("--fuseopt-variant wants NAME:VAR=VALUE[,VAR=VALUE]: %r" % text)
    env = {}
    for a in assigns.split(","):
        k, eq, v = a.partition("=")
        if not eq or not k.strip().startswith("FUSEOPT_"):
            raise SystemExit("bad assignment %r in --fuseopt-variant %r" % (a, text))
        env[k.strip()] = v.strip()
    return "fuseopt:" + name, env


def _short_error(msg):
    """One line; a PerReplica value's numpy dump cut out."""
    import re
    msg = " ".join(msg.split())
    msg = re.sub(r"numpy= ?array\(.*?\)>", "numpy=...>", msg)
    return msg[:300]


def driver_main(args):
    mpiexec = find_mpiexec()
    os.makedirs(args.out, exist_ok=True)
    base = [c.strip() for c in args.contenders.split(",") if c.strip()]
    for c in base:
        if c not in BASE_CONTENDERS:
            raise SystemExit("unknown contender %r (choose from %s)"
                             % (c, ", ".join(BASE_CONTENDERS)))
    args.variants = dict(parse_variant(v) for v in args.fuseopt_variant)
    contenders = base + list(args.variants) + (["commfloor"] if args.comm_floor else [])
    rng = random.Random(args.seed)
    started = time.time()
    sys.stderr.write("mpiexec: %s; %d reps x %s; quick=%s; inter_op=%d\n"
                     % (mpiexec, args.reps, contenders, args.quick, args.inter_op))
    mwms_fit_probe, probe_raw = None, None
    if args.probe_mwms_fit and "mwms" in base:
        sys.stderr.write("[probe] MWMS model.fit ... ")
        sys.stderr.flush()
        t0 = time.perf_counter()
        try:
            probe_raw = run_job("mwms_fit", {}, mpiexec, args)
            r = probe_raw[0]
            mwms_fit_probe = ("model.fit succeeded" if r["fit_ok"] else
                              "model.fit raised %s: %s" % (r["error_type"],
                                                          _short_error(r["error"])))
        except JobFailed as e:
            mwms_fit_probe = "the probe job itself failed: %s" % " ".join(str(e).split())[:300]
        sys.stderr.write("%.1f s: %s\n" % (time.perf_counter() - t0, mwms_fit_probe[:200]))
    jobs, failures = [], []
    for rep in range(args.reps):
        order = list(contenders)
        rng.shuffle(order)
        for pos, c in enumerate(order):
            load = os.getloadavg()[0]
            sys.stderr.write("[rep %d/%d] %-14s (load %.2f) ... " % (rep + 1, args.reps, c, load))
            sys.stderr.flush()
            t0 = time.perf_counter()
            try:
                results = run_job(c, args.variants, mpiexec, args)
                values = job_value(c, results)
                checks = verify(c, results)
            except JobFailed as e:
                # Recorded and reported; the other jobs go on (a hang is a result too).
                wall = time.perf_counter() - t0
                sys.stderr.write("FAILED after %.1f s\n%s\n" % (wall, str(e)[-3000:]))
                failures.append({"rep": rep, "position": pos, "contender": c,
                                 "wall_s": round(wall, 1), "loadavg_1m_before": load,
                                 "error": str(e)[-6000:]})
                continue
            wall = time.perf_counter() - t0
            extra = ""
            if "phases_ms" in values:
                ph = values["phases_ms"]
                extra = " (pre %.1f / allreduce %.1f [skew %.1f + transfer %.1f] / post %.1f)" % (
                    ph["pre"], ph["comm"], ph.get("skew", float("nan")),
                    ph.get("transfer", float("nan")), ph["post"])
            if c == "commfloor":
                sys.stderr.write("%.1f s: %s\n" % (wall, ", ".join(
                    "%s %.2f ms" % kv for kv in values.items())))
            else:
                sys.stderr.write("%.1f s: %.2f ms%s\n" % (wall, values["step_ms"], extra))
            jobs.append({"rep": rep, "position": pos, "contender": c, "quick": args.quick,
                         "env": args.variants.get(c, {}), "wall_s": round(wall, 2),
                         "loadavg_1m_before": load, "loadavg_1m_after": os.getloadavg()[0],
                         "values": values, "checksums": checks, "results": results})

    meta = {
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "started": datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
        "duration_s": round(time.time() - started, 1), "mpiexec": mpiexec, "workers": NRANKS,
        "reps": args.reps, "quick": args.quick, "seed": args.seed, "steps": steps_for(args.quick),
        "batch_per_worker": BATCH, "lr": LR, "dims": DIMS, "params": n_params(),
        "inter_op": args.inter_op, "intra_op": 1, "mwms_impl": args.mwms_impl,
        "mwms_mode": "custom loop (tf.function + strategy.run), not model.fit",
        "contenders": contenders, "variants": args.variants,
        "python": sys.version.split()[0], "platform": platform.platform(),
        "cpus": os.cpu_count(), "reference_ms": REFERENCE,
    }
    return write_outputs(args, meta, contenders, jobs, failures,
                         {"summary": mwms_fit_probe, "results": probe_raw})


def write_outputs(args, meta, contenders, jobs, failures, probe):
    summary = summarize(jobs, contenders)
    report, verdicts, targets = build_report(summary, jobs, contenders, args, probe["summary"],
                                             failures)
    with open(os.path.join(args.out, "tf_train.json"), "w") as f:
        json.dump({"meta": meta, "summary": summary, "targets": targets, "failures": failures,
                   "mwms_fit_probe": probe, "table_markdown": report, "jobs": jobs}, f,
                  separators=(",", ":"))
        f.write("\n")
    plot(summary, contenders, os.path.join(args.out, "tf_train.png"))
    with open(os.path.join(args.out, "tf_train.md"), "w") as f:
        f.write("# Keras training-step benchmark\n\n`%s` (%s, %d reps, %.0f s)\n\n%s\n"
                % (meta["command"], meta["started"], meta["reps"], meta["duration_s"], report))
    print(report)
    print()
    print("Wrote %s, %s, %s" % tuple(os.path.join(args.out, n) for n in
                                     ("tf_train.json", "tf_train.png", "tf_train.md")))
    fails = sum(1 for ok in verdicts if not ok)
    print("%d target(s) passed, %d failed%s" % (len(verdicts) - fails, fails,
                                                " (CAUTION: suspect run, see above)"
                                                if targets.get("suspect") else ""))
    return 1 if (args.strict and fails) else 0


def rerender_main(args):
    """Rebuilds the report, chart and files from a saved tf_train.json."""
    with open(args.rerender) as f:
        d = json.load(f)
    meta = d["meta"]
    args.reps, args.quick = meta["reps"], meta["quick"]
    args.inter_op, args.mwms_impl = meta["inter_op"], meta["mwms_impl"]
    args.variants = meta.get("variants", {})
    present = {j["contender"] for j in d["jobs"]} | {fl["contender"]
                                                    for fl in d.get("failures", [])}
    contenders = meta.get("contenders") or (
        [c for c in BASE_CONTENDERS if c in present] + list(args.variants)
        + (["commfloor"] if "commfloor" in present else []))
    meta["contenders"] = contenders
    os.makedirs(args.out, exist_ok=True)
    return write_outputs(args, meta, contenders, d["jobs"], d.get("failures", []),
                         d.get("mwms_fit_probe") or {"summary": None, "results": None})


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer timed steps (20 instead of 40)")
    p.add_argument("--reps", type=int, default=3, help="jobs per contender (interleaved)")
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                 "results"))
    p.add_argument("--timeout", type=float, default=300, help="seconds per job")
    p.add_argument("--contenders", default=",".join(BASE_CONTENDERS))
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
    p.add_argument("--seed", type=int, default=None, help="shuffle seed (default: random)")
    p.add_argument("--strict", action="store_true", help="exit 1 if a target fails")
    p.add_argument("--rerender", metavar="JSON",
                   help="rebuild the report and files from a saved tf_train.json (no jobs)")
    # Worker-only flags.
    p.add_argument("--worker", choices=("single", "fuseopt", "mwms", "commfloor"),
                   help=argparse.SUPPRESS)
    p.add_argument("--result-dir", help=argparse.SUPPRESS)
    p.add_argument("--handshake", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--proc-index", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--ports", help=argparse.SUPPRESS)
    p.add_argument("--mwms-fit", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker == "mwms":
        return worker_mwms(args)
    if args.worker == "commfloor":
        return worker_commfloor(args)
    if args.worker:
        return worker_fit(args)
    if args.rerender:
        return rerender_main(args)
    if args.reps < 1:
        p.error("--reps must be >= 1")
    return driver_main(args)


if __name__ == "__main__":
    sys.exit(main())
