#!/usr/bin/env python
"""Sharded optimizer benchmark: ZeRO-1/2 against the unsharded DistributedOptimizer and
against DDP + torch's ZeroRedundancyOptimizer, 2 ranks, Adam.

    python benchmarks/sharded.py [--quick] [--reps N] [--models mlp,big] [--ranks N] [--out DIR]

Per model and contender, one job (Note [one job]) of 2 ranks, jobs interleaved (Note
[interleaving]): the median step (forward, backward, step; Note [slowest rank]), each
rank's peak RSS (the process's high-water mark: the model, its gradients and the state),
the optimizer-state bytes per rank and the gradient bytes a rank holds after the step.
Every contender trains the same model from the same seed on the same batches; the ranks
must end with the same weights. ``--ranks 4`` (oversubscribed here) writes the memory
figures at 4 ranks to sharded-4ranks.md, without targets (those are for 2 ranks). Models: mlp (1024-2048-2048-1024-10, 8.4M parameters,
batch 64 per rank) and big (4096-8192-8192-4096-10, 134M parameters, batch 8 per rank).
"""
import os
import resource
import statistics
import sys
import time

import harness
import report

CONTENDERS = ("fuseopt", "zero1", "zero2", "ddp_zero")
SHARD = {"zero1": "optimizer", "zero2": "gradients"}
MODELS = {"mlp": ((1024, 2048, 2048, 1024, 10), 64), "big": ((4096, 8192, 8192, 4096, 10), 8)}
LR = 1e-4


def steps_for(model, quick):
    """(warmup, timed) steps."""
    if model == "big":
        return (1, 3) if quick else (2, 8)
    return (2, 8) if quick else (5, 30)


# ---- worker side -----------------------------------------------------------------------

def _setup(args):
    import torch
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    if args.worker == "ddp_zero":
        import datetime
        import torch.distributed as dist
        rank, size = int(os.environ["PMI_RANK"]), int(os.environ["PMI_SIZE"])
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=size,
                                timeout=datetime.timedelta(seconds=600))
        return torch, None, rank, size
    import fuseopt.torch as hvd
    hvd.init()
    return torch, hvd, hvd.rank(), hvd.size()


def _model(torch, widths):
    torch.manual_seed(0)
    layers = []
    for a, b in zip(widths, widths[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def _optimizer(torch, hvd, kind, model):
    if kind == "ddp_zero":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        net = torch.nn.parallel.DistributedDataParallel(model)
        return net, ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam,
                                            lr=LR)
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=LR),
                                   named_parameters=model.named_parameters(),
                                   shard=SHARD.get(kind))
    return model, opt


def _state_bytes(torch, opt):
    inner = getattr(opt, "optim", None) or getattr(opt, "optimizer", opt)  # torch ZeRO: .optim
    return sum(v.numel() * v.element_size() for s in inner.state.values() for v in s.values()
               if torch.is_tensor(v))


def worker_main(args):
    torch, hvd, rank, size = _setup(args)
    widths, batch = MODELS[args.models]
    model = _model(torch, widths)
    net, opt = _optimizer(torch, hvd, args.worker, model)
    g = torch.Generator().manual_seed(1 + rank)
    batches = [(torch.randn(batch, widths[0], generator=g),
                torch.randint(0, widths[-1], (batch,), generator=g)) for _ in range(4)]
    loss_fn = torch.nn.CrossEntropyLoss()
    warm, timed = steps_for(args.models, args.quick)
    samples = []
    for step in range(warm + timed):
        x, y = batches[step % len(batches)]
        t0 = time.perf_counter()
        loss_fn(net(x), y).backward()
        opt.step()
        t1 = time.perf_counter()
        if step >= warm:
            samples.append((t1 - t0) * 1e3)
        grad_bytes = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters()
                         if p.grad is not None)
        opt.zero_grad(set_to_none=False) if args.worker == "ddp_zero" else opt.zero_grad()
    with torch.no_grad():
        checksum = sum(float(p.double().sum()) for p in model.parameters())
    out = {"kind": args.worker, "rank": rank, "size": size,
           "params": sum(p.numel() for p in model.parameters()),
           "samples_ms": {"step": [round(v, 3) for v in samples]},
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
           "state_bytes": _state_bytes(torch, opt), "grad_bytes_after_step": grad_bytes,
           "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
           "checksum": checksum}
    if hvd is not None:
        hvd.shutdown()
    else:
        torch.distributed.destroy_process_group()
    harness.write_result(args.result_dir, rank, out)
    return 0


