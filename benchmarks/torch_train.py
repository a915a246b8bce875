#!/usr/bin/env python
"""Training-step benchmark: fuseopt's DistributedOptimizer against DDP (gloo).

    python benchmarks/torch_train.py [--quick] [--reps N] [--contenders LIST] [--out DIR]
        [--models mlp,small,compress] [--fuseopt-variant NAME:VAR=VALUE[,VAR=VALUE...]]...

The models, the contenders, what a timed step covers and the figures: docs/benchmarks.md,
"What each script measures"; the method shared with the other drivers: harness.py's notes.
Targets are judged on plain ``fuseopt`` only (the compress job's: on the fuseopt:<compressor>
contenders against it); --fuseopt-variant contenders are reported next to it.
"""
import argparse
import datetime
import itertools
import os
import statistics
import sys
import threading
import time

import harness
import report

NRANKS = harness.NRANKS
BATCH = 64
LR = 0.01
MOMENTUM = 0.9  # the compress job's SGD (the others: plain SGD)
MODELS = ("mlp", "small", "compress")
TITLES = {"mlp": ("MLP 1024-2048-2048-1024-10", "8.4M params"),
          "small": ("100 x Linear(64,64)", "200 tensors"),
          "compress": ("MLP 1024-2048-2048-1024-10 on digits", "compressors")}
# fuseopt's Compression.<name> (ef_sign: a Compression.ef_sign() per optimizer); contender
# fuseopt:<name> runs the compress job only, with it.
COMPRESSORS = ("fp16", "bf16", "ef_sign")
BASE_CONTENDERS = ("single", "unconnected", "fuseopt", "ddp") + tuple(
    "fuseopt:" + name for name in COMPRESSORS)
VALIDATION = 360  # digits held out (of 1,797) for the compress job's accuracy
# A step's phases: (name, from, to) as indices into its 5 time stamps (start, after the
# forward pass and loss, after backward, after opt.step(), after opt.zero_grad()).
PHASES = (("step", 0, 4), ("fwd", 0, 1), ("bwd", 1, 2), ("opt", 2, 3), ("zero", 3, 4))
CPU_KEYS = ("main_ms", "other_ms", "main_invol_csw")
REF = report.references("torch_train")
HOROVOD = REF["horovod_ms"]


def steps_for(model, quick):
    """(warmup, timed) steps for a model."""
    if model == "mlp":
        return (5, 20) if quick else (10, 50)
    if model == "compress":
        return (10, 140) if quick else (10, 290)
    return (5, 60) if quick else (10, 200)


def models_of(c, models):
    """The models contender c trains: a compressor contender only the compress job, which
    single does not train (it compares 2-rank training)."""
    if c.partition(":")[2] in COMPRESSORS:
        return [m for m in models if m == "compress"]
    return [m for m in models if m != "compress" or c != "single"]


# ---- worker side ----------------------------------------------------------------------

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


