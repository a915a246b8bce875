"""What the benchmark drivers share: starting jobs and killing them whole, the start
handshake of unconnected processes, reading results, waiting for a quiet machine, the
command line, the loop over jobs, and the notes on method that the scripts refer to by name.

Note [interleaving]: the machine is noisy (slow spells of tens of seconds), so every
repetition runs each contender once, in an order shuffled afresh per repetition. Jobs
next to each other in time are compared (a paired figure is same-repetition), and the
tables report medians over repetitions.

Note [one job]: a job is a fresh set of processes (the script itself with ``--worker``),
each started in a process group of its own, so that a job that hangs or times out is
killed whole: mpiexec and the ranks it started.

Note [unconnected]: the compute-only baseline for 2 ranks is 2 independent processes (no
MPI) started together. Per round (a model) each marks itself ready in the job's folder
once set up and starts its timed steps when both are; after them it marks itself done and
keeps training until both are. So every timed step ran with both cores busy, as in a
2-rank job. The job's figure is the mean of the two medians.

Note [slowest rank]: a 2-rank job's figure per step (iteration) is the slower rank's
time (conservative: it includes any skew between the ranks); the job's figure is the
median over steps.

Note [settle]: other processes share this machine. Before a job the driver may wait
until the machine is idle, and it measures the CPU that processes other than its own
used during the job: such a job measured them, not us.
"""
import argparse
import json
import os
import random
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

NRANKS = 2
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
BASELINES = ("single", "unconnected")  # the contenders that do not communicate


class JobFailed(RuntimeError):
    """A job failed, timed out or gave wrong results; the message says how."""


def log(text):
    sys.stderr.write(text)
    sys.stderr.flush()


# ---- worker side -----------------------------------------------------------------------

def lone_calls(sizes, ops, warm, timed, barrier, run, unit):
    """{"op/bytes": times} of each op at each size: `timed` calls of run(op, array) after
    `warm` more, each after barrier(), on a float32 array of ones of that many bytes (one per
    op and size); times in seconds * unit."""
    import numpy as np
    out = {}
    for nbytes in sizes:
        for op in ops:
            a = np.ones(nbytes // 4, np.float32)  # in-place sums double it each call
            samples = []
            for i in range(warm + timed):
                barrier()
                t0 = time.perf_counter()
                run(op, a)
                if i >= warm:
                    samples.append((time.perf_counter() - t0) * unit)
            out["%s/%d" % (op, nbytes)] = samples
    return out


def fuseopt_env():
    return {k: v for k, v in os.environ.items() if k.startswith("FUSEOPT_")}


def write_result(result_dir, rank, out):
    with open(os.path.join(result_dir, "result.%d.json" % rank), "w") as f:
        json.dump(out, f)


class Handshake:
    """A worker's side of Note [unconnected]: files ready.<round>.<i> and done.<round>.<i>
    in the job's folder say how far process i has come."""

    def __init__(self, args):
        self.dir, self.index, self.timeout = args.result_dir, args.proc_index, args.timeout

    def _arrive(self, word):
        """Marks this process as come to word; whether every process has."""
        open(os.path.join(self.dir, "%s.%d" % (word, self.index)), "w").close()
        return all(os.path.exists(os.path.join(self.dir, "%s.%d" % (word, i)))
                   for i in range(NRANKS))

    def ready(self, round_name=""):
        """Returns once every process is ready for round_name's timed steps."""
        deadline = time.monotonic() + self.timeout
        while not self._arrive("ready." + round_name):
            if time.monotonic() > deadline:
                raise SystemExit("the other unconnected process never got ready")
            time.sleep(0.001)

    def done(self, round_name=""):
        """Marks the timed steps done; then stopped() says when to stop training."""
        self.round, self.deadline = round_name, time.monotonic() + self.timeout
        self.stopped()

    def stopped(self):
        """True once every process is done; until then the caller keeps its core busy."""
        if self._arrive("done." + self.round):
            return True
        if time.monotonic() > self.deadline:
            raise SystemExit("the other unconnected process never got done")
        return False


# ---- driver side: processes ------------------------------------------------------------

def find_mpiexec():
    """The mpiexec next to this Python (a venv's), else the one on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    found = here if os.access(here, os.X_OK) else shutil.which("mpiexec")
    if not found:
        raise SystemExit("mpiexec not found next to %s nor on PATH" % sys.executable)
    return found


def free_ports(n):
    """n distinct free ports on 127.0.0.1 (all bound at once, then released)."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def base_env(extra=None, drop=()):
    """The jobs' environment; MASTER_ADDR/PORT for torch.distributed's env:// start (gloo)."""
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_ports(1)[0]))
    for k in drop:
        env.pop(k, None)
    env.update(extra or {})
    return env


