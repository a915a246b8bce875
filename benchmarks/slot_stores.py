#!/usr/bin/env python
"""How fuseopt's shared-memory slots are written (FUSEOPT_SHM_STORES), against where
the host has put the two ranks' cores: auto (the default: it times plain and streaming
stores as it goes and uses the faster), cached (plain stores only), streamed
(streaming stores only), and MPICH's own calls through mpi4py, 2 ranks.

    python benchmarks/slot_stores.py [--quick] [--reps N] [--out DIR]

Before every job the driver measures where the cores sit: the time for one process
to write 1 MiB and another to read it (roofline.handoff_us; this VM: 115-190 us with
its vCPUs on cores that share a cache, 520-620 us apart, and its host moves them
between the two every few seconds). Each contender runs in jobs of its own,
interleaved; per size and operation a job times 45 calls after a barrier each (the
first 10 left out: auto learns in its first 8 chunks of each size), the slower rank's
time. The table gives each contender's median
over jobs of its per-job medians, and its worst job's. Target (Note [Streamed slots]
in native/src/transport/mpi/store_choice.h): auto's median within 1.15x of the better
fixed kind's at every size, and its worst job no slower than the worse fixed kind's.
"""
import os
import statistics
import sys

import harness
import report
import roofline

CONTENDERS = ("auto", "cached", "streamed", "mpi4py")
OPS = ("allreduce", "allgather", "broadcast")
WARM, TIMED = 10, 35
TITLE = "shared-memory slots: plain or streaming stores, and where the cores sit"


def sizes(quick):
    return [1 << 20] if quick else [256 << 10, 1 << 20, 4 << 20, 16 << 20]


def _calls(contender):
    """(rank, barrier, run(op, array), gather, close) of a worker."""
    if contender == "mpi4py":
        import numpy as np
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        outs = {}

        def run(op, a):
            if op == "allreduce":
                comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)
            elif op == "allgather":
                if outs.get(a.size) is None:
                    outs[a.size] = np.empty(a.size * comm.Get_size(), a.dtype)
                comm.Allgather(a, outs[a.size])
            else:
                comm.Bcast(a, root=0)
        return comm.Get_rank(), comm.Barrier, run, comm.allgather, lambda: None
    import fuseopt as fo
    fo.init()

    def run(op, a):
        if op == "allreduce":
            fo.allreduce_async_(a, name="slots.ar", op=fo.Sum).wait()
        elif op == "allgather":
            fo.allgather_async(a, name="slots.ag").wait()
        else:
            fo.broadcast_async_(a, 0, name="slots.bc").wait()
    return fo.rank(), fo.barrier, run, fo.allgather_object, fo.shutdown


def worker_main(args):
    rank, barrier, run, gather, close = _calls(args.worker)
    out = harness.lone_calls(sizes(args.quick), OPS, WARM, TIMED, barrier, run, 1e6)
    every = gather(out)
    close()
    result = {k: harness.slowest([r[k] for r in every]) for k in out} if rank == 0 else {}
    harness.write_result(args.result_dir, rank, {"us": result})
    return 0


def render(jobs, quick):
    rows, lines, verdicts = [], [], report.Verdicts()
    med = statistics.median
    for op in OPS:
        for nbytes in sizes(quick):
            key = "%s/%d" % (op, nbytes)
            per = {c: [med(j["us"][key]) for j in jobs if j["contender"] == c]
                   for c in CONTENDERS}
            if not all(per.values()):
                continue
            rows.append([op, report.size_label(nbytes)] + ["%.0f" % med(per[c]) for c in CONTENDERS]
                        + ["%.0f" % max(per[c]) for c in CONTENDERS[:3]])
            better = min(med(per["cached"]), med(per["streamed"]))
            worse_worst = max(max(per["cached"]), max(per["streamed"]))
            where = "%s %s" % (op, report.size_label(nbytes))
            lines.append(verdicts.line(med(per["auto"]) <= 1.15 * better,
                         "auto's median %.2fx the better fixed kind's, %s <= 1.15x" % (
                             med(per["auto"]) / better, where)))
            lines.append(verdicts.line(max(per["auto"]) <= worse_worst,
                         "auto's worst job %.0f us against the fixed kinds' worst %.0f us, "
                         "%s" % (max(per["auto"]), worse_worst, where)))
    probe = sorted((j["handoff_us"], j["contender"], med(j["us"]["allreduce/%d" % (1 << 20)]))
                   for j in jobs)
    head = ("2 ranks; us per call after a barrier, the slower rank; median over jobs of each "
            "job's median, and the slowest job's. fuseopt: async + wait, in place for "
            "allreduce and broadcast, FUSEOPT_SHM_STORES=auto/cached/streamed; MPICH: "
            "mpi4py's blocking calls. 1 MiB handed between the cores before each job: "
            "%.0f-%.0f us (median %.0f).\n" % (probe[0][0], probe[-1][0],
                                                med(p[0] for p in probe)))
    table = report.table(["operation", "per-rank input"] + ["%s median" % c for c in CONTENDERS]
                         + ["%s worst job" % c for c in CONTENDERS[:3]], "llrrrrrrr", rows)
    jobs_table = report.table(["1 MiB handoff before the job, us", "contender",
                               "allreduce 1 MiB median, us"], "rlr",
                              [["%.0f" % h, c, "%.0f" % a] for h, c, a in probe])
    return "\n".join([head] + table + ["", "Each job, by where the cores sat before it:", ""]
                     + jobs_table + [""] + lines), verdicts


def plot(jobs, quick, path):
    plt = report.pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    colours = {"auto": "#1f77b4", "cached": "#ff7f0e", "streamed": "#2ca02c",
               "mpi4py": "#999999"}
    for c in CONTENDERS:
        pts = [(j["handoff_us"], statistics.median(j["us"]["allreduce/%d" % (1 << 20)]))
               for j in jobs if j["contender"] == c]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], color=colours[c], label=c)
    ax.set_xlabel("1 MiB handed between the cores before the job, us")
    ax.set_ylabel("allreduce 1 MiB, us per call")
    ax.set_yscale("log")
    ax.legend()
    report.save(plt, fig, path, 110)


def main(argv=None):
    p = harness.parser(__doc__, "1 MiB only, one rep", 600, CONTENDERS, variants=False)
    args = harness.parse(p, argv, CONTENDERS)
    if args.worker:
        return worker_main(args)
    contenders, mpiexec, started = harness.begin(args)

    def one(c, rep, pos):
        def job():
            handoff = roofline.handoff_us()
            env = harness.base_env({"FUSEOPT_SHM_STORES": c} if c != "mpi4py" else {})
            argv = [sys.executable, os.path.abspath(__file__), "--worker", c] + (
                ["--quick"] if args.quick else [])
            results, stderr = harness.run_job("mpi", argv, env, args.timeout, c, mpiexec)
            return {"us": results[0]["us"], "handoff_us": handoff}, stderr
        return harness.measured_job(args, c, rep, pos, job,
                                    lambda r: "handoff %.0f us" % r["handoff_us"])
    jobs, failed = harness.run_jobs(args, contenders, one)
    record = {"meta": report.run_meta(args, started, mpiexec), "jobs": jobs, "failed": failed}
    text, verdicts = render(jobs, args.quick)
    return report.finish(args, "slot_stores", TITLE, record, text,
                         lambda path: plot(jobs, args.quick, path), verdicts)


if __name__ == "__main__":
    sys.exit(main())