def digits(torch, rank):
    """The compress job's data: sklearn's digits upsampled to 32x32 (1024 inputs in [0, 1]),
    a fixed validation set, and this process's shard of the rest in batches of BATCH."""
    import numpy as np
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
    x = np.kron(x.reshape(-1, 8, 8) / 16.0, np.ones((4, 4))).reshape(-1, 1024).astype("float32")
    order = np.random.default_rng(0).permutation(len(x))
    shard = order[VALIDATION:][rank::NRANKS]
    shard = shard[np.random.default_rng(100 + rank).permutation(len(shard))]
    batches = [(torch.from_numpy(x[i]), torch.from_numpy(y[i]))
               for i in np.split(shard[:len(shard) // BATCH * BATCH], len(shard) // BATCH)]
    return itertools.cycle(batches), [torch.from_numpy(a[order[:VALIDATION]]) for a in (x, y)]


def build(torch, model_name, rank):
    """(model, batches, loss_fn, validation set or None) with weights identical on every
    process; the data: one fixed synthetic batch per process, seeded by rank, or digits."""
    nn = torch.nn
    torch.manual_seed(1234)
    layers = []
    if model_name in ("mlp", "compress"):
        dims = [1024, 2048, 2048, 1024, 10]
        for a, b in zip(dims, dims[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        ce = nn.CrossEntropyLoss()
        in_dim, loss_fn = 1024, (lambda out, y: ce(out, y))
    else:
        for _ in range(100):
            lin = nn.Linear(64, 64)
            # He init keeps activations O(1) through 100 ReLU layers.
            nn.init.normal_(lin.weight, std=(2.0 / 64) ** 0.5)
            nn.init.zeros_(lin.bias)
            layers += [lin, nn.ReLU()]
        in_dim, loss_fn = 64, (lambda out, y: out.pow(2).mean())
    if model_name == "compress":
        batches, validation = digits(torch, rank)
        return nn.Sequential(*layers[:-1]), batches, loss_fn, validation
    g = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(BATCH, in_dim, generator=g)
    y = torch.randint(0, 10, (BATCH,), generator=g)
    return nn.Sequential(*layers[:-1]), itertools.repeat((x, y)), loss_fn, None


def run_steps(model, opt, batches, loss_fn, n, rec=None):
    """n training steps; with rec, each step's phases (ms) and start time go to rec."""
    pc = time.perf_counter
    loss = None
    for _ in range(n):
        x, y = next(batches)
        t = [pc()]
        loss = loss_fn(model(x), y)
        t.append(pc())
        loss.backward()
        t.append(pc())
        opt.step()
        t.append(pc())
        opt.zero_grad()
        t.append(pc())
        if rec is not None:
            for k, a, b in PHASES:
                rec[k].append((t[b] - t[a]) * 1e3)
            rec["t_start"].append(t[0])
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


def _wrap(torch, args, hvd, model, model_name):
    """(module to train, optimizer) of a contender."""
    momentum = MOMENTUM if model_name == "compress" else 0
    if args.worker == "fuseopt":
        compression = (hvd.Compression.ef_sign() if args.compression == "ef_sign"
                       else getattr(hvd.Compression, args.compression or "none"))
        opt = hvd.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=LR, momentum=momentum),
            named_parameters=model.named_parameters(), compression=compression)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        return model, opt
    if args.worker == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
    return model, torch.optim.SGD(model.parameters(), lr=LR, momentum=momentum)


def train_model(torch, args, model_name, rank, hvd, hs):
    """Warm-up and timed steps of one model; the record of them."""
    warm, timed = steps_for(model_name, args.quick)
    model, batches, loss_fn, validation = build(torch, model_name, rank)
    net, opt = _wrap(torch, args, hvd, model, model_name)
    if hs is not None:
        hs.ready(model_name)
    rec = dict({k: [] for k, _, _ in PHASES}, t_start=[])
    t_begin = time.perf_counter()
    loss0 = run_steps(net, opt, batches, loss_fn, warm)
    cpu0 = thread_cpu_s()
    loss1 = run_steps(net, opt, batches, loss_fn, timed, rec)
    t_end = time.perf_counter()
    cpu = cpu_per_step(cpu0, thread_cpu_s(), timed)
    out = {}
    if validation is not None:  # after warm + timed steps on every process, before fillers
        with torch.no_grad():
            out["val_accuracy"] = float((model(validation[0]).argmax(1) == validation[1])
                                        .double().mean())
    filler = 0
    if hs is not None:        # keep the core busy until the other is done too
        hs.done(model_name)
        while not hs.stopped():
            run_steps(net, opt, batches, loss_fn, 1)
            filler += 1
    if hvd is not None:
        opt.remove_hooks()
    with torch.no_grad():
        checksum = [sum(float(p.double().sum()) for p in model.parameters()),
                    sum(float(p.double().pow(2).sum()) for p in model.parameters())]
    return dict(out, **{"params": sum(p.numel() for p in model.parameters()),
            "tensors": len(list(model.parameters())), "warmup": warm, "timed": timed,
            "samples_ms": {k: [round(v, 4) for v in rec[k]] for k, _, _ in PHASES},
            "t_start": rec["t_start"], "t_begin": t_begin, "t_end": t_end,
            "filler_steps": filler, "cpu_per_step": cpu, "loss_after_warmup": loss0,
            "loss_last": loss1, "checksum": checksum})


def worker_main(args):
    torch = _setup_torch()
    kind = args.worker
    rank, size, info, hvd, dist = _init_comm(kind, args.proc_index)
    if kind != "single" and size != NRANKS:
        raise SystemExit("%s worker expects %d ranks, got %d" % (kind, NRANKS, size))
    hs = harness.Handshake(args) if args.handshake else None
    out = {"kind": kind, "rank": rank, "size": size, "pid": os.getpid(),
           "torch": torch.__version__, "threads": torch.get_num_threads(),
           "env": harness.fuseopt_env(), "info": info,
           "models": {m: train_model(torch, args, m, rank, hvd, hs) for m in args.models}}
    if hvd is not None:
        hvd.shutdown()
    elif dist is not None:
        dist.destroy_process_group()
    harness.write_result(args.result_dir, rank, out)
    return 0


# ---- driver side ----------------------------------------------------------------------

def run_job(c, args, mpiexec):
    """One job of contender c (harness.run_job): (per-process results, stderr tail)."""
    kind, _, variant = c.partition(":")  # fuseopt:NAME: a compressor, or a variant's env
    argv = [sys.executable, os.path.abspath(__file__), "--worker",
            "single" if kind == "unconnected" else kind, "--models",
            ",".join(models_of(c, args.models)), "--timeout", str(args.timeout)] + (
        ["--quick"] if args.quick else []) + ["--compression", variant] * (variant in COMPRESSORS)
    return harness.run_job(kind if kind in ("single", "unconnected") else "mpi", argv,
                           harness.base_env(args.variants.get(c)), args.timeout, c, mpiexec)


def job_value(contender, results, model):
    """Per-job statistics for one model: the step figures, CPU and phase medians."""
    recs = [r["models"][model] for r in results]
    v = harness.step_figures(contender, recs)
    if "per_rank_ms" in v:
        v["rank0_step_ms"] = v["per_rank_ms"][0]
    v["cpu"] = {k: statistics.mean(r["cpu_per_step"][k] for r in recs) for k in CPU_KEYS}
    v["phases_ms"] = {k: statistics.mean(statistics.median(r["samples_ms"][k]) for r in recs)
                      for k, _, _ in PHASES}
    if "val_accuracy" in recs[0]:
        v["val_accuracy"] = statistics.mean(r["val_accuracy"] for r in recs)
    return v


def summarize(jobs, contenders, models):
    summary = {}
    for m in models:
        summary[m] = {}
        for c in contenders:
            mine = [j for j in jobs if j["contender"] == c and m in j["values"]]
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
                              for k, _, _ in PHASES},
                "cpu": {k: statistics.median(v["cpu"][k] for v in vals) for k in CPU_KEYS},
            }
            if m == "compress":
                summary[m][c]["val_accuracy"] = statistics.median(v["val_accuracy"] for v in vals)
    return summary


def paired_overheads(jobs, contender, model):
    """Per repetition: contender step - unconnected step of the same repetition."""
    def step(j):
        return j["values"][model]["step_ms"]
    return harness.paired(jobs, lambda r: round(step(r[contender]) - step(r["unconnected"]), 3),
                          keep=lambda j: not j.get("noisy"))


def rep_cells(s, jobs, c, m):
    """c's cells "per-rep step ms" ('*': noisy) and "paired overhead per rep (ms)"."""
    return [", ".join("%.2f%s" % (v, "*" if noisy else "")
                      for v, noisy in zip(s[c]["per_rep_ms"], s[c]["per_rep_noisy"])),
            ", ".join("%.2f" % v for v in (paired_overheads(jobs, c, m)
                                           if report.overhead(s, c) is not None else [])) or "—"]


HEAD = ["contender", "median step ms", "steps/s", "overhead vs unconnected (ms)",
        "overhead / DDP overhead", "scaling efficiency", "fwd / bwd / opt.step ms",
        "CPU ms/step: main / other threads (invol. csw)", "per-rep step ms",
        "paired overhead per rep (ms)"]


def overhead_target(model, unc):
    """(target overhead in ms, the same scaled by our unconnected step / Horovod's)."""
    hv = HOROVOD[model]
    absolute = REF["targets"]["overhead_fraction_of_horovod"] * (hv["step"] - hv["unconnected"])
    return absolute, absolute * unc / hv["unconnected"]


def model_rows(s, jobs, contenders, m):
    """The table rows of one model, Horovod's reference last."""
    ddp_over = report.overhead(s, "ddp") if "ddp" in s else None
    rows = []
    for c in (c for c in contenders if c in s):
        step, over, eff = s[c]["step_ms"], report.overhead(s, c), report.efficiency(s, c)
        ph, cpu = s[c]["phases_ms"], s[c]["cpu"]
        rows.append([c, "%.2f" % step, "%.1f" % (1e3 / step), report.fmt(over),
                     report.fmt(over / ddp_over if over is not None and ddp_over else None),
                     report.fmt(eff * 100 if eff else None, "%.0f%%"),
                     "%.2f / %.2f / %.2f" % (ph["fwd"], ph["bwd"], ph["opt"]),
                     "%.1f / %.1f (%.0f)" % (cpu["main_ms"], cpu["other_ms"],
                                             cpu["main_invol_csw"]),
                     *rep_cells(s, jobs, c, m)])
    hv = HOROVOD[m]
    hv_over = hv["step"] - hv["unconnected"]
    return rows + [["horovod (reference, measured earlier)", "%.2f" % hv["step"],
                    "%.1f" % (1e3 / hv["step"]), "%.2f" % hv_over,
                    report.fmt(hv_over / ddp_over if ddp_over else None),
                    report.fmt(hv["eff"] * 100 if hv["eff"] else None, "%.0f%%")] + ["—"] * 4]


def model_targets(s, jobs, m, targets, verdicts):
    """The verdict lines of one model (plain fuseopt only); fills targets and verdicts."""
    single, unc = report.steps(s)
    ddp_over = report.overhead(s, "ddp") if "ddp" in s else None
    hv, lines = HOROVOD[m], []
    if "fuseopt" in s and unc is not None:
        f_over = report.overhead(s, "fuseopt")
        abs_target, scaled_target = overhead_target(m, unc)
        ok = f_over <= scaled_target
        targets["%s_overhead" % m] = {
            "fuseopt_overhead_ms": f_over, "ddp_overhead_ms": ddp_over,
            "target_ms_scaled": scaled_target, "target_ms_absolute": abs_target,
            "pass": ok, "pass_absolute": f_over <= abs_target,
            "paired_fuseopt_overheads_ms": paired_overheads(jobs, "fuseopt", m)}
        lines.append(verdicts.line(ok, (
            "fuseopt overhead %.2f ms <= %.2f ms (half of Horovod's %.1f ms, scaled by measured "
            "unconnected %.2f / %.1f ms; unscaled %.2f ms: %s)" % (
                f_over, scaled_target, hv["step"] - hv["unconnected"], unc, hv["unconnected"],
                abs_target, "pass" if f_over <= abs_target else "fail")),
            ". DDP overhead: %s ms." % report.fmt(ddp_over)))
        if m == "mlp" and single is not None:
            eff, target = report.efficiency(s, "fuseopt"), REF["targets"]["mlp_efficiency_min"]
            ddp = report.efficiency(s, "ddp") if "ddp" in s else None
            targets["mlp_scaling_efficiency"] = {"fuseopt": eff, "target": target,
                                                 "pass": eff >= target, "ddp": ddp}
            lines.append(verdicts.line(eff >= target, (
                "fuseopt MLP scaling efficiency %.0f%% >= %.0f%% (Horovod %.0f%%, DDP reference "
                "%.0f%%, DDP here %s)" % (eff * 100, target * 100, hv["eff"] * 100,
                                          REF["ddp_reference_efficiency"]["mlp"] * 100,
                                          report.fmt(ddp * 100 if ddp is not None else None,
                                                     "%.0f%%"))), "."))
    if "unconnected" in s and single is not None:
        lines.append("- compute-only ceiling: unconnected efficiency (single / unconnected) "
                     "= %.0f%%." % (100 * single / unc))
    return lines


def compression(c):
    """The compressor a fuseopt contender runs the compress job with, by its public name."""
    name = c.partition(":")[2]
    return "Compression." + (name + "()" if name == "ef_sign" else
                             name if name in COMPRESSORS else "none")


COMPRESS_HEAD = ["contender", "median step ms", "overhead vs unconnected (ms)",
                 "overhead / uncompressed overhead", "validation accuracy", "per-rep step ms",
                 "paired overhead per rep (ms)"]


def compress_rows(s, jobs, contenders):
    """The compress job's rows: step, overhead against fuseopt's without compression, and
    validation accuracy."""
    plain, rows = report.overhead(s, "fuseopt") if "fuseopt" in s else None, []
    for c in (c for c in contenders if c in s):
        over = report.overhead(s, c)
        rows.append(["%s (%s)" % (c, compression(c)) if c.startswith("fuseopt") else c,
                     "%.2f" % s[c]["step_ms"],
                     report.fmt(over), report.fmt(over / plain if over is not None and plain
                                                  else None, "%.2fx"),
                     "%.3f" % s[c]["val_accuracy"], *rep_cells(s, jobs, c, "compress")])
    return rows


def compress_targets(s, targets, verdicts):
    """The compress job's verdict: bf16's overhead against none's. Its accuracy column
    is one seed's, which says little in a chaotic setting: the accuracy claim is judged
    over seeds and kernel sets by compression_accuracy.py."""
    lines, ref = [], REF["targets"]
    plain = report.overhead(s, "fuseopt") if "fuseopt" in s else None
    bf16 = report.overhead(s, "fuseopt:bf16") if "fuseopt:bf16" in s else None
    if plain and bf16 is not None:
        ratio, limit = bf16 / plain, ref["compress_bf16_overhead_max"]
        targets["compress_bf16_overhead"] = {"bf16_overhead_ms": bf16, "ratio": ratio,
                                             "uncompressed_overhead_ms": plain,
                                             "target": limit, "pass": ratio <= limit}
        lines.append(verdicts.line(ratio <= limit, (
            "Compression.bf16 overhead / uncompressed overhead %.2fx <= %.1fx (%.2f ms vs "
            "%.2f ms over unconnected)" % (ratio, limit, bf16, plain)), "."))
    return lines


def build_report(summary, jobs, contenders, models, quick):
    lines, verdicts, targets = [], report.Verdicts(), {}
    for m in models:
        warm, timed = steps_for(m, quick)
        lines.append("### %s (%s; batch %d/rank; %d warm-up + %d timed steps)\n"
                     % (m, TITLES[m][0], BATCH, warm, timed))
        if m == "compress":
            lines += report.table(COMPRESS_HEAD, "lrrrrll", compress_rows(
                summary[m], jobs, contenders)) + [""]
            lines += compress_targets(summary[m], targets, verdicts) + [""]
            continue
        lines += report.table(HEAD, "lrrrrrllll", model_rows(summary[m], jobs, contenders, m))
        lines.append("")
        lines += model_targets(summary[m], jobs, m, targets, verdicts) + [""]
    return "\n".join(lines), verdicts, targets


def plot(summary, contenders, models, path):
    plt = report.pyplot()
    fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 4.8), squeeze=False)
    for ax, m in zip(axes[0], models):
        s, unc = summary[m], report.steps(summary[m])[1]
        names = [c for c in contenders if c in s]
        if m == "compress":  # no reference bar; bars labelled with their accuracy
            plain = report.overhead(s, "fuseopt") if "fuseopt" in s else None
            tgt = plain and unc + REF["targets"]["compress_bf16_overhead_max"] * plain
            refs, labels = [], ["%s\nacc %.3f" % (c, s[c]["val_accuracy"]) for c in names]
        else:
            tgt = unc and unc + overhead_target(m, unc)[1]
            refs, labels = [("horovod\n(ref)", HOROVOD[m]["step"])], None
        lines = [] if unc is None else [(unc, "gray", ":", "unconnected (%.1f ms)" % unc)]
        if tgt:
            lines.insert(0, (tgt, "green", "--", "%s target (%.1f ms)" % (
                "bf16" if m == "compress" else "fuseopt", tgt)))
        top = report.step_bars(
            ax, names + [n for n, _ in refs], [s[c]["step_ms"] for c in names]
            + [v for _, v in refs], "ddp", [s[c]["per_rep_ms"] for c in names],
            [s[c]["per_rep_noisy"] for c in names], lines, labels, rotation=20, loc="lower right")
        ax.set_ylim(0, top * 1.25)
        ax.set_title("%s (%s)" % TITLES[m])
    fig.suptitle("Training step time, batch %d/rank, 2 ranks (dots: repetitions; x: noisy, "
                 "left out)" % BATCH)
    report.save(plt, fig, path, 110)