def kill_group(proc):
    """Note [one job]: the job's whole process group, politely first."""
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


def tail(path, n=4000):
    """The last n characters of a file, "" if it is unreadable."""
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


def read_results(result_dir, n):
    """The result files of ranks 0..n-1 (see write_result)."""
    outs = []
    for r in range(n):
        try:
            with open(os.path.join(result_dir, "result.%d.json" % r)) as f:
                outs.append(json.load(f))
        except OSError as e:
            raise JobFailed("missing result file: %s" % e)
    return outs


def run_procs(cmds, env, timeout, label, tmp, grace=20.0):
    """Runs the commands together (Note [one job]), stderr to tmp/stderr.<i>. If one fails,
    the others get `grace` seconds, then are killed. Raises JobFailed."""
    procs, deadline, failed_at = [], time.monotonic() + timeout, None
    try:
        for i, cmd in enumerate(cmds):
            with open(os.path.join(tmp, "stderr.%d" % i), "w") as err:
                procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err,
                                              env=env, start_new_session=True))
        while any(p.poll() is None for p in procs):
            if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
                failed_at = time.monotonic()
            if time.monotonic() > min(deadline, (failed_at or deadline) + grace):
                break
            time.sleep(0.05)
    finally:
        running = [p.poll() is None for p in procs]
        for p in procs:
            if p.poll() is None:
                kill_group(p)
    problems = ["process %d killed (%s)" % (i, "timeout %.0f s" % timeout if failed_at is None
                                           else "peer failed") if killed else
                "process %d exit %s" % (i, p.returncode)
                for i, (p, killed) in enumerate(zip(procs, running)) if killed or p.returncode]
    if problems:
        raise JobFailed("%s: %s\n%s" % (label, "; ".join(problems), "\n".join(
            "--- process %d stderr ---\n%s" % (i, tail(os.path.join(tmp, "stderr.%d" % i)))
            for i in range(len(procs)))))


def run_job(how, argv, env, timeout, label, mpiexec=None):
    """One job (Note [one job]) of the worker command argv, in a fresh --result-dir: how is
    "single" (one process), "mpi" (mpiexec -n NRANKS), "pair" (NRANKS processes that find
    each other) or "unconnected" (NRANKS processes, Note [unconnected]); mpiexec may be an
    argv (a launcher with its options). Returns every
    process's result (write_result) and the tail of the first one's stderr."""
    tmp = tempfile.mkdtemp(prefix="bench_")
    cmds = [argv + ["--result-dir", tmp, "--proc-index", str(i)]
            + (["--handshake"] if how == "unconnected" else [])
            for i in range(1 if how in ("single", "mpi") else NRANKS)]
    try:
        launch = list(mpiexec) if isinstance(mpiexec, (list, tuple)) else [mpiexec]
        run_procs([launch + ["-n", str(NRANKS)] + cmds[0]] if how == "mpi" else cmds, env,
                  timeout, label, tmp)
        return (read_results(tmp, 1 if how == "single" else NRANKS),
                tail(os.path.join(tmp, "stderr.0"), 8000))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---- driver side: the machine (Note [settle]) ------------------------------------------

def _cpu_times():
    with open("/proc/stat") as f:
        vals = [int(v) for v in f.readline().split()[1:]]
    return sum(vals), vals[3] + vals[4]   # total, idle + iowait


def settle(max_wait_s, idle_needed=0.9, window_s=1.0):
    """Waits (up to max_wait_s) until the machine is >= idle_needed idle over a window.
    Returns (idle fraction seen, seconds waited)."""
    t0 = time.monotonic()
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


def _own_cpu_s():
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))


