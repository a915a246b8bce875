#!/usr/bin/env python
"""This machine's memory bandwidth, STREAM-style, and the time a 2-rank collective
cannot beat on it (issue 47, item 1).

    python benchmarks/roofline.py        # prints the bandwidths and roofline times

copy (b = a) and triad (a = b + s*c) over 64 MiB float32 arrays (twice the L3
cache), one thread per process, first on one core alone and then on both cores at
once (one process each, started together); bytes counted as STREAM counts them
(read + written). The collectives' benchmarks call bandwidths() at their start,
so their roofline is of the same run.

The roofline of a collective of S bytes per rank is the memory traffic one rank
cannot avoid, over half the two-core triad bandwidth (both ranks stream at once and
share the memory bus): every byte of its input read once and every byte of its
output written once,
  allreduce      read S, write S           -> 2 S
  reducescatter  read S, write S / 2       -> 1.5 S
  allgather      read S, write 2 S         -> 3 S
What the ranks exchange can pass through the shared L3 cache (fuseopt's 2 MiB
shared-memory slots do) and is not counted.
"""
import multiprocessing
import sys
import time

ELEMENTS = 16 << 20  # float32: 64 MiB per array
TRAFFIC = {"allreduce": 2.0, "reducescatter": 1.5, "allgather": 3.0}


def _stream(barrier, queue, reps):
    import torch
    torch.set_num_threads(1)
    a, b, c = (torch.ones(ELEMENTS) for _ in range(3))
    best = {"copy": 0.0, "triad": 0.0}
    barrier.wait()
    for _ in range(reps):
        for kind in best:
            t0 = time.perf_counter()
            if kind == "copy":
                b.copy_(a)
                moved = 2 * a.numel() * 4
            else:
                torch.add(b, c, alpha=3.0, out=a)
                moved = 3 * a.numel() * 4
            best[kind] = max(best[kind], moved / (time.perf_counter() - t0) / 1e9)
    queue.put(best)


def _together(n, reps):
    ctx = multiprocessing.get_context("spawn")
    barrier, queue = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_stream, args=(barrier, queue, reps)) for _ in range(n)]
    for p in procs:
        p.start()
    got = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join()
    return {kind: sum(g[kind] for g in got) for kind in ("copy", "triad")}


def _handoff(side, name, reps, queue):
    """One side of handoff_us(): side 0 writes the buffer and waits for side 1 to read
    it all; the time of each round trip, in microseconds, goes to the queue."""
    import numpy as np
    from multiprocessing import shared_memory
    shm = shared_memory.SharedMemory(name=name)
    flag = np.ndarray((8,), np.int64, shm.buf, 0)  # one cache line
    data = np.ndarray((HANDOFF_BYTES // 4,), np.float32, shm.buf, 4096)
    times = []
    for k in range(1, reps + 1):
        if side == 0:
            t0 = time.perf_counter()
            data.fill(k)
            flag[0] = 2 * k - 1
            while flag[0] != 2 * k:
                pass
            times.append((time.perf_counter() - t0) * 1e6)
        else:
            while flag[0] != 2 * k - 1:
                pass
            data.sum()
            flag[0] = 2 * k
    del flag, data
    shm.close()
    if side == 0:
        queue.put(times)


HANDOFF_BYTES = 1 << 20


def handoff_us(reps=40):
    """Where the two cores sit, as a collective feels it: the median time for one process
    to write 1 MiB and another to read it all (float32, through shared memory). Near
    (cores sharing a cache) this VM measured 115-150 us; apart (its host placed the
    vCPUs on cores without a shared cache) 520-620 us (docs/benchmarks.md, "Where the
    ranks' cores sit")."""
    import statistics
    from multiprocessing import shared_memory
    ctx = multiprocessing.get_context("spawn")
    shm = shared_memory.SharedMemory(create=True, size=4096 + HANDOFF_BYTES)
    try:
        shm.buf[:8] = bytes(8)
        queue = ctx.Queue()
        procs = [ctx.Process(target=_handoff, args=(side, shm.name, reps, queue))
                 for side in (0, 1)]
        for p in procs:
            p.start()
        times = queue.get(timeout=120)
        for p in procs:
            p.join()
    finally:
        shm.close()
        shm.unlink()
    return statistics.median(times[reps // 4:])


def bandwidths(reps=8):
    """{"1 core": {"copy": GB/s, "triad": GB/s}, "2 cores": {...}} (2 cores: the sum
    of both processes' best repetitions)."""
    return {"1 core": _together(1, reps), "2 cores": _together(2, reps)}


def best(measured):
    """The highest of several bandwidths() figures, kind by kind, with the lowest
    two-core triad and the count kept for describe()."""
    out = {cores: {kind: max(m[cores][kind] for m in measured) for kind in ("copy", "triad")}
           for cores in ("1 core", "2 cores")}
    out["measured"] = len(measured)
    out["lowest 2-core triad"] = min(m["2 cores"]["triad"] for m in measured)
    return out


def roofline_ms(op, nbytes, bw):
    """The least time in ms for a 2-rank op of nbytes per rank at bandwidths bw."""
    per_rank_gbs = bw["2 cores"]["triad"] / 2
    return TRAFFIC[op] * nbytes / (per_rank_gbs * 1e9) * 1e3


def bandwidth_text(bw):
    """The bandwidths measured, in words."""
    spread = ("" if "measured" not in bw else " (the best of %d measurements, one before each "
              "job; the lowest two-core triad %.1f GB/s)" % (bw["measured"],
                                                            bw["lowest 2-core triad"]))
    return ("Memory bandwidth in this run (STREAM-style, 64 MiB float32 arrays): copy "
            "%.1f GB/s and triad %.1f GB/s on one core; %.1f and %.1f GB/s on both cores at "
            "once%s" % (bw["1 core"]["copy"], bw["1 core"]["triad"], bw["2 cores"]["copy"],
                        bw["2 cores"]["triad"], spread))


def describe(bw):
    """One sentence for a results file."""
    return bandwidth_text(bw) + (
        ". Roofline: one rank's input read and output written once (allreduce 2x, "
        "reducescatter 1.5x, allgather 3x its input) at half the two-core triad bandwidth "
        "(benchmarks/roofline.py).")


def main():
    bw = bandwidths()
    print(describe(bw))
    print("1 MiB handed from one core to the other: %.0f us" % handoff_us())
    for op in TRAFFIC:
        print("%-13s " % op + "  ".join("%d MiB %.2f ms" % (n >> 20, roofline_ms(op, n, bw))
                                        for n in (1 << 20, 16 << 20, 64 << 20)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
