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

Contenders, each its own process set (harness.py, Note [one job]):

  single       1 process, no communication (scaling-efficiency baseline);
  unconnected  2 independent processes (no MPI) started together, a start
               handshake per model: the compute-only baseline for 2 ranks
               (harness.py, Note [unconnected]);
  fuseopt      ``mpiexec -n 2`` with ``fuseopt.torch.DistributedOptimizer``;
  ddp          ``mpiexec -n 2`` with DistributedDataParallel over gloo (rank
               and world size from PMI_RANK/PMI_SIZE, MASTER_ADDR=127.0.0.1,
               a free port).

``--fuseopt-variant`` adds more fuseopt contenders run with extra environment
variables (e.g. ``cyc0.5:FUSEOPT_CYCLE_TIME_MS=0.5``); they are reported next
to the others but the targets are judged on plain ``fuseopt`` only.

Per model each process warms up, then times every step (forward, backward,
``opt.step()``, ``opt.zero_grad()``; phases recorded separately). Per job: the
median over steps of the slowest rank's step time (Note [slowest rank]). Table:
median over repetitions; contenders are interleaved (Note [interleaving]), and
before each job the driver waits (``--settle``, up to 60 s) for the machine to
be >= 90% idle (Note [settle]). Each process also records the CPU time per step
of its training thread and of its other threads (fuseopt's loop thread, gloo's
threads): on 2 cores, that CPU is taken from compute.