class ForeignCpu:
    """From its creation: the wall time, and the mean cores used by processes other than
    the driver and its children."""

    def __init__(self):
        try:
            self.stat0 = _cpu_times()
        except OSError:
            self.stat0 = None
        self.ours0, self.t0 = _own_cpu_s(), time.perf_counter()

    def cores(self):
        """(wall seconds, foreign cores or None)."""
        wall = time.perf_counter() - self.t0
        if self.stat0 is None or wall <= 0:
            return wall, None
        stat1 = _cpu_times()
        busy_s = ((stat1[0] - self.stat0[0]) - (stat1[1] - self.stat0[1])) \
            / os.sysconf("SC_CLK_TCK")
        return wall, max(0.0, busy_s - (_own_cpu_s() - self.ours0)) / wall


# ---- driver side: the run --------------------------------------------------------------

def parse_contenders(args, known):
    """--contenders (from known), then one "fuseopt:NAME" per --fuseopt-variant
    NAME:VAR=VALUE[,VAR=VALUE] (if the driver takes it), whose environment goes to
    args.variants."""
    names = [c.strip() for c in args.contenders.split(",") if c.strip()]
    for c in names:
        if c not in known:
            raise SystemExit("unknown contender %r (choose from %s)" % (c, ", ".join(known)))
    args.variants = {}
    for text in getattr(args, "fuseopt_variant", []):
        name, _, assigns = text.partition(":")
        pairs = [[x.strip() for x in a.partition("=")] for a in assigns.split(",")]
        if not name or not all(eq and k.replace("_", "").isalnum() for k, eq, _ in pairs):
            raise SystemExit("--fuseopt-variant wants NAME:VAR=VALUE[,VAR=VALUE]: %r" % text)
        args.variants["fuseopt:" + name] = {k: v for k, _, v in pairs}
    return names + list(args.variants)


def interleaved(contenders, reps, seed):
    """(rep, position, contender) for every job, in Note [interleaving]'s order."""
    rng = random.Random(seed)
    for rep in range(reps):
        order = list(contenders)
        rng.shuffle(order)
        for pos, c in enumerate(order):
            yield rep, pos, c


def start(args, contenders, **shown):
    """The driver's start: (mpiexec, start time); makes --out and says what will run."""
    mpiexec = find_mpiexec()
    os.makedirs(args.out, exist_ok=True)
    log("mpiexec: %s; %d reps x %s; %squick=%s\n" % (mpiexec, args.reps, contenders, "".join(
        "%s %s; " % kv for kv in shown.items()), args.quick))
    return mpiexec, time.time()


def begin(args):
    """A driver's start: --quick means one rep; (the contenders asked for,
    mpiexec, start time)."""
    if args.quick:
        args.reps = 1
    contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    return (contenders,) + start(args, contenders)


def measured_job(args, c, rep, pos, job, said):
    """Job (rep, pos) of contender c: job() -> (a dict, stderr), raising JobFailed. Returns
    the dict with the job's place, wall time, 1-minute load before and after and the cores
    other processes used meanwhile (Note [settle], first waiting for an idle machine if the
    driver has --settle); or, if the job failed, its error and "failed". said(the dict) ends
    the progress line."""
    settling = getattr(args, "settle", None)
    idle, waited = settle(settling) if settling else (None, 0.0)
    load = os.getloadavg()[0]
    rec = {"rep": rep, "position": pos, "contender": c, "loadavg_1m_before": load}
    if settling is not None:
        rec.update(idle_before=idle, settle_wait_s=round(waited, 1))
    log("[rep %d/%d] %-14s (load %.2f%s) ... " % (rep + 1, args.reps, c, load, "" if settling
        is None else ", idle %s after %.0f s" % ("?" if idle is None else "%.0f%%" % (100 * idle),
                                                 waited)))
    meter = ForeignCpu()
    try:
        out, stderr = job()
    except JobFailed as e:
        wall, foreign = meter.cores()
        log("FAILED after %.1f s (other processes used %s cores meanwhile)\n%s\n" % (
            wall, "?" if foreign is None else "%.2f" % foreign, str(e)[-3000:]))
        return dict(rec, failed=True, error=str(e)[-8000:], wall_s=round(wall, 2),
                    foreign_cores=foreign)
    wall, foreign = meter.cores()
    if args.verbose and stderr.strip():
        log(stderr + "\n")
    rec.update(out, wall_s=round(wall, 2), loadavg_1m_after=os.getloadavg()[0],
               foreign_cores=None if foreign is None else round(foreign, 3))
    log("%.1f s, foreign CPU %s cores: %s\n" % (wall, "?" if foreign is None else "%.2f" % foreign,
                                               said(rec)))
    return rec


