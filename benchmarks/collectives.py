#!/usr/bin/env python
"""Host collectives, fuseopt against MPICH itself through mpi4py and against this
machine's roofline (roofline.py, measured at the start of the run), 2 ranks,
256 KiB-256 MiB: allreduce (async + wait in place, blocking in place, async out of
place with the result dropped), allgather, alltoall, reducescatter and broadcast
(async + wait, results dropped as a loop drops them).

    python benchmarks/collectives.py [--quick] [--reps N] [--out DIR]

Each contender runs in jobs of its own (Note [one job]), interleaved (Note
[interleaving]). Per size and operation, a job times 12 calls after 10 warm-up calls (fuseopt
learns which stores to write its slots with in its first 8 chunks of each size: Note
[Streamed slots]; a training job runs thousands);
a call's time is the slower rank's (Note [slowest rank]). Sizes are each rank's
input: allgather returns twice it, alltoall sends half to each rank, reducescatter
returns half of it, broadcast sends it from rank 0. The table gives each contender's
median over calls and reps, MPICH's best and worst repetitions' medians (its modes stay
visible), and the roofline. Targets (issue 47): every allreduce form at least as fast as
MPICH's best repetition and at >= 0.7x the roofline from 256 KiB; reducescatter and
allgather >= 0.9x MPICH's best at 1-64 MiB.
"""
import json
import os
import statistics
import sys

import harness
import report
import roofline

CONTENDERS = ("fuseopt", "mpi4py")
ALLREDUCES = ("allreduce async", "allreduce blocking", "allreduce out of place")
OPS = ALLREDUCES + ("allgather", "alltoall", "reducescatter", "broadcast")
ROOFLINE_OF = {"allreduce async": "allreduce", "allreduce blocking": "allreduce",
               "allreduce out of place": "allreduce", "allgather": "allgather",
               "reducescatter": "reducescatter"}
WARM, TIMED = 10, 12
TITLE = "host collectives: fuseopt against MPICH and the roofline"


def sizes(quick):
    return [1 << 20, 16 << 20] if quick else [256 << 10, 1 << 20, 4 << 20, 16 << 20,
                                              64 << 20, 256 << 20]


def judged(op, nbytes):
    """The issue-47 target of op at nbytes: (min speed / MPICH best, min fraction of the
    roofline), or None."""
    if op in ALLREDUCES:
        return 1.0, 0.7
    if op in ("allgather", "reducescatter") and (1 << 20) <= nbytes <= (64 << 20):
        return 0.9, None
    return None


def _fuseopt():
    import fuseopt as fo
    fo.init()

    def run(op, a):
        if op == "allreduce async":
            fo.allreduce_async_(a, name="bench.ar", op=fo.Sum).wait()
        elif op == "allreduce blocking":
            fo.allreduce_(a, name="bench.ar", op=fo.Sum)
        elif op == "allreduce out of place":
            fo.allreduce_async(a, name="bench.aro", op=fo.Sum).wait()
        elif op == "allgather":
            fo.allgather_async(a, name="bench.ag").wait()
        elif op == "alltoall":
            fo.alltoall_async(a, name="bench.a2a").wait()
        elif op == "reducescatter":
            fo.reducescatter_async(a, name="bench.rs", op=fo.Sum).wait()
        else:
            fo.broadcast_async_(a, 0, name="bench.bc").wait()
    return fo.rank(), fo.size(), run, fo.barrier, lambda v: fo.allgather_object(v), fo.shutdown