Overhead = step - unconnected step. Scaling efficiency = 2-rank throughput /
(2 x single throughput) = single step / 2-rank step. Horovod's figures and the
targets: results/references.json.
"""
import argparse
import datetime
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

import harness
import report

NRANKS = 2
BATCH = 64
LR = 0.01
MODELS = ("mlp", "small")
TITLES = {"mlp": ("MLP 1024-2048-2048-1024-10", "8.4M params"),
          "small": ("100 x Linear(64,64)", "200 tensors")}
BASE_CONTENDERS = ("single", "unconnected", "fuseopt", "ddp")
MPI_KINDS = ("fuseopt", "ddp")
PHASES = ("step", "fwd", "bwd", "opt", "zero")
CPU_KEYS = ("main_ms", "other_ms", "main_invol_csw")
REF = report.references("torch_train")
HOROVOD = REF["horovod_ms"]


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


def _init_comm(kind, proc_index):
    """(rank, size, info, fuseopt.torch or None, torch.distributed or None)."""
    if kind == "fuseopt":
        import fuseopt
        import fuseopt.torch as hvd
        hvd.init()
        return hvd.rank(), hvd.size(), {"fuseopt_settings": fuseopt.settings()}, hvd, None
    if kind == "ddp":
        import torch.distributed as dist
        rank, size = int(os.environ["PMI_RANK"]), int(os.environ["PMI_SIZE"])
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=size,
                                timeout=datetime.timedelta(seconds=120))
        return rank, size, {}, None, dist
    return proc_index, 1, {}, None, None


def _wrap(torch, kind, hvd, model):
    """(module to train, optimizer) of a contender."""
    if kind == "fuseopt":
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR),
                                       named_parameters=model.named_parameters())
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        return model, opt
    if kind == "ddp":
        net = torch.nn.parallel.DistributedDataParallel(model)
        return net, torch.optim.SGD(net.parameters(), lr=LR)
    return model, torch.optim.SGD(model.parameters(), lr=LR)


def train_model(torch, args, model_name, rank, hvd, hs):
    """Warm-up and timed steps of one model; the record of them."""
    warm, timed = steps_for(model_name, args.quick)
    model, x, y, loss_fn = build(torch, model_name, data_seed=1000 + rank)
    nparams = sum(p.numel() for p in model.parameters())
    ntensors = sum(1 for _ in model.parameters())
    net, opt = _wrap(torch, args.worker, hvd, model)
    if hs is not None:
        hs.ready(" " + model_name)
    rec = {k: [] for k in PHASES + ("t_start",)}
    t_begin = time.perf_counter()
    loss0 = run_steps(net, opt, x, y, loss_fn, warm)
    cpu0 = thread_cpu_s()
    loss1 = run_steps(net, opt, x, y, loss_fn, timed, rec)
    t_end = time.perf_counter()
    cpu = cpu_per_step(cpu0, thread_cpu_s(), timed)
    filler = 0
    if hs is not None:        # keep the core busy until the other is done too
        hs.done(" " + model_name)
        while not hs.stopped():
            run_steps(net, opt, x, y, loss_fn, 1)
            filler += 1
    if hvd is not None:
        opt.remove_hooks()
    return {"params": nparams, "tensors": ntensors, "warmup": warm, "timed": timed,
            "samples_ms": {k: [round(v, 4) for v in rec[k]] for k in PHASES},
            "t_start": rec["t_start"], "t_begin": t_begin, "t_end": t_end,
            "filler_steps": filler, "cpu_per_step": cpu, "loss_after_warmup": loss0,
            "loss_last": loss1, "checksum": checksum(torch, model)}


def worker_main(args):
    torch = _setup_torch()
    kind = args.worker
    rank, size, info, hvd, dist = _init_comm(kind, args.proc_index)
    if kind in MPI_KINDS and size != NRANKS:
        raise SystemExit("%s worker expects %d ranks, got %d" % (kind, NRANKS, size))
    hs = harness.Handshake(args.timeout) if args.handshake else None
    out = {"kind": kind, "rank": rank, "size": size, "pid": os.getpid(),
           "torch": torch.__version__, "threads": torch.get_num_threads(),
           "env": harness.fuseopt_env(), "info": info,
           "models": {m: train_model(torch, args, m, rank, hvd, hs)
                      for m in args.models.split(",")}}
    if hvd is not None:
        hvd.shutdown()
    elif dist is not None:
        dist.destroy_process_group()
    harness.write_result(args.result_dir, kind, rank, out)
    return 0


# --------------------------------------------------------------------------
# Driver side.
# --------------------------------------------------------------------------

def _worker_cmd(kind, args, result_dir, extra=()):
    return [sys.executable, os.path.abspath(__file__), "--worker", kind,
            "--models", ",".join(args.models), "--result-dir", result_dir,
            "--timeout", str(args.timeout)] + (["--quick"] if args.quick else []) + list(extra)


def run_job(contender, variants, mpiexec, args):
    """One job of a contender; returns the per-process result dicts and stderr tail."""
    tmp = tempfile.mkdtemp(prefix="torch_train_")
    stderr_path = os.path.join(tmp, "stderr")
    try:
        if contender == "single":
            harness.run_simple(_worker_cmd("single", args, tmp), harness.base_env(),
                               args.timeout, contender, stderr_path)
            return harness.read_results(tmp, "single", 1), harness.tail(stderr_path)
        if contender == "unconnected":
            cmds = [_worker_cmd("single", args, tmp, ["--handshake", "--proc-index", str(i)])
                    for i in range(NRANKS)]
            harness.run_unconnected(cmds, harness.base_env(), args.timeout, tmp,
                                    [" " + m for m in args.models])
            return (harness.read_results(tmp, "single", NRANKS),
                    harness.tail(os.path.join(tmp, "unconnected.0.stderr")))
        kind = "fuseopt" if contender.startswith("fuseopt") else contender
        env = dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(harness.free_ports(1)[0]))
        env.update(variants.get(contender, {}))
        cmd = [mpiexec, "-n", str(NRANKS)] + _worker_cmd(kind, args, tmp)
        harness.run_simple(cmd, harness.base_env(env), args.timeout, contender, stderr_path)
        return harness.read_results(tmp, kind, NRANKS), harness.tail(stderr_path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def job_value(contender, results, model):
    """Per-job statistics for one model: the step figure and phase medians."""
    recs = [r["models"][model] for r in results]
    med = statistics.median
    common = {"cpu": {k: statistics.mean(r["cpu_per_step"][k] for r in recs) for k in CPU_KEYS},
              "phases_ms": {k: statistics.mean(med(r["samples_ms"][k]) for r in recs)
                            for k in PHASES}}
    if contender == "single":
        return dict(common, step_ms=med(recs[0]["samples_ms"]["step"]))
    if contender == "unconnected":
        return dict(harness.unconnected_figures(recs), **common)
    steps = [r["samples_ms"]["step"] for r in recs]
    return dict(common, step_ms=med(harness.slowest(steps)), rank0_step_ms=med(steps[0]),
                per_rank_ms=[med(s) for s in steps])


def verify(contender, results, model):
    """2-rank jobs: the ranks' final parameters (harness.same_weights)."""
    if contender in ("single", "unconnected"):
        return None
    return harness.same_weights("%s/%s" % (contender, model),
                                [r["models"][model]["checksum"] for r in results])


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
                "cpu": {k: statistics.median(v["cpu"][k] for v in vals) for k in CPU_KEYS},
            }
    return summary


