"""Soak: many steps of a many-tensor workload; memory and handles must not grow.

    fuseoptrun -np 2 python tests/workers/soak.py --steps 10000

Each step is what a training step asks of fuseopt: a grouped allreduce of
--tensors gradients of mixed sizes, a few single allreduces (two of them
dropped without a wait, as a careless caller would), one allgather of a
ragged array and one broadcast. Resident memory (VmRSS) and the number of
native handles are sampled after a warm-up and at the end; the difference
must stay within noise. Prints a table on rank 0; exits 1 when --check is
given and growth exceeds --max-growth-mb or any handle is left.
"""
import argparse
import time

import numpy as np

import fuseopt


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def make_tensors(count, rank):
    rng = np.random.default_rng(0)
    sizes = rng.integers(16, 4096, size=count)
    return [np.full(int(s), rank + 1, np.float32) for s in sizes]


def step(i, grads, names):
    group = fuseopt.grouped_allreduce_async(grads, names=names, op=fuseopt.Sum)
    singles = [fuseopt.allreduce_async(np.full(64, i % 7, np.int64), name="single.%d" % k,
                                       op=fuseopt.Max) for k in range(4)]
    # Dropped without a wait: parked, then reaped by a later enqueue.
    fuseopt.allreduce_async(np.ones(32, np.float32), name="dropped.%d" % (i % 2))
    ragged = fuseopt.allgather_async(np.arange(fuseopt.rank() + 1 + i % 3, dtype=np.float64),
                                     name="ragged")
    bcast = fuseopt.broadcast_async(np.full(8, fuseopt.rank(), np.float64), i % fuseopt.size(),
                                    name="bcast")
    out = group.wait()
    for h in singles:
        assert h.wait()[0] == i % 7
    assert ragged.wait().size > 0
    assert bcast.wait()[0] == i % fuseopt.size()
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10000)
    p.add_argument("--tensors", type=int, default=50)
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--check", action="store_true")
    p.add_argument("--max-growth-mb", type=float, default=8.0)
    args = p.parse_args()
    fuseopt.init()
    rank, size = fuseopt.rank(), fuseopt.size()
    grads = make_tensors(args.tensors, rank)
    names = ["grad.%d" % k for k in range(args.tensors)]
    expected = sum(r + 1 for r in range(size))
    samples = []
    start = time.time()
    for i in range(args.steps):
        out = step(i, grads, names)
        if i == 0:
            assert all(float(o[0]) == expected for o in out)
        if i in (args.warmup, args.steps - 1) or (i > args.warmup and i % 2000 == 0):
            samples.append((i, rss_mb(), fuseopt.pending_handles()))
    elapsed = time.time() - start
    fuseopt.barrier()
    fuseopt.allreduce(np.ones(1), name="reap")  # the last dropped handles
    final_handles = fuseopt.pending_handles()
    report = fuseopt.allgather_object((rank, samples, final_handles, elapsed))
    growth = max(s[-1][1] - s[0][1] for _, s, _, _ in report)
    leftover = max(h for _, _, h, _ in report)
    if rank == 0:
        print("soak: %d ranks, %d steps of %d tensors (+7 other ops), %.1f s, %.2f ms/step"
              % (size, args.steps, args.tensors, elapsed, 1000 * elapsed / args.steps))
        print("%-5s %-8s %-10s %-8s" % ("rank", "step", "rss_mb", "handles"))
        for r, s, _, _ in sorted(report):
            for i, rss, handles in s:
                print("%-5d %-8d %-10.1f %-8d" % (r, i, rss, handles))
        print("rss growth after warm-up: %.2f MB (max over ranks); handles left: %d"
              % (growth, leftover))
    fuseopt.shutdown()
    if args.check and (growth > args.max_growth_mb or leftover):
        raise SystemExit("soak: memory grew %.2f MB (limit %.1f) or %d handles were left"
                         % (growth, args.max_growth_mb, leftover))


if __name__ == "__main__":
    main()
