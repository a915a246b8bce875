#!/usr/bin/env python
"""What an elastic reset costs: 4 ranks on 2 emulated hosts (needs root,
tests/emulated_hosts.py), host 1's ranks SIGKILLed mid-epoch, the job
continuing on host 0's 2 ranks (tests/workers/elastic_torch.py).

    python benchmarks/elastic_reset.py [--reps N]

The time from the kill to the first step of the new job, in phases, from
timestamps the ranks print and the arrival of fuseoptrun's own lines (one
clock: the emulated hosts share this machine):

- detection: kill -> a survivor leaves for the reset (it saw the lost rank's
  exit record, its operations failed, it shut fuseopt down);
- teardown:  -> fuseoptrun has seen mpiexec end and decided to reset;
- relaunch + init: -> the new job's rank 0 returned from ``init()``
  (mpiexec, Python, torch import, MPI start);
- script set-up: -> the script built its model and optimizer (torch's first
  optimizer costs about 2 s here, a reset or not);
- restore + sync: -> ``run`` restored the commit, ran the reset callbacks and
  synced from rank 0;
- first step: -> the first optimizer step of the new job is done.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(os.path.dirname(HERE), "tests")
sys.path.insert(0, TESTS)
import emulated_hosts  # noqa: E402

PHASES = ("detection", "teardown", "relaunch + init", "script set-up", "restore + sync",
          "first step")


def one_run(hosts):
    out = tempfile.mkdtemp(prefix="elastic-reset-")
    cmd = hosts.prefix(0) + [
        sys.executable, "-m", "fuseopt.launcher.cli", "-H", hosts.host_list(2), "--min-np", "2",
        "--remote-exec", hosts.shim, "--network-interface", "eth0", "--nolocal", "on",
        "-np", "4", sys.executable, os.path.join(TESTS, "workers", "elastic_torch.py"), out,
        "--kill-host", "1", "--kill-at", "9"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    marks, printed = {}, []
    for line in proc.stdout:
        printed.append(line)
        arrived = time.time()
        stamp = re.search(r"t=([\d.]+)", line)
        if line.startswith("[elastic] kill"):
            marks.setdefault("kill", float(stamp.group(1)))
        elif line.startswith("[elastic] exit-for-reset"):
            marks.setdefault("left", float(stamp.group(1)))
        elif "fuseoptrun: elastic: reset 1" in line:
            marks["decided"] = arrived
        elif "decided" in marks and line.startswith("[elastic] init"):
            marks["init"] = float(stamp.group(1))
        elif "decided" in marks and line.startswith("[elastic] built"):
            marks["built"] = float(stamp.group(1))
        elif "decided" in marks and line.startswith("[elastic] start"):
            marks["restored"] = float(stamp.group(1))
        elif "restored" in marks and line.startswith("[elastic] step"):
            marks.setdefault("stepped", float(stamp.group(1)))
    if proc.wait() != 0 or len(marks) != 7:
        raise SystemExit("run failed (%s):\n%s" % (sorted(marks), "".join(printed)))
    order = ["kill", "left", "decided", "init", "built", "restored", "stepped"]
    return [marks[b] - marks[a] for a, b in zip(order, order[1:])]


def commit_cost(reps=5):
    """Seconds per state.commit() of the MLP of docs/benchmarks.md (8.4M
    parameters, SGD with momentum: 67 MB of state), in one process writing
    to a temporary commit store, and per restore of that commit."""
    import torch
    import fuseopt.torch as hvd
    from fuseopt.training import elastic_protocol
    os.environ[elastic_protocol.ELASTIC_DIR_ENV] = tempfile.mkdtemp(prefix="elastic-commit-")
    hvd.init()
    sizes = [1024, 2048, 2048, 1024, 10]
    model = torch.nn.Sequential(*[torch.nn.Linear(a, b) for a, b in zip(sizes, sizes[1:])])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model(torch.randn(4, 1024)).sum().backward()
    optimizer.step()
    state = hvd.elastic.TorchState(model, optimizer, epoch=0)
    commits, restores = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        state.commit()
        t1 = time.perf_counter()
        state._restore_newest()
        restores.append(time.perf_counter() - t1)
        commits.append(t1 - t0)
    hvd.shutdown()
    return statistics.median(commits), statistics.median(restores)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--commit-cost", action="store_true",
                   help="time commit and restore of an 8.4M-parameter MLP instead")
    args = p.parse_args()
    if args.commit_cost:
        print("commit %.3f s, restore %.3f s (median of 5)" % commit_cost())
        return
    with emulated_hosts.EmulatedHosts(2) as hosts:
        runs = [one_run(hosts) for _ in range(args.reps)]
    print("| phase | median (s) | runs (s) |\n| --- | --- | --- |")
    for i, name in enumerate(PHASES):
        values = [r[i] for r in runs]
        print("| %s | %.2f | %s |" % (name, statistics.median(values),
                                      ", ".join("%.2f" % v for v in values)))
    totals = [sum(r) for r in runs]
    print("| **kill to first step** | **%.2f** | %s |" % (
        statistics.median(totals), ", ".join("%.2f" % v for v in totals)))


if __name__ == "__main__":
    main()