def paired_overheads(jobs, contender, model):
    """Per repetition: contender step - unconnected step of the same repetition."""
    def step(j):
        return j["values"][model]["step_ms"]
    return harness.paired(jobs, lambda r: round(step(r[contender]) - step(r["unconnected"]), 3),
                          keep=lambda j: not j.get("noisy"))


TABLE_HEAD = ["| contender | median step ms | steps/s | overhead vs unconnected (ms) "
              "| overhead / DDP overhead | scaling efficiency | fwd / bwd / opt.step ms "
              "| CPU ms/step: main / other threads (invol. csw) "
              "| per-rep step ms | paired overhead per rep (ms) |",
              "|---|---:|---:|---:|---:|---:|---|---|---|---|"]


def overhead_target(model, unc):
    """(target overhead in ms, the same scaled by our unconnected step / Horovod's)."""
    hv = HOROVOD[model]
    absolute = REF["targets"]["overhead_fraction_of_horovod"] * (hv["step"] - hv["unconnected"])
    return absolute, absolute * unc / hv["unconnected"]


def model_rows(s, jobs, contenders, m):
    """The table rows of one model, Horovod's reference last."""
    single = s.get("single", {}).get("step_ms")
    unc = s.get("unconnected", {}).get("step_ms")
    ddp_over = s["ddp"]["step_ms"] - unc if "ddp" in s and unc is not None else None
    rows = []
    for c in (c for c in contenders if c in s):
        step = s[c]["step_ms"]
        over = step - unc if unc is not None and c not in ("single", "unconnected") else None
        eff = single / step if single is not None and c != "single" else None
        ph, cpu = s[c]["phases_ms"], s[c]["cpu"]
        rows.append("| %s | %.2f | %.1f | %s | %s | %s | %.2f / %.2f / %.2f "
                    "| %.1f / %.1f (%.0f) | %s | %s |" % (
                        c, step, 1e3 / step, report.fmt(over),
                        report.fmt(over / ddp_over if over is not None and ddp_over else None),
                        report.fmt(eff * 100 if eff else None, "%.0f%%"),
                        ph["fwd"], ph["bwd"], ph["opt"], cpu["main_ms"], cpu["other_ms"],
                        cpu["main_invol_csw"], ", ".join(
                            "%.2f%s" % (v, "*" if noisy else "")
                            for v, noisy in zip(s[c]["per_rep_ms"], s[c]["per_rep_noisy"])),
                        ", ".join("%.2f" % v for v in (paired_overheads(jobs, c, m)
                                                       if over is not None else [])) or "—"))
    hv = HOROVOD[m]
    hv_over = hv["step"] - hv["unconnected"]
    rows.append("| horovod (reference, measured earlier) | %.2f | %.1f | %.2f | %s | %s | "
                "— | — | — | — |" % (hv["step"], 1e3 / hv["step"], hv_over,
                                     report.fmt(hv_over / ddp_over if ddp_over else None),
                                     report.fmt(hv["eff"] * 100 if hv["eff"] else None, "%.0f%%")))
    return rows


def model_targets(s, jobs, m, targets, verdicts):
    """The verdict lines of one model (plain fuseopt only); fills targets and verdicts."""
    single = s.get("single", {}).get("step_ms")
    unc = s.get("unconnected", {}).get("step_ms")
    ddp_over = s["ddp"]["step_ms"] - unc if "ddp" in s and unc is not None else None
    hv, lines = HOROVOD[m], []
    if "fuseopt" in s and unc is not None:
        f_over = s["fuseopt"]["step_ms"] - unc
        abs_target, scaled_target = overhead_target(m, unc)
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
                report.verdict(ok), f_over, scaled_target, hv["step"] - hv["unconnected"], unc,
                hv["unconnected"], abs_target, "pass" if f_over <= abs_target else "fail",
                report.verdict(ok), report.fmt(ddp_over)))
        if m == "mlp" and single is not None:
            lines.append(mlp_efficiency(s, single, targets, verdicts))
    if "unconnected" in s and single is not None:
        lines.append("- compute-only ceiling: unconnected efficiency (single / unconnected) "
                     "= %.0f%%." % (100 * single / unc))
    return lines


def mlp_efficiency(s, single, targets, verdicts):
    eff = single / s["fuseopt"]["step_ms"]
    target = REF["targets"]["mlp_efficiency_min"]
    ok = eff >= target
    verdicts.append(ok)
    ddp = single / s["ddp"]["step_ms"] if "ddp" in s else None
    targets["mlp_scaling_efficiency"] = {"fuseopt": eff, "target": target, "pass": ok,
                                         "ddp": ddp}
    return ("- **%s** target: fuseopt MLP scaling efficiency %.0f%% >= %.0f%% (Horovod %.0f%%, "
            "DDP reference %.0f%%, DDP here %s) -> **%s**." % (
                report.verdict(ok), eff * 100, target * 100, HOROVOD["mlp"]["eff"] * 100,
                REF["ddp_reference_efficiency"]["mlp"] * 100,
                report.fmt(ddp * 100 if ddp is not None else None, "%.0f%%"), report.verdict(ok)))


