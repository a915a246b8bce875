#!/usr/bin/env python
"""Alpha-beta-gamma cost model of allreduce algorithms, fitted on this host.

    python benchmarks/cost_model.py [--link 25gbe|ib100] [--inter-alpha-us US] [--inter-gbps G]
    mpiexec -n 2 python benchmarks/cost_model.py --measure [--level intra|inter] [--out JSON]

Default mode reads fitted parameters from results/cost_model_params.json (no MPI), prints
projected allreduce times and the fusion-bucket and compression recommendations, and
writes results/cost_model.png. --measure fits alpha/beta from a ping-pong and gamma from
MPI_Reduce_local on 2 ranks, checks them against an MPI_Allreduce sweep, and stores them
as the intra-node link (--level inter: as the inter-node link, for ranks on two hosts).
See docs/scaling.md.
"""
import argparse
import datetime
import json
import math
import os
import platform
import statistics
import sys
from collections import namedtuple

HERE = os.path.dirname(os.path.abspath(__file__))
PARAMS = os.path.join(HERE, "results", "cost_model_params.json")
PLOT = os.path.join(HERE, "results", "cost_model.png")
RANKS = (2, 8, 64, 1024, 8192)
PER_NODE = 8
# torch_train.py's "mlp" and tf_train.py's model are both Linear 1024-2048-2048-1024-10.
MLP_DIMS = (1024, 2048, 2048, 1024, 10)
MODELS = (  # (name, float32 gradient bytes)
    ("small 100x64", 4 * 100 * (64 * 64 + 64)),  # torch_train.py "small"
    ("MLP 8.4M", 4 * sum(a * b + b for a, b in zip(MLP_DIMS, MLP_DIMS[1:]))),
    ("ResNet-50", 4 * 25_600_000),
    ("1.3B LM", 4 * 1_300_000_000),
)
# NOT measured here (one host): typical MPI point-to-point figures, large-message payload rate.
LINKS = {
    "25gbe": (20.0, 23.0, "25 GbE over TCP (assumed: 20 us latency, 23 Gb/s payload)"),
    "ib100": (1.5, 96.0, "100 Gb/s InfiniBand EDR/HDR100, RDMA (assumed: 1.5 us, 96 Gb/s)"),
}
ASSUMPTIONS = """\
Assumptions: each message costs alpha + bytes*beta (Hockney), reducing costs gamma per byte;
full-duplex links, a non-blocking fabric (no congestion), no stragglers, no pipelining and no
overlap with compute; power-of-two ranks, %d per node in blocks, one NIC per node shared by
that node's concurrent inter-node flows; a step with an inter-node hop runs at the inter-node
alpha/beta. Intra-node figures were fitted with 2 ranks on one host; inter-node presets are
assumptions unless the JSON holds a measured "inter".""" % PER_NODE

Link = namedtuple("Link", "alpha beta")
Cost = namedtuple("Cost", "lat xfer red")  # seconds in alpha, beta and gamma terms


def total(c):
    return c.lat + c.xfer + c.red


# ---- algorithms: n bytes, p ranks, L per node, N = p / L nodes -> Cost -----------------

def ring(n, p, L, N, intra, inter, g):
    # 2(p-1) steps of n/p bytes. Ordered node by node, one flow per node leaves it, but
    # every step waits for its slowest hop: take the worse link (pessimistic if one link
    # is worse in alpha and the other in beta).
    link = Link(max(intra.alpha, inter.alpha), max(intra.beta, inter.beta)) if N > 1 else intra
    return Cost(2 * (p - 1) * link.alpha, 2 * (p - 1) / p * n * link.beta, (p - 1) / p * n * g)


def rec_doubling(n, p, L, N, intra, inter, g):
    # log2 p exchanges of the whole vector; in the log2 N inter-node steps all L ranks
    # of a node send n bytes at once through its one NIC.
    a, b = math.log2(L), math.log2(N)
    return Cost(a * intra.alpha + b * inter.alpha,
                a * n * intra.beta + b * L * n * inter.beta, math.log2(p) * n * g)


def rabenseifner(n, p, L, N, intra, inter, g):
    # Reduce-scatter by recursive halving + allgather by recursive doubling. MPICH pairs
    # the nearest ranks first, so the big halves stay inside the node and the NIC carries
    # (1 - 1/N) n per phase: hierarchical by construction, with log-depth latency.
    return Cost(2 * (math.log2(L) * intra.alpha + math.log2(N) * inter.alpha),
                2 * ((1 - 1 / L) * n * intra.beta + (1 - 1 / N) * n * inter.beta),
                (1 - 1 / p) * n * g)