def run_contender(c, rep, pos, mpiexec, args, discarded):
    """One kept job of c (harness.measured_job): a noisy one (Note [settle]) is rerun up to
    --retry-noisy times and goes to discarded. A failed job ends the run unless --keep-going."""
    models = models_of(c, args.models)

    def job():
        results, stderr = run_job(c, args, mpiexec)
        return dict(quick=args.quick, values={m: job_value(c, results, m) for m in models},
                    checksums={m: None if c in harness.BASELINES else harness.same_weights(
                        "%s/%s" % (c, m), [r["models"][m]["checksum"] for r in results])
                        for m in models},
                    results=results, stderr_tail=stderr[-4000:]), stderr

    for attempt in range(args.retry_noisy + 1):
        rec = harness.measured_job(args, c, rep, pos, job, lambda rec: ", ".join(
            "%s %.2f ms" % (m, rec["values"][m]["step_ms"]) for m in models))
        rec.update(attempt=attempt, env=args.variants.get(c, {}))
        if rec.get("failed") and not args.keep_going:
            raise SystemExit(2)
        noisy = rec["foreign_cores"] is not None and rec["foreign_cores"] > args.max_foreign
        if rec.get("failed") or not noisy or attempt == args.retry_noisy:
            return rec if rec.get("failed") else dict(rec, noisy=noisy)
        discarded.append(rec)
        harness.log("    (other processes used %.2f cores during the job: rerun)\n"
                    % rec["foreign_cores"])


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
            report.fmt(j["idle_before"] and 100 * j["idle_before"], "%.0f%%", "?")
            for j in jobs)),
    ]
    for m in args.models:
        f, d = ([j["checksums"][m] for j in jobs if j["contender"] == c
                 and j["checksums"].get(m)] for c in ("fuseopt", "ddp"))
        if f and d:
            rel = abs(f[0][1] - d[0][1]) / max(1e-12, abs(d[0][1]))
            out.append("%s: ranks agree in every 2-rank job; final sum(p^2) fuseopt vs DDP "
                       "differ by %.1e (relative)." % (m, rel))
    if "compress" in args.models:
        out.append("compress: SGD lr %g, momentum %g; every process trains on its shard of the "
                   "%d digits not held out, %d per step; validation accuracy on the %d held "
                   "out after all its warm-up and timed steps (unconnected: each process alone, "
                   "mean of the two)." % (LR, MOMENTUM, 1797 - VALIDATION, BATCH, VALIDATION))
    if failed:
        out.insert(0, "**%d JOB(S) FAILED** and are left out (--keep-going): %s. Errors are "
                   "in the JSON (failed_jobs)." % (len(failed), ", ".join(
                       "%s (rep %d): %s" % (j["contender"], j["rep"] + 1,
                                            j["error"].splitlines()[0][:80]) for j in failed)))
    return out