def build_report(summary, jobs, contenders, models, quick):
    lines, verdicts, targets = [], [], {}
    for m in models:
        warm, timed = steps_for(m, quick)
        lines.append("### %s (%s; batch %d/rank; %d warm-up + %d timed steps)\n"
                     % (m, TITLES[m][0], BATCH, warm, timed))
        lines += TABLE_HEAD + model_rows(summary[m], jobs, contenders, m) + [""]
        lines += model_targets(summary[m], jobs, m, targets, verdicts) + [""]
    return "\n".join(lines), verdicts, targets


def plot(summary, contenders, models, path):
    plt = report.pyplot()
    fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 4.8))
    for ax, m in zip(axes if len(models) > 1 else [axes], models):
        s = summary[m]
        names = [c for c in contenders if c in s]
        top = report.step_bars(ax, names + ["horovod\n(ref)"],
                               [s[c]["step_ms"] for c in names] + [HOROVOD[m]["step"]], "ddp",
                               [s[c]["per_rep_ms"] for c in names],
                               [s[c]["per_rep_noisy"] for c in names])
        ax.set_ylim(0, top * 1.25)
        if "unconnected" in s:
            unc = s["unconnected"]["step_ms"]
            tgt = unc + overhead_target(m, unc)[1]
            ax.axhline(tgt, color="green", ls="--", lw=1, label="fuseopt target (%.1f ms)" % tgt)
            ax.axhline(unc, color="gray", ls=":", lw=1, label="unconnected (%.1f ms)" % unc)
            ax.legend(fontsize=8, loc="lower right")
        ax.set_xticklabels(names + ["horovod\n(ref)"], rotation=20, fontsize=8)
        ax.set_title("%s (%s)" % TITLES[m])
    fig.suptitle("Training step time, batch %d/rank, 2 ranks (dots: repetitions; x: noisy, "
                 "left out)" % BATCH)
    report.save(plt, fig, path, 110)


def run_measured_job(c, variants, mpiexec, args, rep, attempt):
    """One job plus how much CPU other processes used meanwhile (in cores)."""
    idle, waited = harness.settle(args.settle) if args.settle > 0 else (None, 0.0)
    load = os.getloadavg()[0]
    sys.stderr.write("[rep %d/%d] %-14s (load %.2f, idle %s after %.0f s) ... "
                     % (rep + 1, args.reps, c, load,
                        "?" if idle is None else "%.0f%%" % (100 * idle), waited))
    sys.stderr.flush()
    meter = harness.ForeignCpu()
    try:
        results, stderr = run_job(c, variants, mpiexec, args)
        values = {m: job_value(c, results, m) for m in args.models}
        checks = {m: verify(c, results, m) for m in args.models}
    except harness.JobFailed as e:
        wall, foreign = meter.cores()
        sys.stderr.write("\nBENCHMARK JOB FAILED (other processes used %s cores meanwhile)\n%s\n"
                         % (report.fmt(foreign, "%.2f", "?"), e))
        if not args.keep_going:
            raise SystemExit(2)
        return {"rep": rep, "attempt": attempt, "contender": c, "failed": True,
                "error": str(e)[-8000:], "wall_s": round(wall, 2),
                "env": variants.get(c, {}), "foreign_cores": foreign}
    wall, foreign = meter.cores()
    sys.stderr.write("%.1f s, foreign CPU %s cores: %s\n" % (
        wall, report.fmt(foreign, "%.2f", "?"),
        ", ".join("%s %.2f ms" % (m, values[m]["step_ms"]) for m in args.models)))
    if args.verbose and stderr.strip():
        sys.stderr.write(stderr + "\n")
    return {"rep": rep, "attempt": attempt, "contender": c, "quick": args.quick,
            "env": variants.get(c, {}), "wall_s": round(wall, 2), "loadavg_1m_before": load,
            "idle_before": idle, "settle_wait_s": round(waited, 1),
            "foreign_cores": None if foreign is None else round(foreign, 3),
            "loadavg_1m_after": os.getloadavg()[0], "values": values, "checksums": checks,
            "results": results, "stderr_tail": stderr[-4000:]}