def hierarchical(n, p, L, N, intra, inter, g):
    # Horovod/NCCL style: ring reduce-scatter in the node, L concurrent rings of n/L across
    # nodes (one per local rank, sharing the NIC), ring allgather in the node.
    node = ring(n, L, L, 1, intra, intra, g) if L > 1 else Cost(0, 0, 0)
    if N == 1:
        return node
    cross = ring(n / L, N, 1, N, inter, inter, g)
    return Cost(node.lat + cross.lat, node.xfer + L * cross.xfer, node.red + cross.red)


ALGOS = (("ring", ring), ("rec. doubling", rec_doubling), ("Rabenseifner", rabenseifner),
         ("hierarchical", hierarchical))


def cost(algo, n, p, intra, inter, g):
    L = min(p, PER_NODE)
    return algo(n, p, L, p // L, intra, inter, g)


def best(n, p, intra, inter, g):
    return min(((name, cost(f, n, p, intra, inter, g)) for name, f in ALGOS),
               key=lambda nc: total(nc[1]))


# ---- measuring and fitting (2 ranks) -------------------------------------------------------

def fit_line(sizes, times):
    """(intercept, slope) of t = a + n*b by least squares on relative error, so that small
    messages pin the intercept and large ones the slope (absolute error: only the largest)."""
    import numpy as np
    n, t = np.asarray(sizes, float), np.asarray(times, float)
    A = np.stack([np.ones_like(n), n], axis=1) / t[:, None]
    a, b = np.linalg.lstsq(A, np.ones_like(t), rcond=None)[0]
    return max(float(a), 0.0), max(float(b), 0.0)


def measure(args):
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    if comm.size != 2:
        raise SystemExit("--measure needs exactly 2 ranks")
    rank, peer = comm.rank, 1 - comm.rank

    def median_time(fn, nbytes):
        iters = max(1, min(500, (4 << 20) // max(nbytes, 1)))  # beat timer noise when small
        fn()  # warm-up: first touch of the pages, connection setup
        samples = []
        for _ in range(args.reps):
            comm.Barrier()
            t0 = MPI.Wtime()
            for _ in range(iters):
                fn()
            samples.append(comm.allreduce((MPI.Wtime() - t0) / iters, op=MPI.MAX))
        return statistics.median(samples)

    def pingpong(a):
        for step in ((comm.Send, comm.Recv) if rank == 0 else (comm.Recv, comm.Send)):
            step(a, peer)

    def sweep(sizes, make):
        out = []
        for n in sizes:
            a, b = np.ones(n // 4, np.float32), np.ones(n // 4, np.float32)
            out.append([n, median_time(make(a, b), n)])
        return out

    mib = 1 << 20
    pp = sweep((8, 64, 512, 4096, 32768, 262144, mib, 4 * mib, 16 * mib, 64 * mib),
               lambda a, b: lambda: pingpong(a))
    pp = [[n, t / 2] for n, t in pp]  # one way
    ar = sweep((8, 4096, 65536, mib, 4 * mib, 16 * mib, dict(MODELS)["MLP 8.4M"], 64 * mib),
               lambda a, b: lambda: comm.Allreduce(a, b, op=MPI.SUM))
    # Both ranks reduce at once, sharing memory bandwidth as they do inside an allreduce.
    rl = sweep((mib, 4 * mib, 16 * mib, 64 * mib),
               lambda a, b: lambda: MPI.SUM.Reduce_local(a, b))
    if rank != 0:
        return None
    alpha, beta = fit_line(*zip(*pp))
    gamma = fit_line(*zip(*rl))[1]
    data = {}
    if os.path.exists(args.out):
        with open(args.out) as f:
            data = json.load(f)
    data[args.level] = {"alpha_s": alpha, "beta_s_per_byte": beta, "gamma_s_per_byte": gamma}
    data.setdefault("inter", None)
    data.update(measured_on="%s, %d cores, %s" % (platform.node(), os.cpu_count() or 0,
                                                 MPI.Get_library_version().splitlines()[0]),
                date=datetime.date.today().isoformat(), load_avg_1m_before=args.load_before)
    data.setdefault("samples", {})[args.level] = {"pingpong": pp, "allreduce": ar,
                                                  "reduce_local": rl}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    print("wrote %s [%s]: alpha %.2f us, beta %.3f ns/B (%.2f GB/s), gamma %.3f ns/B; "
          "load %.2f before" % (args.out, args.level, alpha * 1e6, beta * 1e9, 1e-9 / beta,
                                gamma * 1e9, args.load_before))
    print("2-rank MPI_Allreduce, measured vs model (cheapest algorithm, one link):")
    link = Link(alpha, beta)
    for n, t in ar:
        name, c = best(n, 2, link, link, gamma)
        print("  %10d B  measured %9s  model %9s  model/measured %.2f  (%s)"
              % (n, fmt(t), fmt(total(c)), total(c) / t, name))
    return data


# ---- report ------------------------------------------------------------------------------

def fmt(s):
    if s < 1e-3:
        return "%.*f us" % (1 if s < 1e-4 else 0, s * 1e6)
    return "%.*f ms" % (2 if s < 1e-2 else 1, s * 1e3) if s < 1 else "%.2f s" % s


def fmt_bytes(n):
    div, unit = next((d, u) for d, u in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1, "B"))
                     if n >= d or d == 1)
    return "%.3g %s" % (n / div, unit)


def smallest_bucket(p, intra, inter, g, share=0.1):
    """Smallest power-of-two bucket at which the cheapest algorithm spends <= share on
    latency. (A single algorithm's n* = 10 lat / per-byte is relative to itself: recursive
    doubling reaches it early only because its per-byte term is huge.)"""
    for k in range(10, 41):
        name, c = best(2 ** k, p, intra, inter, g)
        if c.lat <= share * (c.xfer + c.red):
            return 2 ** k, name
    return float("inf"), "none"


def report(intra, inter, g, inter_label):
    out = [ASSUMPTIONS, "",
           "intra-node: alpha %.2f us, beta %.3f ns/B (%.2f GB/s), gamma %.3f ns/B (%.2f GB/s)"
           % (intra.alpha * 1e6, intra.beta * 1e9, 1e-9 / intra.beta, g * 1e9, 1e-9 / g),
           "inter-node: alpha %.2f us, beta %.3f ns/B (%.2f GB/s)  [%s]"
           % (inter.alpha * 1e6, inter.beta * 1e9, 1e-9 / inter.beta, inter_label), "",
           "Projected time of one allreduce (* = cheapest at that p):"]
    cols = "".join("%11s" % ("p=%d" % p) for p in RANKS)
    head = "%-13s %-14s" % ("model", "algorithm") + cols
    out += [head, "-" * len(head)]
    for mname, n in MODELS:
        for i, (aname, f) in enumerate(ALGOS):
            cells = "".join("%10s%s" % (fmt(total(cost(f, n, p, intra, inter, g))),
                                        "*" if best(n, p, intra, inter, g)[0] == aname else " ")
                            for p in RANKS)
            label = mname if i == 0 else "(%s)" % fmt_bytes(n) if i == 1 else ""
            out.append("%-13s %-14s" % (label, aname) + cells)
    out += ["", "Fusion bucket n* for latency < 10% of the per-byte terms: "
            "n* = 10 * alpha_total / (beta_total + gamma_total):", "%-14s" % "algorithm" + cols]
    for aname, f in ALGOS:
        per = [cost(f, 1.0, p, intra, inter, g) for p in RANKS]  # n = 1: per-byte totals
        out.append("%-14s" % aname + "".join("%11s" % fmt_bytes(10 * c.lat / (c.xfer + c.red))
                                             for c in per))
    for p in RANKS[2:]:
        n, name = smallest_bucket(p, intra, inter, g)
        out.append("p=%-5d buckets >= %s (cheapest there: %s) keep latency < 10%%; fuseopt's "
                   "default 64 MiB is %s" % (p, fmt_bytes(n), name,
                                             "enough" if n <= 64 << 20 else "too small"))
    out += ["", "Compression (cheapest algorithm; wire bytes / r, reduction unchanged, plus one "
            "gamma*n pass to cast):", "%-13s %6s  %-13s %9s %6s %18s %18s" % (
                "model", "p", "algorithm", "time", "wire%", "fp16 (r=2) dt", "8-bit (r=4) dt")]
    for mname, n in MODELS[1:]:
        for p in RANKS[2:]:
            name, c = best(n, p, intra, inter, g)
            t = total(c)
            cells = ["%s%s (%+.0f%%)" % ("-" if d < 0 else "+", fmt(abs(d)), 100 * d / t)
                     for d in (n * g - c.xfer * (1 - 1 / r) for r in (2, 4))]
            out.append("%-13s %6d  %-13s %9s %5.0f%% %18s %18s" % (
                mname, p, name, fmt(t), 100 * c.xfer / t, cells[0], cells[1]))
    out.append("(dt < 0: compression saves time; 8-bit assumes re-quantising at every hop, "
               "since 8-bit sums overflow)")
    return "\n".join(out)


def plot(path, intra, links, g, samples):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5.2))
    mname, n = MODELS[1]
    ps = [2 ** k for k in range(1, 14)]
    for style, (lname, inter) in zip(("-", "--"), links):
        for color, (aname, f) in zip(("C0", "C1", "C2", "C3"), ALGOS):
            ax1.plot(ps, [total(cost(f, n, p, intra, inter, g)) * 1e3 for p in ps], style,
                     color=color, marker="o" if style == "-" else None, ms=3,
                     label="%s, %s" % (aname, lname))
    ax1.set(xscale="log", yscale="log", xlabel="ranks p (%d per node)" % PER_NODE,
            ylabel="one allreduce (ms)",
            title="%s gradients (%s): projected allreduce time" % (mname, fmt_bytes(n)))
    ax1.set_xticks(ps[::2], [str(p) for p in ps[::2]])
    ax1.legend(fontsize=7, ncol=2)
    sizes = [2 ** k for k in range(3, 28)]
    ax2.plot(sizes, [s / (intra.alpha + s * intra.beta) / 1e9 for s in sizes], "C0-",
             label="ping-pong one way, fitted alpha-beta")
    ax2.plot(sizes, [s / total(best(s, 2, intra, intra, g)[1]) / 1e9 for s in sizes], "C3-",
             label="allreduce, model (cheapest algorithm)")
    for key, color, label in (("pingpong", "C0", "ping-pong one way, measured"),
                              ("allreduce", "C3", "MPI_Allreduce, measured")):
        pts = (samples or {}).get(key, [])
        ax2.plot([s for s, _ in pts], [s / t / 1e9 for s, t in pts], color + "o", label=label)
    ax2.set(xscale="log", yscale="log", xlabel="message size n (bytes)",
            ylabel="n / t (GB/s; = bus bandwidth at p=2)",
            title="2 ranks on this host (intra-node): measured vs fitted")
    for ax in (ax1, ax2):
        ax.grid(True, which="both", alpha=0.3)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def choose_inter(args, data):
    """(short name, Link, description): flags, else a measured 'inter', else 25gbe."""
    given = args.inter_alpha_us is not None or args.inter_gbps is not None
    if data.get("inter") and not (args.link or given):
        i = data["inter"]
        return "measured", Link(i["alpha_s"], i["beta_s_per_byte"]), "measured (JSON)"
    key = args.link or "25gbe"
    alpha_us, gbps, text = LINKS[key]
    if not given:
        return key, Link(alpha_us * 1e-6, 8 / (gbps * 1e9)), text
    alpha_us = alpha_us if args.inter_alpha_us is None else args.inter_alpha_us
    gbps = gbps if args.inter_gbps is None else args.inter_gbps
    return ("%g us, %g Gb/s" % (alpha_us, gbps), Link(alpha_us * 1e-6, 8 / (gbps * 1e9)),
            "given on the command line: %g us, %g Gb/s" % (alpha_us, gbps))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--params", default=PARAMS, help="fitted parameters (JSON)")
    p.add_argument("--link", choices=sorted(LINKS), help="inter-node preset (default: the "
                   "JSON's measured 'inter' if present, else 25gbe)")
    p.add_argument("--inter-alpha-us", type=float, help="inter-node latency (us)")
    p.add_argument("--inter-gbps", type=float, help="inter-node payload bandwidth (Gb/s)")
    p.add_argument("--plot", default=PLOT, help="PNG to write ('' for none)")
    p.add_argument("--measure", action="store_true", help="measure on 2 ranks (under mpiexec)")
    p.add_argument("--level", choices=("intra", "inter"), default="intra",
                   help="with --measure: store the fit as the intra- or inter-node link")
    p.add_argument("--reps", type=int, default=7, help="with --measure: samples per size")
    p.add_argument("--out", default=PARAMS, help="with --measure: JSON to write (merged)")
    args = p.parse_args(argv)
    if args.measure:
        args.load_before = round(os.getloadavg()[0], 2)
        if measure(args) is None:
            return 0  # rank 1
        args.params = args.out
        print()
    with open(args.params) as f:
        data = json.load(f)
    i = data["intra"]
    intra, g = Link(i["alpha_s"], i["beta_s_per_byte"]), i["gamma_s_per_byte"]
    name, inter, text = choose_inter(args, data)
    print("cost model: %s (%s, %s)" % (args.params, data.get("measured_on"), data.get("date")))
    print(report(intra, inter, g, text))
    if args.plot:
        other = "ib100" if name == "25gbe" else "25gbe"
        links = [(name, inter), (other, Link(LINKS[other][0] * 1e-6, 8 / (LINKS[other][1] * 1e9)))]
        plot(args.plot, intra, links, g, data.get("samples", {}).get("intra"))
        print("\nwrote %s" % args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
