#!/usr/bin/env python
"""Launch overhead: how long a 2-rank job of one small allreduce takes from the
caller's point of view, for every way fuseopt starts ranks, against the
launchers users would otherwise use (Hydra's mpiexec with mpi4py, torchrun with
torch.distributed/gloo).

    python benchmarks/launch.py [--quick] [--reps N] [--out DIR]

Contenders, each timed from the call to the results in the caller:

- ``mpiexec+mpi4py``: ``mpiexec -n 2 python -c <init, allreduce>``; the floor of
  a process-per-rank MPI job here;
- ``torchrun+gloo``: ``torchrun --nproc-per-node 2`` of init_process_group(gloo)
  and one all_reduce;
- ``fuseoptrun``: ``fuseoptrun -np 2 python -c <fuseopt.init, allreduce>``;
- ``fuseopt.run``: the call from a running Python process (a new fuseoptrun job
  inside);
- ``ray:start+run``: ``RayExecutor.start()``, ``run(fn)``, ``shutdown()`` with
  Ray already up; ``ray:run``: one more ``run(fn)`` on started workers (the
  world is up: what each later call costs);
- ``spark.run``: ``fuseopt.spark.run(fn, num_proc=2)`` with a ``local[2]``
  SparkSession up.

Ray and Spark run in helper processes of their own (started once, their start
not counted), which take one measurement per line on stdin, so that every
contender is interleaved with the others in each repetition.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import harness
import report

RANK_CODE = ("import fuseopt, numpy; fuseopt.init(); "
             "fuseopt.allreduce(numpy.ones(4), name='launch'); fuseopt.shutdown()")
MPI4PY_CODE = ("from mpi4py import MPI; import numpy; c = MPI.COMM_WORLD; "
               "c.Allreduce(MPI.IN_PLACE, numpy.ones(4))")
GLOO_CODE = ("import torch, torch.distributed as d; d.init_process_group('gloo'); "
             "d.all_reduce(torch.ones(4)); d.destroy_process_group()")
CONTENDERS = ("mpiexec+mpi4py", "torchrun+gloo", "fuseoptrun", "fuseopt.run",
              "ray:start+run", "ray:run", "spark.run")


def rank_fn():
    import numpy as np
    import fuseopt
    fuseopt.init()
    return float(fuseopt.allreduce(np.ones(4), name="launch")[0])


# ---- helpers: one engine each, one measurement per stdin line -------------------------

def answer(seconds):
    """One measurement back to the driver (on the real stdout: the engines'
    own output goes to sys.stdout, which the helpers point at /dev/null)."""
    sys.__stdout__.write("%.6f\n" % seconds)
    sys.__stdout__.flush()


def serve_ray():
    import ray
    from fuseopt.ray import RayExecutor
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    executor = None
    for line in sys.stdin:
        started = time.perf_counter()
        if line.strip() == "start+run":
            if executor is not None:
                executor.shutdown()
            executor = RayExecutor(RayExecutor.create_settings(), num_workers=2)
            executor.start()
            executor.run(rank_fn)
            executor.shutdown()
            executor = None
            answer(time.perf_counter() - started)
            continue
        if executor is None:  # ray:run: a started executor whose world is up
            executor = RayExecutor(RayExecutor.create_settings(), num_workers=2)
            executor.start()
            executor.run(rank_fn)
            started = time.perf_counter()
        executor.run(rank_fn)
        answer(time.perf_counter() - started)


def serve_spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    import fuseopt.spark
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    fuseopt.spark.run(rank_fn, num_proc=2)  # the Python workers' first start
    for _ in sys.stdin:
        started = time.perf_counter()
        fuseopt.spark.run(rank_fn, num_proc=2)
        answer(time.perf_counter() - started)


def serve_run():
    import fuseopt
    for _ in sys.stdin:
        started = time.perf_counter()
        fuseopt.run(rank_fn, num_proc=2)
        answer(time.perf_counter() - started)


# ---- the driver -----------------------------------------------------------------------

class Helper:
    def __init__(self, kind):
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", kind],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)

    def measure(self, what=""):
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline().split()[0])

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(60)


def timed(cmd):
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=300)
    return time.perf_counter() - started


def commands(mpiexec):
    py = sys.executable
    torchrun = os.path.join(os.path.dirname(py), "torchrun")
    return {
        "mpiexec+mpi4py": [mpiexec, "-n", "2", py, "-c", MPI4PY_CODE],
        "torchrun+gloo": [torchrun, "--nproc-per-node", "2", "--master-port",
                          str(harness.free_ports(1)[0]), "--no-python", py, "-c", GLOO_CODE],
        "fuseoptrun": [py, "-m", "fuseopt.launcher.cli", "-np", "2", py, "-c", RANK_CODE],
    }


def measure_all(args, mpiexec):
    helpers = {"ray": Helper("ray"), "spark": Helper("spark"), "run": Helper("run")}
    samples = {c: [] for c in CONTENDERS}
    try:
        for rep, _, c in harness.interleaved(CONTENDERS, args.reps, args.seed):
            cmd = commands(mpiexec).get(c)
            if cmd is not None:
                samples[c].append(timed(cmd))
            elif c == "fuseopt.run":
                samples[c].append(helpers["run"].measure())
            elif c.startswith("ray:"):
                samples[c].append(helpers["ray"].measure(c[4:]))
            else:
                samples[c].append(helpers["spark"].measure())
            harness.log("rep %d %-15s %.3f s\n" % (rep, c, samples[c][-1]))
    finally:
        for h in helpers.values():
            h.close()
    return samples


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="3 repetitions")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default=harness.RESULTS)
    p.add_argument("--serve", choices=("ray", "spark", "run"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        sys.stdout = open(os.devnull, "w")
        return {"ray": serve_ray, "spark": serve_spark, "run": serve_run}[args.serve]()
    if args.quick:
        args.reps = 3
    mpiexec, started = harness.start(args, CONTENDERS)
    samples = measure_all(args, mpiexec)
    floor = statistics.median(samples["mpiexec+mpi4py"])
    rows = [[c, "%.2f" % statistics.median(v), "%.2f" % min(v), "%.2f" % max(v),
             "%.2fx" % (statistics.median(v) / floor)] for c, v in samples.items()]
    text = "\n".join(["2 ranks on this %d-core machine; seconds from the call to the results "
                      "(median, min, max of %d interleaved repetitions)." % (
                          os.cpu_count() or 0, args.reps), ""]
                     + report.table(["contender", "median s", "min s", "max s",
                                     "vs mpiexec+mpi4py"], "lrrrr", rows))
    record = {"meta": report.run_meta(args, started, mpiexec), "samples": samples}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "launch.json"), "w") as f:
        json.dump(record, f, separators=(",", ":"))
    with open(os.path.join(args.out, "launch.md"), "w") as f:
        f.write("# Launch overhead\n\n`%s` (%s, %d reps)\n\n%s\n" % (
            record["meta"]["command"], record["meta"]["started"], args.reps, text))
    print(text)


if __name__ == "__main__":
    sys.exit(main())