# ---- driver side -----------------------------------------------------------------------

def run_job(c, model, args, mpiexec):
    argv = [sys.executable, os.path.abspath(__file__), "--worker", c, "--models", model] + (
        ["--quick"] if args.quick else [])
    env = harness.base_env()
    if harness.NRANKS > (os.cpu_count() or 1):
        env["MPIR_CVAR_NOLOCAL"] = "1"  # MPICH's busy-polling shared memory starves ranks
    return harness.run_job("mpi", argv, env, args.timeout, "%s/%s" % (c, model), mpiexec)


def summarize(jobs, model):
    s = {}
    for c in CONTENDERS:
        mine = [j for j in jobs if j["contender"] == c and j["model"] == model]
        if not mine:
            continue
        s[c] = {"step_ms": statistics.median(j["step_ms"] for j in mine),
                "per_rep_ms": [j["step_ms"] for j in mine],
                "peak_rss_mb": max(max(j["peak_rss_mb"]) for j in mine),
                "state_mb": max(max(j["state_bytes"]) for j in mine) / 2 ** 20,
                "state_min_mb": min(min(j["state_bytes"]) for j in mine) / 2 ** 20,
                "grad_mb": max(max(j["grad_bytes"]) for j in mine) / 2 ** 20,
                "params": mine[0]["params"]}
    return s


def verdicts_for(s, model):
    out = []
    base = s.get("fuseopt")
    if base is None:
        return out
    for c, key, what in (("zero1", "state_mb", "optimizer-state bytes per rank"),
                         ("zero2", "state_mb", "optimizer-state bytes per rank"),
                         ("zero2", "grad_mb", "gradient bytes after the step")):
        if c in s and base[key] > 0:
            ratio = s[c][key] / base[key]
            out.append((ratio <= 0.52, "%s %s: %s %.2fx unsharded's <= 0.52x"
                        % (model, c, what, ratio)))
    for c in ("zero1", "zero2"):
        if c in s:
            ratio = s[c]["step_ms"] / base["step_ms"]
            out.append((ratio <= 1.0, "%s %s: step %.2fx unsharded fuseopt's <= 1.0x"
                        % (model, c, ratio)))
            if "ddp_zero" in s:
                ratio = s[c]["step_ms"] / s["ddp_zero"]["step_ms"]
                out.append((ratio <= 1.0, "%s %s: step %.2fx DDP + ZeroRedundancyOptimizer's "
                            "<= 1.0x" % (model, c, ratio)))
    return out


def render(jobs, models):
    lines, verdicts = [], []
    rows = []
    two = harness.NRANKS == 2
    for model in models:
        s = summarize(jobs, model)
        for c, v in s.items():
            base = s.get("fuseopt")
            state = report.fmt(v["state_mb"], "%.1f")
            if not two:
                state = "%s-%s" % (report.fmt(v["state_min_mb"], "%.1f"), state)
            rows.append([model, c, report.fmt(v["step_ms"], "%.1f"),
                         report.fmt(v["step_ms"] / base["step_ms"] if base else None) + "x",
                         report.fmt(v["peak_rss_mb"], "%.0f"), state,
                         report.fmt(v["grad_mb"], "%.1f"),
                         " ".join("%.1f" % r for r in v["per_rep_ms"])])
        if two:
            verdicts += verdicts_for(s, model)
    lines.append("%d ranks%s, Adam, one thread each. Step: median ms of the slower rank (median "
                 "over reps); memory: the larger rank's; state: optimizer-state tensors per rank%s; "
                 "gradients: what a rank holds after `step()`.\n" % (
                     harness.NRANKS, "" if two else " on %d cores (times are not comparable with "
                     "2 ranks')" % (os.cpu_count() or 1), "" if two else " (smallest-largest)"))
    lines += (report.table(["model", "contender", "step ms", "vs fuseopt", "peak RSS MB",
                               "state MB/rank", "gradients MB/rank", "per rep ms"],
                              "llrrrrrl", rows))
    lines.append("")
    judged = report.Verdicts()
    lines += [judged.line(ok, text) for ok, text in verdicts]
    return "\n".join(lines), judged


