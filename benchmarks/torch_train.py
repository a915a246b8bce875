#!/usr/bin/env python
"""Training-step benchmark: fuseopt's DistributedOptimizer against DDP (gloo).

Usage (from the repository root)::

    python benchmarks/torch_train.py [--quick] [--reps N] [--out benchmarks/results]
        [--fuseopt-variant NAME:VAR=VALUE[,VAR=VALUE...]]...

Two models, per-rank batch 64, SGD lr=0.01, fixed synthetic data (created once
per process, seeded by rank), ``torch.set_num_threads(1)`` in every process:

  mlp    Linear 1024-2048-2048-1024-10 with ReLU (~8.4M parameters, 8 tensors),
         cross-entropy on 10 classes;
  small  100 x Linear(64, 64) with ReLU between (200 parameter tensors),
         loss = output.pow(2).mean().

Contenders, each its own process set (the driver is this file without
``--worker``; each job is this file with ``--worker ...``):

  single       1 process, no communication (scaling-efficiency baseline);
  unconnected  2 independent processes (no MPI) started together: a start
               handshake per model, and each keeps computing after its timed
               steps until both are done, so every timed step ran with both
               cores busy. The compute-only baseline for 2 ranks; the figure
               is the mean of the two processes' medians;
  fuseopt      ``mpiexec -n 2`` with ``fuseopt.torch.DistributedOptimizer``;
  ddp          ``mpiexec -n 2`` with DistributedDataParallel over gloo (rank
               and world size from PMI_RANK/PMI_SIZE, MASTER_ADDR=127.0.0.1,
               a free port).

``--fuseopt-variant`` adds more fuseopt contenders run with extra environment
variables (e.g. ``cyc0.5:FUSEOPT_CYCLE_TIME_MS=0.5``); they are reported next
to the others but the targets are judged on plain ``fuseopt`` only.

Per model each process warms up, then times every step (forward, backward,
``opt.step()``, ``opt.zero_grad()``; phases recorded separately). Per job: the
median over steps of the slowest rank's step time (2-rank jobs). Table: median
over repetitions; contenders are interleaved in a shuffled order each
repetition because the machine is noisy, and before each job the driver waits
(``--settle``, up to 60 s) for the machine to be >= 90% idle. Each process also
records the CPU time per step of its training thread and of its other threads
(fuseopt's loop thread, gloo's threads): on 2 cores, that CPU is taken from
compute.

Overhead = step - unconnected step. Scaling efficiency = 2-rank throughput /
(2 x single throughput) = single step / 2-rank step.
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
MODELS = ("mlp", "small")
BASE_CONTENDERS = ("single", "unconnected", "fuseopt", "ddp")
MPI_KINDS = ("fuseopt", "ddp")
PHASES = ("step", "fwd", "bwd", "opt", "zero")

# Horovod, measured earlier on this machine with the same workloads (ms/step).
HOROVOD = {
    "mlp": {"step": 63.8, "unconnected": 54.3, "eff": 0.76},
    "small": {"step": 10.7, "unconnected": 6.4, "eff": None},
}
DDP_REF_EFF = {"mlp": 0.55}
TARGET_OVERHEAD_FRACTION_OF_HOROVOD = 0.5   # fuseopt overhead <= half Horovod's
TARGET_MLP_EFF = 0.88

DONE = "@@TORCH_TRAIN_DONE@@"
READY = "@@TORCH_TRAIN_READY@@"


def steps_for(model, quick):
    """(warmup, timed) steps for a model."""
    if model == "mlp":
        return (5, 20) if quick else (10, 50)
    return (5, 60) if quick else (10, 200)


# --------------------------------------------------------------------------
# Worker side.
# --------------------------------------------------------------------------

def _setup_torch():
    import torch
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    # A 100-layer stack drifts towards tiny activations; denormals would make
    # compute (not communication) erratic. Same setting for every contender.
    torch.set_flush_denormal(True)
    return torch


def build(torch, model_name, data_seed):
    """(model, x, y, loss_fn) with weights identical on every process."""
    nn = torch.nn
    torch.manual_seed(1234)
    if model_name == "mlp":
        dims = [1024, 2048, 2048, 1024, 10]
        layers = []
        for i in range(len(dims) - 1):
            layers.append(nn.Linear(dims[i], dims[i + 1]))
            if i < len(dims) - 2:
                layers.append(nn.ReLU())
        model = nn.Sequential(*layers)
        ce = nn.CrossEntropyLoss()
        in_dim, loss_fn = 1024, (lambda out, y: ce(out, y))
    elif model_name == "small":
        layers = []
        for i in range(100):
            lin = nn.Linear(64, 64)
            # He init keeps activations O(1) through 100 ReLU layers.
            nn.init.normal_(lin.weight, std=(2.0 / 64) ** 0.5)
            nn.init.zeros_(lin.bias)
            layers.append(lin)
            if i < 99:
                layers.append(nn.ReLU())
        model = nn.Sequential(*layers)
        in_dim, loss_fn = 64, (lambda out, y: out.pow(2).mean())
    else:
        raise ValueError(model_name)
    g = torch.Generator().manual_seed(data_seed)
    x = torch.randn(BATCH, in_dim, generator=g)
    y = torch.randint(0, 10, (BATCH,), generator=g)
    return model, x, y, loss_fn


def run_steps(model, opt, x, y, loss_fn, n, rec=None):
    import torch  # noqa: F401  (already set up)
    pc = time.perf_counter
    loss = None
    for _ in range(n):
        t0 = pc()
        out = model(x)
        loss = loss_fn(out, y)
        t1 = pc()
        loss.backward()
        t2 = pc()
        opt.step()
        t3 = pc()
        opt.zero_grad()
        t4 = pc()
        if rec is not None:
            rec["step"].append((t4 - t0) * 1e3)
            rec["fwd"].append((t1 - t0) * 1e3)
            rec["bwd"].append((t2 - t1) * 1e3)
            rec["opt"].append((t3 - t2) * 1e3)
            rec["zero"].append((t4 - t3) * 1e3)
            rec["t_start"].append(t0)
    return float(loss.detach()) if loss is not None else None


def thread_cpu_s():
    """{tid: (name, cpu seconds, involuntary context switches)} of this process (Linux)."""
    out = {}
    tck = os.sysconf("SC_CLK_TCK")
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open("/proc/self/task/%s/stat" % tid) as f:
                st = f.read()
            with open("/proc/self/task/%s/status" % tid) as f:
                status = f.read()
        except OSError:
            continue
        fields = st[st.rindex(")") + 2:].split()
        csw = int(status.split("nonvoluntary_ctxt_switches:")[1].split()[0])
        out[int(tid)] = (st[st.index("(") + 1:st.rindex(")")],
                         (int(fields[11]) + int(fields[12])) / tck, csw)
    return out


def cpu_per_step(before, after, steps):
    """CPU ms per step of the main thread and of all other threads together."""
    main_tid = threading.get_native_id()
    res = {"main_ms": 0.0, "other_ms": 0.0, "main_invol_csw": 0.0, "threads": {}}
    for tid, (name, cpu, csw) in after.items():
        cpu0, csw0 = (before[tid][1], before[tid][2]) if tid in before else (0.0, 0)
        ms = (cpu - cpu0) * 1e3 / steps
        if tid == main_tid:
            res["main_ms"] = ms
            res["main_invol_csw"] = (csw - csw0) / steps
        else:
            res["other_ms"] += ms
        if ms > 0.01:
            res["threads"]["%s/%d" % (name, tid)] = round(ms, 3)
    return res


def checksum(torch, model):
    with torch.no_grad():
        s = sum(float(p.double().sum()) for p in model.parameters())
        q = sum(float(p.double().pow(2).sum()) for p in model.parameters())
    return [s, q]


class _StdinLines:
    """Unbuffered line reader on fd 0 (select() must see what is unread)."""

    def __init__(self):
        self.buf = b""

    def poll(self, timeout):
        """A line if one arrives within timeout seconds, else None."""
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


def _say(msg):
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


def worker_main(args):
    torch = _setup_torch()
    kind = args.worker
    models = args.models.split(",")
    rank, size = 0, 1
    hvd = dist = None
    info = {}
    if kind == "fuseopt":
        import fuseopt
        import fuseopt.torch as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
        info["fuseopt_settings"] = fuseopt.settings()
    elif kind == "ddp":
        import torch.distributed as dist
        rank, size = int(os.environ["PMI_RANK"]), int(os.environ["PMI_SIZE"])
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=size,
                                timeout=datetime.timedelta(seconds=120))
    elif kind == "single":
        rank = args.proc_index
    if kind in MPI_KINDS and size != NRANKS:
        raise SystemExit("%s worker expects %d ranks, got %d" % (kind, NRANKS, size))
    stdin = _StdinLines() if args.handshake else None
    out = {"kind": kind, "rank": rank, "size": size, "pid": os.getpid(),
           "torch": torch.__version__, "threads": torch.get_num_threads(),
           "env": {k: v for k, v in os.environ.items() if k.startswith("FUSEOPT_")},
           "info": info, "models": {}}
    for model_name in models:
        warm, timed = steps_for(model_name, args.quick)
        model, x, y, loss_fn = build(torch, model_name, data_seed=1000 + rank)
        nparams = sum(p.numel() for p in model.parameters())
        ntensors = sum(1 for _ in model.parameters())
        if kind == "fuseopt":
            opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR),
                                           named_parameters=model.named_parameters())
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            net = model
        elif kind == "ddp":
            net = torch.nn.parallel.DistributedDataParallel(model)
            opt = torch.optim.SGD(net.parameters(), lr=LR)
        else:
            net = model
            opt = torch.optim.SGD(model.parameters(), lr=LR)
        if stdin is not None:        # unconnected: start together
            _say("%s %s" % (READY, model_name))
            stdin.expect("GO", args.timeout)
        rec = {k: [] for k in PHASES + ("t_start",)}
        t_begin = time.perf_counter()
        loss0 = run_steps(net, opt, x, y, loss_fn, warm)
        cpu0 = thread_cpu_s()
        loss1 = run_steps(net, opt, x, y, loss_fn, timed, rec)
        t_end = time.perf_counter()
        cpu = cpu_per_step(cpu0, thread_cpu_s(), timed)
        filler = 0
        if stdin is not None:        # keep the core busy until the other is done too
            _say("%s %s" % (DONE, model_name))
            deadline = time.monotonic() + args.timeout
            while True:
                line = stdin.poll(0)
                if line == "STOP":
                    break
                if line is not None:
                    raise SystemExit("unexpected %r from the driver" % line)
                if time.monotonic() > deadline:
                    raise SystemExit("no STOP from the driver")
                run_steps(net, opt, x, y, loss_fn, 1)
                filler += 1
        if kind == "fuseopt":
            opt.remove_hooks()
        out["models"][model_name] = {
            "params": nparams, "tensors": ntensors, "warmup": warm, "timed": timed,
            "samples_ms": {k: [round(v, 4) for v in rec[k]] for k in PHASES},
            "t_start": rec["t_start"], "t_begin": t_begin, "t_end": t_end,
            "filler_steps": filler, "cpu_per_step": cpu, "loss_after_warmup": loss0,
            "loss_last": loss1,
            "checksum": checksum(torch, model),
        }
        del net, opt, model
    if kind == "fuseopt":
        hvd.shutdown()
    elif kind == "ddp":
        dist.destroy_process_group()
    with open(os.path.join(args.result_dir, "%s.%d.json" % (kind, rank)), "w") as f:
        json.dump(out, f)
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


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.update(extra or {})
    return env


def _worker_cmd(kind, args, result_dir, extra=()):
    return [sys.executable, os.path.abspath(__file__), "--worker", kind,
            "--models", ",".join(args.models), "--result-dir", result_dir,
            "--timeout", str(args.timeout)] + (["--quick"] if args.quick else []) + list(extra)


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


def run_unconnected(args, result_dir, tmp):
    """Two independent processes, handshake per model (see the module docstring)."""
    procs, errs, queues = [], [], []
    try:
        for i in range(NRANKS):
            cmd = _worker_cmd("single", args, result_dir,
                              ["--handshake", "--proc-index", str(i)])
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
            left = deadline - time.monotonic()
            try:
                line = queues[i].get(timeout=max(0.0, left))
            except queue.Empty:
                raise JobFailed("unconnected process %d: timed out waiting for %r" % (i, word))
            if line != word:
                raise JobFailed("unconnected process %d: expected %r, got %r\n--- stderr ---\n%s"
                                % (i, word, line, _tail(errs[i].name)))

        def send(word):
            for p in procs:
                p.stdin.write(word + "\n")
                p.stdin.flush()

        for m in args.models:
            for i in range(NRANKS):
                expect(i, "%s %s" % (READY, m))
            send("GO")
            for i in range(NRANKS):
                expect(i, "%s %s" % (DONE, m))
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
    return _read_results(result_dir, "single", NRANKS)


def run_job(contender, variants, mpiexec, args):
    """One job of a contender; returns the per-process result dicts and stderr tail."""
    tmp = tempfile.mkdtemp(prefix="torch_train_")
    try:
        if contender == "single":
            stderr_path = os.path.join(tmp, "stderr")
            run_simple(_worker_cmd("single", args, tmp), _base_env(), args.timeout, contender,
                       stderr_path)
            return _read_results(tmp, "single", 1), _tail(stderr_path)
        if contender == "unconnected":
            res = run_unconnected(args, tmp, tmp)
            return res, _tail(os.path.join(tmp, "unconnected.0.stderr"))
        kind = "fuseopt" if contender.startswith("fuseopt") else contender
        extra_env = dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
        extra_env.update(variants.get(contender, {}))
        cmd = [mpiexec, "-n", str(NRANKS)] + _worker_cmd(kind, args, tmp)
        stderr_path = os.path.join(tmp, "stderr")
        run_simple(cmd, _base_env(extra_env), args.timeout, contender, stderr_path)
        return _read_results(tmp, kind, NRANKS), _tail(stderr_path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def job_value(contender, results, model):
    """Per-job statistics for one model: the step figure and phase medians."""
    recs = [r["models"][model] for r in results]
    med = statistics.median
    cpu = {k: statistics.mean(r["cpu_per_step"][k] for r in recs)
           for k in ("main_ms", "other_ms", "main_invol_csw")}
    if contender == "single":
        s = recs[0]["samples_ms"]
        return {"step_ms": med(s["step"]), "cpu": cpu,
                "phases_ms": {k: med(s[k]) for k in PHASES}}
    if contender == "unconnected":
        per = [med(r["samples_ms"]["step"]) for r in recs]
        # Overlap check: the timed windows of the two processes.
        b = max(r["t_begin"] for r in recs)
        e = min(r["t_end"] for r in recs)
        span = max(r["t_end"] for r in recs) - min(r["t_begin"] for r in recs)
        return {"step_ms": statistics.mean(per), "per_process_ms": per, "cpu": cpu,
                "timed_window_overlap": round(max(0.0, e - b) / span, 3) if span > 0 else None,
                "filler_steps": [r["filler_steps"] for r in recs],
                "phases_ms": {k: statistics.mean(med(r["samples_ms"][k]) for r in recs)
                              for k in PHASES}}
    # 2-rank jobs: per step, the slowest rank.
    steps = [r["samples_ms"]["step"] for r in recs]
    slowest = [max(v) for v in zip(*steps)]
    return {"step_ms": med(slowest), "rank0_step_ms": med(steps[0]), "cpu": cpu,
            "per_rank_ms": [med(s) for s in steps],
            "phases_ms": {k: statistics.mean(med(r["samples_ms"][k]) for r in recs)
                          for k in PHASES}}


def verify(contender, results, model):
    """2-rank jobs: every rank must end with the same parameters (gradients averaged)."""
    if contender in ("single", "unconnected"):
        return None
    sums = [r["models"][model]["checksum"] for r in results]
    for a, b in zip(sums[0], sums[1]):
        if abs(a - b) > 1e-6 * max(1.0, abs(a)):
            raise JobFailed("%s/%s: ranks diverged: parameter checksums %s vs %s"
                            % (contender, model, sums[0], sums[1]))
    return sums[0]


def fmt(v, spec="%.2f"):
    return "—" if v is None else spec % v


def summarize(jobs, contenders, models):
    summary = {}
    for m in models:
        summary[m] = {}
        for c in contenders:
            mine = [j for j in jobs if j["contender"] == c]
            if not mine:
                continue
            # Jobs during which other processes kept a core busy measure them,
            # not us: use the clean jobs when there are any.
            clean = [j for j in mine if not j.get("noisy")]
            vals = [j["values"][m] for j in (clean or mine)]
            summary[m][c] = {
                "step_ms": statistics.median(v["step_ms"] for v in vals),
                "jobs_used": len(vals), "jobs_clean": len(clean), "jobs": len(mine),
                "per_rep_ms": [round(j["values"][m]["step_ms"], 3) for j in mine],
                "per_rep_noisy": [bool(j.get("noisy")) for j in mine],
                "phases_ms": {k: statistics.median(v["phases_ms"][k] for v in vals)
                              for k in PHASES},
                "cpu": {k: statistics.median(v["cpu"][k] for v in vals)
                        for k in ("main_ms", "other_ms", "main_invol_csw")},
            }
    return summary


def paired_overheads(jobs, contender, model):
    """Per repetition: contender step - unconnected step of the same repetition."""
    by_rep = {}
    for j in jobs:
        if not j.get("noisy"):
            by_rep.setdefault(j["rep"], {})[j["contender"]] = j["values"][model]["step_ms"]
    return [round(r[contender] - r["unconnected"], 3) for _, r in sorted(by_rep.items())
            if contender in r and "unconnected" in r]


def build_report(summary, jobs, contenders, models, quick):
    lines, verdicts, targets = [], [], {}
    for m in models:
        s = summary[m]
        single = s.get("single", {}).get("step_ms")
        unc = s.get("unconnected", {}).get("step_ms")
        ddp_over = s["ddp"]["step_ms"] - unc if "ddp" in s and unc is not None else None
        hv = HOROVOD[m]
        warm, timed = steps_for(m, quick)
        lines.append("### %s (%s; batch %d/rank; %d warm-up + %d timed steps)\n"
                     % (m, "MLP 1024-2048-2048-1024-10" if m == "mlp"
                        else "100 x Linear(64,64)", BATCH, warm, timed))
        lines.append("| contender | median step ms | steps/s | overhead vs unconnected (ms) "
                     "| overhead / DDP overhead | scaling efficiency | fwd / bwd / opt.step ms "
                     "| CPU ms/step: main / other threads (invol. csw) "
                     "| per-rep step ms | paired overhead per rep (ms) |")
        lines.append("|---|---:|---:|---:|---:|---:|---|---|---|---|")
        for c in contenders:
            if c not in s:
                continue
            step = s[c]["step_ms"]
            over = step - unc if unc is not None and c not in ("single", "unconnected") else None
            ratio = over / ddp_over if over is not None and ddp_over else None
            eff = single / step if single is not None and c != "single" else None
            ph = s[c]["phases_ms"]
            paired = paired_overheads(jobs, c, m) if over is not None else []
            cpu = s[c]["cpu"]
            lines.append("| %s | %.2f | %.1f | %s | %s | %s | %.2f / %.2f / %.2f "
                         "| %.1f / %.1f (%.0f) | %s | %s |" % (
                c, step, 1e3 / step, fmt(over), fmt(ratio), fmt(eff * 100 if eff else None,
                                                                "%.0f%%"),
                ph["fwd"], ph["bwd"], ph["opt"], cpu["main_ms"], cpu["other_ms"],
                cpu["main_invol_csw"], ", ".join(
                    "%.2f%s" % (v, "*" if noisy else "")
                    for v, noisy in zip(s[c]["per_rep_ms"], s[c]["per_rep_noisy"])),
                ", ".join("%.2f" % v for v in paired) or "—"))
        hv_over = hv["step"] - hv["unconnected"]
        lines.append("| horovod (reference, measured earlier) | %.2f | %.1f | %.2f | %s | %s | "
                     "— | — | — | — |" % (hv["step"], 1e3 / hv["step"], hv_over,
                                      fmt(hv_over / ddp_over if ddp_over else None),
                                      fmt(hv["eff"] * 100 if hv["eff"] else None, "%.0f%%")))
        lines.append("")
        # Targets (plain fuseopt only).
        if "fuseopt" in s and unc is not None:
            f_over = s["fuseopt"]["step_ms"] - unc
            abs_target = TARGET_OVERHEAD_FRACTION_OF_HOROVOD * hv_over
            scaled_target = abs_target * unc / hv["unconnected"]
            ok = f_over <= scaled_target
            verdicts.append(ok)
            targets["%s_overhead" % m] = {
                "fuseopt_overhead_ms": f_over, "ddp_overhead_ms": ddp_over,
                "target_ms_scaled": scaled_target, "target_ms_absolute": abs_target,
                "pass": ok, "pass_absolute": f_over <= abs_target,
                "paired_fuseopt_overheads_ms": paired_overheads(jobs, "fuseopt", m)}
            lines.append(
                "- **%s** target: fuseopt overhead %.2f ms <= %.2f ms (half of Horovod's %.1f ms, "
                "scaled by measured unconnected %.2f / %.1f ms; unscaled %.2f ms: %s) -> **%s**. "
                "DDP overhead: %s ms." % (
                    "PASS" if ok else "FAIL", f_over, scaled_target, hv_over, unc,
                    hv["unconnected"], abs_target, "pass" if f_over <= abs_target else "fail",
                    "PASS" if ok else "FAIL", fmt(ddp_over)))
            if m == "mlp" and single is not None:
                eff = single / s["fuseopt"]["step_ms"]
                ok = eff >= TARGET_MLP_EFF
                verdicts.append(ok)
                targets["mlp_scaling_efficiency"] = {"fuseopt": eff, "target": TARGET_MLP_EFF,
                                                     "pass": ok,
                                                     "ddp": single / s["ddp"]["step_ms"]
                                                     if "ddp" in s else None}
                lines.append("- **%s** target: fuseopt MLP scaling efficiency %.0f%% >= %.0f%% "
                             "(Horovod %.0f%%, DDP reference %.0f%%, DDP here %s) -> **%s**." % (
                                 "PASS" if ok else "FAIL", eff * 100, TARGET_MLP_EFF * 100,
                                 hv["eff"] * 100, DDP_REF_EFF["mlp"] * 100,
                                 fmt(targets["mlp_scaling_efficiency"]["ddp"] * 100
                                     if "ddp" in s else None, "%.0f%%"),
                                 "PASS" if ok else "FAIL"))
        if "unconnected" in s and single is not None:
            lines.append("- compute-only ceiling: unconnected efficiency (single / unconnected) "
                         "= %.0f%%." % (100 * single / unc))
        lines.append("")
    return "\n".join(lines), verdicts, targets


def plot(summary, contenders, models, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 4.8))
    if len(models) == 1:
        axes = [axes]
    for ax, m in zip(axes, models):
        s = summary[m]
        names = [c for c in contenders if c in s] + ["horovod\n(ref)"]
        vals = [s[c]["step_ms"] for c in contenders if c in s] + [HOROVOD[m]["step"]]
        colors = ["#999999" if n in ("single", "unconnected") else
                  "#d62728" if n == "ddp" else "#bbbbbb" if n.startswith("horovod")
                  else "#1f77b4" for n in names]
        xs = list(range(len(names)))
        ax.bar(xs, vals, color=colors, hatch=None)
        top = max(vals)
        for x, c in zip(xs, [c for c in contenders if c in s]):
            for v, noisy in zip(s[c]["per_rep_ms"], s[c]["per_rep_noisy"]):
                if not noisy:
                    top = max(top, v)
                ax.plot([x], [v], "x" if noisy else ".", color="#888888" if noisy else "k",
                        ms=5 if noisy else 4)
        ax.set_ylim(0, top * 1.25)
        for x, v in zip(xs, vals):
            ax.text(x, v, "%.1f" % v, ha="center", va="bottom", fontsize=8)
        if "unconnected" in s:
            unc = s["unconnected"]["step_ms"]
            hv = HOROVOD[m]
            tgt = unc + TARGET_OVERHEAD_FRACTION_OF_HOROVOD * (hv["step"] - hv["unconnected"]) \
                * unc / hv["unconnected"]
            ax.axhline(tgt, color="green", ls="--", lw=1, label="fuseopt target (%.1f ms)" % tgt)
            ax.axhline(unc, color="gray", ls=":", lw=1, label="unconnected (%.1f ms)" % unc)
            ax.legend(fontsize=8, loc="lower right")
        ax.set_xticks(xs)
        ax.set_xticklabels(names, rotation=20, fontsize=8)
        ax.set_ylabel("median step time (ms)")
        ax.set_title({"mlp": "MLP 1024-2048-2048-1024-10 (8.4M params)",
                      "small": "100 x Linear(64,64) (200 tensors)"}[m])
    fig.suptitle("Training step time, batch %d/rank, 2 ranks (dots: repetitions; x: noisy, "
                 "left out)" % BATCH)
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
        if not eq or not k.strip() or not k.strip().replace("_", "").isalnum():
            raise SystemExit("bad assignment %r in --fuseopt-variant %r" % (a, text))
        env[k.strip()] = v.strip()
    return "fuseopt:" + name, env


def _cpu_times():
    with open("/proc/stat") as f:
        vals = [int(v) for v in f.readline().split()[1:]]
    return sum(vals), vals[3] + vals[4]   # total, idle + iowait


def settle(max_wait_s, idle_needed=0.9, window_s=1.0):
    """Waits (up to max_wait_s) until the machine is >= idle_needed idle over a
    window (other jobs share it). Returns (idle fraction seen, seconds waited)."""
    t0 = time.monotonic()
    idle = None
    while True:
        try:
            a = _cpu_times()
            time.sleep(window_s)
            b = _cpu_times()
        except OSError:
            return None, 0.0
        idle = (b[1] - a[1]) / max(1, b[0] - a[0])
        waited = time.monotonic() - t0
        if idle >= idle_needed or waited >= max_wait_s:
            return idle, waited


def _self_and_children_cpu_s():
    import resource
    a = resource.getrusage(resource.RUSAGE_SELF)
    b = resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def foreign_cores(stat0, ours0, wall, hz):
    """Mean cores used by processes other than the driver and its children since stat0."""
    if stat0 is None or wall <= 0:
        return None
    stat1 = _cpu_times()
    busy_s = ((stat1[0] - stat0[0]) - (stat1[1] - stat0[1])) / hz
    return max(0.0, busy_s - (_self_and_children_cpu_s() - ours0)) / wall


def run_measured_job(c, variants, mpiexec, args, rep, attempt):
    """One job plus how much CPU other processes used meanwhile (in cores)."""
    idle, waited = settle(args.settle) if args.settle > 0 else (None, 0.0)
    load = os.getloadavg()[0]
    sys.stderr.write("[rep %d/%d] %-14s (load %.2f, idle %s after %.0f s) ... "
                     % (rep + 1, args.reps, c, load,
                        "?" if idle is None else "%.0f%%" % (100 * idle), waited))
    sys.stderr.flush()
    hz = os.sysconf("SC_CLK_TCK")
    try:
        stat0 = _cpu_times()
    except OSError:
        stat0 = None
    ours0 = _self_and_children_cpu_s()
    t0 = time.perf_counter()
    try:
        results, stderr = run_job(c, variants, mpiexec, args)
        values, checks = {}, {}
        for m in args.models:
            values[m] = job_value(c, results, m)
            checks[m] = verify(c, results, m)
    except JobFailed as e:
        wall = time.perf_counter() - t0
        foreign = foreign_cores(stat0, ours0, wall, hz)
        sys.stderr.write("\nBENCHMARK JOB FAILED (other processes used %s cores meanwhile)\n%s\n"
                         % ("?" if foreign is None else "%.2f" % foreign, e))
        if not args.keep_going:
            raise SystemExit(2)
        return {"rep": rep, "attempt": attempt, "contender": c, "failed": True,
                "error": str(e)[-8000:], "wall_s": round(wall, 2),
                "env": variants.get(c, {}), "foreign_cores": foreign}
    wall = time.perf_counter() - t0
    foreign = foreign_cores(stat0, ours0, wall, hz)
    sys.stderr.write("%.1f s, foreign CPU %s cores: %s\n" % (
        wall, "?" if foreign is None else "%.2f" % foreign,
        ", ".join("%s %.2f ms" % (m, values[m]["step_ms"]) for m in args.models)))
    if args.verbose and stderr.strip():
        sys.stderr.write(stderr + "\n")
    return {"rep": rep, "attempt": attempt, "contender": c, "quick": args.quick,
            "env": variants.get(c, {}), "wall_s": round(wall, 2), "loadavg_1m_before": load,
            "idle_before": idle, "settle_wait_s": round(waited, 1),
            "foreign_cores": None if foreign is None else round(foreign, 3),
            "loadavg_1m_after": os.getloadavg()[0], "values": values, "checksums": checks,
            "results": results, "stderr_tail": stderr[-4000:]}


def driver_main(args):
    mpiexec = find_mpiexec()
    os.makedirs(args.out, exist_ok=True)
    base = [c.strip() for c in args.contenders.split(",") if c.strip()]
    for c in base:
        if c not in BASE_CONTENDERS:
            raise SystemExit("unknown contender %r (choose from %s)"
                             % (c, ", ".join(BASE_CONTENDERS)))
    variants = dict(parse_variant(v) for v in args.fuseopt_variant)
    contenders = base + list(variants)
    rng = random.Random(args.seed)
    jobs, discarded, failed = [], [], []
    started = time.time()
    sys.stderr.write("mpiexec: %s; %d reps x %s; models %s; quick=%s\n"
                     % (mpiexec, args.reps, contenders, args.models, args.quick))
    for rep in range(args.reps):
        order = list(contenders)
        rng.shuffle(order)
        for pos, c in enumerate(order):
            for attempt in range(args.retry_noisy + 1):
                job = run_measured_job(c, variants, mpiexec, args, rep, attempt)
                job["position"] = pos
                if job.get("failed"):
                    failed.append(job)
                    break
                noisy = job["foreign_cores"] is not None and job["foreign_cores"] > args.max_foreign
                if not noisy or attempt == args.retry_noisy:
                    break
                discarded.append(job)
                sys.stderr.write("    (other processes used %.2f cores during the job: rerun)\n"
                                 % job["foreign_cores"])
            if job.get("failed"):
                continue
            job["noisy"] = noisy
            jobs.append(job)

    if not jobs:
        sys.stderr.write("\nEVERY JOB FAILED\n")
        return 2
    summary = summarize(jobs, contenders, args.models)
    table, verdicts, targets = build_report(summary, jobs, contenders, args.models, args.quick)
    loads = [j["loadavg_1m_before"] for j in jobs]
    notes = [
        "Per job: median over timed steps of the slowest rank's step time (2-rank jobs); "
        "unconnected: mean of the two processes' medians. Cells: median over the clean jobs "
        "(of %d per contender, interleaved in shuffled order; all jobs if none is clean); "
        "'*' marks a noisy job (other processes used > %.2f cores meanwhile), left out of "
        "medians and of the paired (same-repetition, both clean) overheads. Overheads and "
        "ratios use the medians." % (args.reps, args.max_foreign),
        "fwd/bwd/opt.step: median phase times (mean over ranks). fuseopt waits for its "
        "allreduces in opt.step(); DDP waits at the end of backward.",
        "CPU ms/step: CPU time per timed step (from /proc, 10 ms ticks; mean over ranks) of "
        "the training thread and of all other threads of the process (fuseopt: its loop "
        "thread; DDP: gloo's threads), and the training thread's involuntary context "
        "switches per step. With 2 ranks on 2 cores, other threads' CPU comes out of compute.",
        "CPU used by other processes during each kept job (cores, mean over the job): %s; "
        "%d noisy job(s) (> %.2f cores) were rerun and discarded (kept in the JSON); %d kept "
        "job(s) are still noisy." % (
            ", ".join("?" if j["foreign_cores"] is None else "%.2f" % j["foreign_cores"]
                      for j in jobs), len(discarded), args.max_foreign,
            sum(1 for j in jobs if j["noisy"])),
        "1-minute load average when jobs started: median %.2f, max %.2f (%d cores); "
        "machine idle just before the jobs (1 s window, after waiting up to %.0f s for "
        ">= 90%%): %s." % (statistics.median(loads), max(loads), os.cpu_count() or 0,
                           args.settle, ", ".join(
                               "?" if j["idle_before"] is None else "%.0f%%"
                               % (100 * j["idle_before"]) for j in jobs)),
    ]
    for m in args.models:
        f = [j["checksums"][m] for j in jobs if j["contender"] == "fuseopt" and j["checksums"][m]]
        d = [j["checksums"][m] for j in jobs if j["contender"] == "ddp" and j["checksums"][m]]
        if f and d:
            rel = abs(f[0][1] - d[0][1]) / max(1e-12, abs(d[0][1]))
            notes.append("%s: ranks agree in every 2-rank job; final sum(p^2) fuseopt vs DDP "
                         "differ by %.1e (relative)." % (m, rel))
    if failed:
        notes.insert(0, "**%d JOB(S) FAILED** and are left out (--keep-going): %s. Errors are "
                     "in the JSON (failed_jobs)." % (len(failed), ", ".join(
                         "%s (rep %d): %s" % (j["contender"], j["rep"] + 1,
                                              j["error"].splitlines()[0][:80]) for j in failed)))
    report = table + "\n" + "\n".join("- " + n for n in notes)

    meta = {
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "started": datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
        "duration_s": round(time.time() - started, 1), "mpiexec": mpiexec, "ranks": NRANKS,
        "reps": args.reps, "quick": args.quick, "seed": args.seed, "models": args.models,
        "settle_s": args.settle, "max_foreign_cores": args.max_foreign,
        "retry_noisy": args.retry_noisy,
        "steps": {m: steps_for(m, args.quick) for m in args.models}, "batch_per_rank": BATCH,
        "lr": LR, "variants": variants, "python": sys.version.split()[0],
        "platform": platform.platform(), "cpus": os.cpu_count(), "horovod_reference": HOROVOD,
    }
    with open(os.path.join(args.out, "torch_train.json"), "w") as f:
        json.dump({"meta": meta, "summary": summary, "targets": targets,
                   "table_markdown": report, "jobs": jobs, "discarded_noisy_jobs": discarded,
                   "failed_jobs": failed},
                  f, separators=(",", ":"))
        f.write("\n")
    plot(summary, contenders, args.models, os.path.join(args.out, "torch_train.png"))
    with open(os.path.join(args.out, "torch_train.md"), "w") as f:
        f.write("# torch training-step benchmark\n\n`%s` (%s, %d reps, %.0f s)\n\n%s\n"
                % (meta["command"], meta["started"], args.reps, meta["duration_s"], report))
    print(report)
    print()
    print("Wrote %s, %s" % (os.path.join(args.out, "torch_train.json"),
                            os.path.join(args.out, "torch_train.png")))
    fails = sum(1 for ok in verdicts if not ok)
    print("%d target(s) passed, %d failed" % (len(verdicts) - fails, fails))
    if failed:
        print("%d JOB(S) FAILED (see above and failed_jobs in the JSON)" % len(failed))
        return 2
    return 1 if (args.strict and fails) else 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer steps")
    p.add_argument("--reps", type=int, default=3, help="jobs per contender (interleaved)")
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                 "results"))
    p.add_argument("--timeout", type=float, default=300, help="seconds per job")
    p.add_argument("--contenders", default=",".join(BASE_CONTENDERS))
    p.add_argument("--models", default=",".join(MODELS), type=lambda s: s.split(","))
    p.add_argument("--fuseopt-variant", action="append", default=[],
                   help="NAME:VAR=VALUE[,...]: an extra fuseopt contender run with these "
                        "environment variables (FUSEOPT_* knobs, or e.g. MPICH's MPIR_CVAR_*)")
    p.add_argument("--settle", type=float, default=60,
                   help="before each job wait up to this many seconds for the machine to be "
                        ">= 90%% idle (0: don't wait)")
    p.add_argument("--max-foreign", type=float, default=0.25,
                   help="a job during which other processes used more than this many cores "
                        "(on average) is rerun, up to --retry-noisy times")
    p.add_argument("--retry-noisy", type=int, default=2)
    p.add_argument("--keep-going", action="store_true",
                   help="record a failed or timed-out job and go on (exit status 2 at the "
                        "end) instead of stopping at once")
    p.add_argument("--seed", type=int, default=None, help="shuffle seed (default: random)")
    p.add_argument("--strict", action="store_true", help="exit 1 if a target fails")
    p.add_argument("--verbose", action="store_true", help="echo each job's stderr")
    # Worker-only flags.
    p.add_argument("--worker", choices=("single",) + MPI_KINDS, help=argparse.SUPPRESS)
    p.add_argument("--result-dir", help=argparse.SUPPRESS)
    p.add_argument("--handshake", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--proc-index", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for m in args.models:
        if m not in MODELS:
            p.error("unknown model %r (choose from %s)" % (m, ", ".join(MODELS)))
    if args.worker:
        args.models = ",".join(args.models)
        return worker_main(args)
    if args.reps < 1:
        p.error("--reps must be >= 1")
    return driver_main(args)


if __name__ == "__main__":
    sys.exit(main())