def run_jobs(args, contenders, one):
    """one(contender, rep, position) for every job (Note [interleaving]): (the jobs, the
    failed ones)."""
    jobs, failed = [], []
    for rep, pos, c in interleaved(contenders, args.reps, args.seed):
        job = one(c, rep, pos)
        (failed if job.get("failed") else jobs).append(job)
    return jobs, failed


def parser(doc, quick_help, timeout, contenders, variants=True):
    """The flags the drivers share (--fuseopt-variant where variants)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help=quick_help)
    p.add_argument("--reps", type=int, default=3, help="jobs per contender (interleaved)")
    p.add_argument("--out", default=RESULTS)
    p.add_argument("--timeout", type=float, default=timeout, help="seconds per job")
    p.add_argument("--contenders", default=",".join(contenders))
    p.add_argument("--seed", type=int, default=None, help="shuffle seed (default: random)")
    p.add_argument("--strict", action="store_true", help="exit 1 if a target fails")
    p.add_argument("--verbose", action="store_true", help="echo each job's stderr")
    if variants:
        p.add_argument("--fuseopt-variant", action="append", default=[],
                       help="NAME:VAR=VALUE[,...]: an extra fuseopt contender run with these "
                            "environment variables (FUSEOPT_* knobs, or e.g. MPICH's MPIR_CVAR_*)")
    return p


def parse(p, argv, kinds):
    """The command line, with the flags a driver passes to its workers (hidden from --help)."""
    p.add_argument("--worker", choices=kinds, help=argparse.SUPPRESS)
    p.add_argument("--result-dir", help=argparse.SUPPRESS)
    p.add_argument("--handshake", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--proc-index", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.reps < 1:
        p.error("--reps must be >= 1")
    return args


# ---- job figures -----------------------------------------------------------------------

def slowest(per_rank):
    """Per step, the slowest rank's time (Note [slowest rank])."""
    return [max(v) for v in zip(*per_rank)]


def step_figures(contender, recs):
    """A job's step figures (ms) from its processes' samples_ms["step"]: one process's
    median (single), Note [unconnected]'s (unconnected, with how much the two processes'
    timed windows overlapped), else Note [slowest rank]'s and each rank's median."""
    med = statistics.median
    if contender == "single":
        return {"step_ms": med(recs[0]["samples_ms"]["step"])}
    if contender == "unconnected":
        both = min(r["t_end"] for r in recs) - max(r["t_begin"] for r in recs)
        span = max(r["t_end"] for r in recs) - min(r["t_begin"] for r in recs)
        per = [med(r["samples_ms"]["step"]) for r in recs]
        return {"step_ms": statistics.mean(per), "per_process_ms": per,
                "timed_window_overlap": round(max(0.0, both) / span, 3) if span > 0 else None,
                "filler_steps": [r["filler_steps"] for r in recs]}
    steps = [r["samples_ms"]["step"] for r in recs]
    return {"step_ms": med(slowest(steps)), "per_rank_ms": [med(s) for s in steps]}


def same_weights(label, sums):
    """2-rank jobs: every rank must end with the same weights (gradients averaged)."""
    for a, b in zip(sums[0], sums[1]):
        if abs(a - b) > 1e-6 * max(1.0, abs(a)):
            raise JobFailed("%s: ranks diverged: weight checksums %s vs %s"
                            % (label, sums[0], sums[1]))
    return sums[0]


def paired(jobs, figure, keep=lambda job: True):
    """figure(the repetition's jobs by contender) for each repetition, in order (Note
    [interleaving]); a repetition that lacks a job figure() needs (KeyError) is left out."""
    by_rep = {}
    for job in jobs:
        if keep(job):
            by_rep.setdefault(job["rep"], {})[job["contender"]] = job
    out = []
    for rep in sorted(by_rep):
        try:
            out.append(figure(by_rep[rep]))
        except KeyError:
            continue
    return out