def plot(jobs, models, path):
    plt = report.pyplot()
    fig, axes = plt.subplots(len(models), 2, figsize=(10, 3.2 * len(models)), squeeze=False)
    for row, model in zip(axes, models):
        s = summarize(jobs, model)
        names = list(s)
        row[0].bar(names, [s[c]["step_ms"] for c in names], color="#1f77b4")
        row[0].set_ylabel("ms per step")
        row[0].set_title("%s (%.0fM params): step" % (model, s[names[0]]["params"] / 1e6))
        row[1].bar(names, [s[c]["state_mb"] for c in names], label="optimizer state",
                   color="#ff7f0e")
        row[1].bar(names, [s[c]["grad_mb"] for c in names],
                   bottom=[s[c]["state_mb"] for c in names], label="gradients", color="#2ca02c")
        row[1].set_ylabel("MB per rank")
        row[1].set_title("%s: state + gradients after step()" % model)
        row[1].legend()
    report.save(plt, fig, path, 110)


def main(argv=None):
    p = harness.parser(__doc__, "fewer steps, one rep", 900, CONTENDERS, variants=False)
    p.add_argument("--models", default="mlp,big")
    p.add_argument("--ranks", type=int, default=2, help="ranks per job (default 2)")
    args = harness.parse(p, argv, CONTENDERS)
    harness.NRANKS = args.ranks
    if args.worker:
        return worker_main(args)
    if args.quick:
        args.reps = 1
    models = [m for m in args.models.split(",") if m]
    contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    mpiexec, started = harness.start(args, contenders, models=models)
    jobs, failed = [], []
    for model in models:
        def one(c, rep, pos):
            def job():
                results, stderr = run_job(c, model, args, mpiexec)
                sums = [[r["checksum"]] for r in results]
                harness.same_weights("%s/%s" % (c, model), sums)
                steps = harness.slowest([r["samples_ms"]["step"] for r in results])
                return ({"model": model, "step_ms": statistics.median(steps),
                         "params": results[0]["params"],
                         "peak_rss_mb": [r["peak_rss_mb"] for r in results],
                         "state_bytes": [r["state_bytes"] for r in results],
                         "grad_bytes": [r["grad_bytes_after_step"] for r in results]}, stderr)
            return harness.measured_job(args, c, rep, pos, job,
                                        lambda r: "%.1f ms" % r["step_ms"])
        done, bad = harness.run_jobs(args, contenders, one)
        jobs += done
        failed += bad
    text, verdicts = render(jobs, models)
    if failed:
        text += "\n\n%d job(s) failed: %s" % (len(failed), ", ".join(j["contender"] for j in failed))
    record = {"meta": report.run_meta(args, started, mpiexec), "jobs": jobs, "failed": failed}
    name = "sharded" if args.ranks == 2 else "sharded-%dranks" % args.ranks
    return report.finish(args, name, "Sharded optimizer: ZeRO-1/2 against unsharded and "
                         "DDP + ZeroRedundancyOptimizer (%d ranks)" % args.ranks, record, text,
                         lambda path: plot(jobs, models, path), verdicts)


if __name__ == "__main__":
    sys.exit(main())