def driver_main(args):
    contenders = [c for c in harness.parse_contenders(args, BASE_CONTENDERS)
                  if models_of(c, args.models)]
    mpiexec, started = harness.start(args, contenders, models=args.models)
    discarded = []
    jobs, failed = harness.run_jobs(args, contenders, lambda c, rep, pos: run_contender(
        c, rep, pos, mpiexec, args, discarded))
    if not jobs:
        harness.log("\nEVERY JOB FAILED\n")
        return 2
    summary = summarize(jobs, contenders, args.models)
    table, verdicts, targets = build_report(summary, jobs, contenders, args.models, args.quick)
    text = table + "\n" + "\n".join("- " + n for n in notes(args, jobs, discarded, failed))
    meta = report.run_meta(
        args, started, mpiexec, ranks=NRANKS, models=args.models, settle_s=args.settle,
        max_foreign_cores=args.max_foreign, retry_noisy=args.retry_noisy,
        steps={m: steps_for(m, args.quick) for m in args.models}, batch_per_rank=BATCH, lr=LR,
        variants=args.variants, horovod_reference=HOROVOD, compress_momentum=MOMENTUM)
    status = report.finish(
        args, "torch_train", "torch training-step benchmark",
        {"meta": meta, "summary": summary, "targets": targets, "table_markdown": text,
         "jobs": jobs, "discarded_noisy_jobs": discarded, "failed_jobs": failed}, text,
        lambda path: plot(summary, contenders, args.models, path), verdicts)
    if failed:
        print("%d JOB(S) FAILED (see above and failed_jobs in the JSON)" % len(failed))
        return 2
    return status


def main(argv=None):
    p = harness.parser(__doc__, "fewer steps", 300, BASE_CONTENDERS)
    p.add_argument("--models", default=",".join(MODELS), type=lambda s: s.split(","))
    p.add_argument("--settle", type=float, default=60,
                   help="before each job wait up to this many seconds for the machine to be "
                        ">= 90%% idle (0: don't wait)")
    p.add_argument("--max-foreign", type=float, default=0.25,
                   help="a job during which other processes used more than this many cores "
                        "(on average) is rerun, up to --retry-noisy times")
    p.add_argument("--retry-noisy", type=int, default=2)
    p.add_argument("--compression", choices=COMPRESSORS, help=argparse.SUPPRESS)
    p.add_argument("--keep-going", action="store_true",
                   help="record a failed or timed-out job and go on (exit status 2 at the "
                        "end) instead of stopping at once")
    args = harness.parse(p, argv, ("single", "fuseopt", "ddp"))
    for m in args.models:
        if m not in MODELS:
            p.error("unknown model %r (choose from %s)" % (m, ", ".join(MODELS)))
    return worker_main(args) if args.worker else driver_main(args)


if __name__ == "__main__":
    sys.exit(main())
