"""What recording a timeline costs a training step.

    fuseoptrun -np 2 python benchmarks/timeline_overhead.py

A step is a grouped allreduce of --tensors float32 gradients of --kib KiB
each (the many-small case, where per-tensor events cost the most). Blocks of
--steps steps alternate between timeline off and on (started and stopped at
run time), so both see the same slow spells; the table gives the median step
time of each and their ratio. Rank 0 writes the trace to a temporary file.
"""
import argparse
import os
import statistics
import tempfile
import time

import numpy as np

import fuseopt


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tensors", type=int, default=200)
    p.add_argument("--kib", type=int, default=16)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--blocks", type=int, default=8)
    args = p.parse_args()
    fuseopt.init()
    grads = [np.ones(args.kib * 256, np.float32) for _ in range(args.tensors)]
    names = ["g.%d" % i for i in range(args.tensors)]
    for _ in range(10):  # warm-up: negotiation, cache, buffers
        fuseopt.grouped_allreduce(grads, names=names)
    trace = os.path.join(tempfile.mkdtemp(), "timeline.json")
    times = {"off": [], "on": []}
    for block in range(args.blocks):
        mode = "on" if block % 2 else "off"
        if mode == "on":
            fuseopt.start_timeline(trace)
        for _ in range(args.steps):
            fuseopt.barrier()
            t = time.perf_counter()
            fuseopt.grouped_allreduce(grads, names=names)
            times[mode].append(time.perf_counter() - t)
        if mode == "on":
            fuseopt.stop_timeline()
    if fuseopt.rank() == 0:
        off, on = statistics.median(times["off"]), statistics.median(times["on"])
        events = sum(1 for line in open(trace) if '"ph": "X"' in line)
        print("| step (%d x %d KiB) | median ms | steps |" % (args.tensors, args.kib))
        print("| --- | --- | --- |")
        print("| timeline off | %.3f | %d |" % (off * 1e3, len(times["off"])))
        print("| timeline on | %.3f | %d |" % (on * 1e3, len(times["on"])))
        print("| on / off | %.2fx | (last block wrote %d events, %.1f MB) |"
              % (on / off, events, os.path.getsize(trace) / 1e6))
    fuseopt.shutdown()


if __name__ == "__main__":
    main()