def _mpi4py():
    import numpy as np
    # MPICH's default thread level (MULTIPLE): with SERIALIZED its allreduce of 1-16
    # MiB takes another path, 2-3x slower here (docs/design.md, "MPICH's two modes").
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    size = comm.Get_size()

    outputs = {}  # MPICH at its best: every result buffer allocated once

    def out(key, n, dtype):
        if outputs.get(key) is None or outputs[key].size != n:
            outputs[key] = np.empty(n, dtype)
        return outputs[key]

    def run(op, a):
        if op == "allreduce out of place":
            comm.Allreduce(a, out(op, a.size, a.dtype), op=MPI.SUM)
        elif op in ALLREDUCES:
            comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)
        elif op == "allgather":
            comm.Allgather(a, out(op, a.size * size, a.dtype))
        elif op == "alltoall":
            comm.Alltoall(a, out(op, a.size, a.dtype))
        elif op == "reducescatter":
            comm.Reduce_scatter_block(a, out(op, a.size // size, a.dtype), op=MPI.SUM)
        else:
            comm.Bcast(a, root=0)
    return comm.Get_rank(), size, run, comm.Barrier, comm.allgather, lambda: None


def worker_main(args):
    rank, size, run, barrier, gather, close = (_fuseopt if args.worker == "fuseopt"
                                               else _mpi4py)()
    out = harness.lone_calls(sizes(args.quick), OPS, WARM, TIMED, barrier, run, 1e3)
    every = gather(out)
    close()
    if rank == 0:
        slowest = {k: harness.slowest([r[k] for r in every]) for k in out}
        harness.write_result(args.result_dir, 0, {"ms": slowest})
    else:
        harness.write_result(args.result_dir, rank, {"ms": {}})
    return 0


def render(jobs, quick, bw):
    rows, verdicts = [], report.Verdicts()
    lines = []
    for op in OPS:
        for nbytes in sizes(quick):
            key = "%s/%d" % (op, nbytes)
            per = {c: [statistics.median(j["ms"][key]) for j in jobs if j["contender"] == c]
                   for c in CONTENDERS}
            if not all(per.values()):
                continue
            ours = statistics.median(per["fuseopt"])
            best, worst = min(per["mpi4py"]), max(per["mpi4py"])
            ratio = best / ours  # fuseopt's speed as a fraction of MPICH's best
            roof = (roofline.roofline_ms(ROOFLINE_OF[op], nbytes, bw)
                    if op in ROOFLINE_OF else None)
            rows.append([op, report.size_label(nbytes), "%.3f" % ours,
                         "%.3f" % statistics.median(per["mpi4py"]), "%.3f" % best,
                         "%.3f" % worst, "%.2fx" % ratio, report.fmt(roof, "%.3f"),
                         report.fmt(roof and 100 * roof / ours, "%.0f%%")])
            target = judged(op, nbytes)
            if target:
                lines.append(_verdict(verdicts, op, nbytes, ratio, roof and roof / ours,
                                      *target))
    head = ("2 ranks; ms per call, the slower rank; fuseopt: async + wait (blocking where "
            "said), out-of-place results dropped; MPICH: mpi4py's blocking call into a "
            "result buffer allocated once. " + roofline.describe(bw) + "\n")
    table = report.table(["operation", "per-rank input", "fuseopt median ms",
                          "MPICH median ms", "MPICH best rep ms", "MPICH worst rep ms",
                          "fuseopt speed / MPICH best", "roofline ms",
                          "fuseopt speed / roofline"], "llrrrrrrr", rows)
    return "\n".join([head] + table + [""] + lines), verdicts


def _verdict(verdicts, op, nbytes, ratio, of_roof, min_ratio, min_roof):
    """The target's lines, one per figure judged, the figure first."""
    where = "%s per rank" % report.size_label(nbytes)
    lines = [verdicts.line(ratio >= min_ratio, "%.2fx the speed of MPICH's best repetition, "
                           "fuseopt's %s (%s) >= %.1fx" % (ratio, op, where, min_ratio))]
    if min_roof is not None:
        lines.append(verdicts.line(of_roof >= min_roof, "%.0f%% of the roofline, fuseopt's %s "
                                   "(%s) >= %.0f%%" % (100 * of_roof, op, where, 100 * min_roof)))
    return "\n".join(lines)


def plot(jobs, quick, path, bw):
    plt = report.pyplot()
    fig, axes = plt.subplots(2, 4, figsize=(14, 6.4))
    axes = axes.flatten()
    xs = [n / (1 << 20) for n in sizes(quick)]
    for ax, op in zip(axes, OPS):
        for c, colour in zip(CONTENDERS, ("#1f77b4", "#999999")):
            ys = [statistics.median(statistics.median(j["ms"]["%s/%d" % (op, n)])
                                    for j in jobs if j["contender"] == c) for n in sizes(quick)]
            ax.plot(xs, ys, "o-", color=colour, label="fuseopt" if c == "fuseopt" else "MPICH")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(op)
        ax.set_xlabel("MiB per rank")
        if op in ROOFLINE_OF:
            ax.plot(xs, [roofline.roofline_ms(ROOFLINE_OF[op], n, bw) for n in sizes(quick)],
                    "--", color="#2ca02c", label="roofline")
    axes[0].set_ylabel("ms per call")
    axes[4].set_ylabel("ms per call")
    axes[0].legend()
    axes[-1].axis("off")
    report.save(plt, fig, path, 110)


def main(argv=None):
    p = harness.parser(__doc__, "two sizes, one rep", 600, CONTENDERS, variants=False)
    p.add_argument("--render", metavar="JSON", help="write the tables of an earlier run's JSON")
    args = harness.parse(p, argv, CONTENDERS)
    if args.worker:
        return worker_main(args)
    if args.render:  # the tables again from a run's JSON (e.g. after a change of wording)
        with open(args.render) as f:
            return _report(args, json.load(f))
    contenders, mpiexec, started = harness.begin(args)

    def one(c, rep, pos):
        def job():
            # The memory bandwidth drifts on a shared machine: measured before every
            # job, and the roofline takes the best (the machine's limit).
            bw = roofline.bandwidths(reps=4)
            argv = [sys.executable, os.path.abspath(__file__), "--worker", c] + (
                ["--quick"] if args.quick else [])
            results, stderr = harness.run_job("mpi", argv, harness.base_env(), args.timeout, c,
                                              mpiexec)
            return {"ms": results[0]["ms"], "bandwidth_gbs": bw}, stderr
        return harness.measured_job(args, c, rep, pos, job,
                                    lambda r: roofline.bandwidth_text(r["bandwidth_gbs"]))
    jobs, failed = harness.run_jobs(args, contenders, one)
    return _report(args, {"meta": report.run_meta(args, started, mpiexec), "jobs": jobs,
                          "failed": failed})


def _report(args, record):
    """Tables, plot and files of a run's record (jobs and meta)."""
    jobs, quick = record["jobs"], record["meta"]["quick"]
    bw = roofline.best([j["bandwidth_gbs"] for j in jobs if "bandwidth_gbs" in j])
    record["meta"]["bandwidth_gbs"] = bw
    text, verdicts = render(jobs, quick, bw)
    return report.finish(args, "collectives", TITLE, record, text,
                         lambda path: plot(jobs, quick, path, bw), verdicts)

if __name__ == "__main__":
    sys.exit(main())