def run_contender(c, pos, variants, mpiexec, args, rep, discarded):
    """One kept job of c: a noisy one (Note [settle]) is rerun up to --retry-noisy times
    and goes to discarded. A failed job comes back with "failed" set."""
    for attempt in range(args.retry_noisy + 1):
        job = run_measured_job(c, variants, mpiexec, args, rep, attempt)
        job["position"] = pos
        if job.get("failed"):
            return job
        noisy = job["foreign_cores"] is not None and job["foreign_cores"] > args.max_foreign
        if not noisy or attempt == args.retry_noisy:
            job["noisy"] = noisy
            return job
        discarded.append(job)
        sys.stderr.write("    (other processes used %.2f cores during the job: rerun)\n"
                         % job["foreign_cores"])


def notes(args, jobs, discarded, failed):
    out = [
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
            ", ".join(report.fmt(j["foreign_cores"], "%.2f", "?") for j in jobs),
            len(discarded), args.max_foreign, sum(1 for j in jobs if j["noisy"])),
        "%s; machine idle just before the jobs (1 s window, after waiting up to %.0f s for "
        ">= 90%%): %s." % (report.load_note(jobs), args.settle, ", ".join(
            "?" if j["idle_before"] is None else "%.0f%%" % (100 * j["idle_before"])
            for j in jobs)),
    ]
    for m in args.models:
        f = [j["checksums"][m] for j in jobs if j["contender"] == "fuseopt" and j["checksums"][m]]
        d = [j["checksums"][m] for j in jobs if j["contender"] == "ddp" and j["checksums"][m]]
        if f and d:
            rel = abs(f[0][1] - d[0][1]) / max(1e-12, abs(d[0][1]))
            out.append("%s: ranks agree in every 2-rank job; final sum(p^2) fuseopt vs DDP "
                       "differ by %.1e (relative)." % (m, rel))
    if failed:
        out.insert(0, "**%d JOB(S) FAILED** and are left out (--keep-going): %s. Errors are "
                   "in the JSON (failed_jobs)." % (len(failed), ", ".join(
                       "%s (rep %d): %s" % (j["contender"], j["rep"] + 1,
                                            j["error"].splitlines()[0][:80]) for j in failed)))
    return out


def driver_main(args):
    mpiexec = harness.find_mpiexec()
    os.makedirs(args.out, exist_ok=True)
    base = harness.parse_contenders(args.contenders, BASE_CONTENDERS)
    variants = harness.parse_variants(args.fuseopt_variant,
                                      lambda k: k and k.replace("_", "").isalnum())
    contenders = base + list(variants)
    jobs, discarded, failed = [], [], []
    started = time.time()
    sys.stderr.write("mpiexec: %s; %d reps x %s; models %s; quick=%s\n"
                     % (mpiexec, args.reps, contenders, args.models, args.quick))
    for rep, pos, c in harness.interleaved(contenders, args.reps, args.seed):
        job = run_contender(c, pos, variants, mpiexec, args, rep, discarded)
        (failed if job.get("failed") else jobs).append(job)
    if not jobs:
        sys.stderr.write("\nEVERY JOB FAILED\n")
        return 2
    summary = summarize(jobs, contenders, args.models)
    table, verdicts, targets = build_report(summary, jobs, contenders, args.models, args.quick)
    text = table + "\n" + "\n".join("- " + n for n in notes(args, jobs, discarded, failed))
    meta = report.run_meta(
        args, started, mpiexec, ranks=NRANKS, models=args.models, settle_s=args.settle,
        max_foreign_cores=args.max_foreign, retry_noisy=args.retry_noisy,
        steps={m: steps_for(m, args.quick) for m in args.models}, batch_per_rank=BATCH, lr=LR,
        variants=variants, horovod_reference=HOROVOD)
    paths = report.write_outputs(
        args.out, "torch_train", "torch training-step benchmark",
        {"meta": meta, "summary": summary, "targets": targets, "table_markdown": text,
         "jobs": jobs, "discarded_noisy_jobs": discarded, "failed_jobs": failed}, text,
        lambda path: plot(summary, contenders, args.models, path))
    fails = report.print_outcome(text, paths, verdicts)
    if failed:
        print("%d JOB(S) FAILED (see above and failed_jobs in the JSON)" % len(failed))
        return 2
    return 1 if (args.strict and fails) else 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    harness.add_common_args(p, "fewer steps", 300, BASE_CONTENDERS)
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
    p.add_argument("--verbose", action="store_true", help="echo each job's stderr")
    harness.add_worker_args(p, ("single",) + MPI_KINDS)
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
