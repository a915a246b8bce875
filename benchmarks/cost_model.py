#!/usr/bin/env python
"""Alpha-beta-gamma cost model of allreduce algorithms, fitted on this host.

    python benchmarks/cost_model.py [--link 25gbe|ib100] [--inter-alpha-us US] [--inter-gbps G]
    mpiexec -n 2 python benchmarks/cost_model.py --measure [--level intra|inter] [--out JSON]

Default mode reads results/cost_model_params.json (no MPI), prints projected allreduce
times and fusion-bucket and compression recommendations, and writes results/cost_model.png.
--measure times a ping-pong, a two-way exchange, MPI_Reduce_local and MPI_Allreduce on 2
ranks and stores the fit as the intra-node link (--level inter: as the inter-node link, for
2 ranks on 2 hosts). See docs/scaling.md.
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

import report

HERE = os.path.dirname(os.path.abspath(__file__))
PARAMS = os.path.join(HERE, "results", "cost_model_params.json")
PLOT = os.path.join(HERE, "results", "cost_model.png")
RANKS = (2, 8, 64, 1024, 8192)
PER_NODE = 8
# glibc serves allocations above 32 MiB (its largest mmap threshold) with fresh pages every
# time, so MPICH's temporary buffer page-faults on every allreduce beyond that size.
FRESH_PAGES_ABOVE = 32 << 20
MLP_DIMS = (1024, 2048, 2048, 1024, 10)  # torch_train.py "mlp" and tf_train.py's model
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
Assumptions: a message costs alpha + bytes*beta (Hockney), reducing costs gamma per byte, the
MPI library's own copies delta per byte once per allreduce (+ delta_big above 32 MiB: page
faults); full-duplex links, a non-blocking fabric (no congestion), no stragglers, no
pipelining, no overlap with compute; power-of-two ranks, %d per node in blocks, one NIC per
node shared by that node's concurrent inter-node flows; a step with an inter-node hop runs at
the inter-node alpha/beta. Intra-node figures: 2 ranks on this host. Inter-node: an assumed
preset unless the JSON holds a measured "inter".""" % PER_NODE

Link = namedtuple("Link", "alpha beta")
Model = namedtuple("Model", "intra inter gamma delta delta_big")
Cost = namedtuple("Cost", "lat xfer red local", defaults=(0.0,))  # seconds per term


def total(c):
    return c.lat + c.xfer + c.red + c.local


# ---- algorithms: n bytes, p ranks, L per node, N = p / L nodes -> Cost -----------------

def ring(n, p, L, N, m):
    # 2(p-1) steps of n/p bytes. Ordered node by node, one flow per node leaves it, but
    # every step waits for its slowest hop: with both kinds of hop, take the worse link.
    link = m.intra if N == 1 else m.inter if L == 1 else Link(
        max(m.intra.alpha, m.inter.alpha), max(m.intra.beta, m.inter.beta))
    return Cost(2 * (p - 1) * link.alpha, 2 * (p - 1) / p * n * link.beta,
                (p - 1) / p * n * m.gamma)


def rec_doubling(n, p, L, N, m):
    # log2 p exchanges of the whole vector; in the log2 N inter-node steps all L ranks
    # of a node send n bytes at once through its one NIC.
    a, b = math.log2(L), math.log2(N)
    return Cost(a * m.intra.alpha + b * m.inter.alpha,
                a * n * m.intra.beta + b * L * n * m.inter.beta, math.log2(p) * n * m.gamma)


def rabenseifner(n, p, L, N, m):
    # Reduce-scatter by recursive halving + allgather by recursive doubling. MPICH pairs
    # the nearest ranks first, so the big halves stay inside the node and the NIC carries
    # (1 - 1/N) n per phase: hierarchical by construction, with log-depth latency.
    return Cost(2 * (math.log2(L) * m.intra.alpha + math.log2(N) * m.inter.alpha),
                2 * ((1 - 1 / L) * n * m.intra.beta + (1 - 1 / N) * n * m.inter.beta),
                (1 - 1 / p) * n * m.gamma)


def hierarchical(n, p, L, N, m):
    # Horovod/NCCL style: ring reduce-scatter in the node, L concurrent rings of n/L across
    # nodes (one per local rank, all through the node's NIC), ring allgather in the node.
    node = ring(n, L, L, 1, m) if L > 1 else Cost(0, 0, 0)
    if N == 1:
        return node
    cross = ring(n / L, N, 1, N, m)
    return Cost(node.lat + cross.lat, node.xfer + L * cross.xfer, node.red + cross.red)


def leader(n, p, L, N, m):
    # fuseopt's FUSEOPT_HIERARCHICAL_ALLREDUCE: MPI_Reduce to local rank 0 (MPICH: reduce-
    # scatter + gather), MPI_Allreduce among the N leaders (one flow per NIC, MPI picks the
    # cheapest), MPI_Bcast in the node (scatter + ring allgather). One node: plain allreduce.
    if N == 1 or L == 1:
        return min((f(n, p, L, N, m) for f in FLAT), key=total)
    lg, f = math.log2(L), (L - 1) / L
    cross = min((g(n, N, 1, N, m) for g in FLAT), key=total)
    return Cost(3 * lg * m.intra.alpha + (L - 1) * m.intra.alpha + cross.lat,
                4 * f * n * m.intra.beta + cross.xfer, f * n * m.gamma + cross.red)


FLAT = (ring, rec_doubling, rabenseifner)
ALGOS = (("ring", ring), ("rec. doubling", rec_doubling), ("Rabenseifner", rabenseifner),
         ("hier. slices", hierarchical), ("hier. leader", leader))


def cost(algo, n, p, m):
    L = min(p, PER_NODE)
    local = n * (m.delta + (m.delta_big if n > FRESH_PAGES_ABOVE else 0.0))
    return algo(n, p, L, p // L, m)._replace(local=local)


def best(n, p, m):
    return min(((name, cost(f, n, p, m)) for name, f in ALGOS), key=lambda nc: total(nc[1]))


# ---- measuring and fitting (2 ranks) -------------------------------------------------------

def fit_line(sizes, times):
    """(intercept, slope) of t = a + n*b by least squares on relative error, so that small
    messages pin the intercept and large ones the slope (absolute error: only the largest)."""
    import numpy as np
    n, t = np.asarray(sizes, float), np.asarray(times, float)
    A = np.stack([np.ones_like(n), n], axis=1) / t[:, None]
    a, b = np.linalg.lstsq(A, np.ones_like(t), rcond=None)[0]
    return max(float(a), 0.0), max(float(b), 0.0)


def fit_slope(points):
    """d >= 0 minimising sum(((r - d n) / t)^2) over (n, t, r): the relative error of t."""
    den = sum((n / t) ** 2 for n, t, _ in points)
    return max(0.0, sum(r * n / t ** 2 for n, t, r in points) / den) if den else 0.0


def measure(args):
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    if comm.size != 2:
        raise SystemExit("--measure needs exactly 2 ranks")
    peer = 1 - comm.rank

    def sweep(sizes, op):
        """[[bytes, median seconds of the slower rank]] of op(a, b) on float32 buffers."""
        out = []
        for n in sizes:
            a, b = np.ones(n // 4, np.float32), np.ones(n // 4, np.float32)
            iters = max(3, min(500, (16 << 20) // n))  # several ops per sample: less noise
            op(a, b)  # warm-up: first touch of the pages, connection setup
            samples = []
            for _ in range(args.reps):
                comm.Barrier()
                t0 = MPI.Wtime()
                for _ in range(iters):
                    op(a, b)
                samples.append(comm.allreduce((MPI.Wtime() - t0) / iters, op=MPI.MAX))
            out.append([n, statistics.median(samples)])
        return out

    def pingpong(a, b):
        for step in ((comm.Send, comm.Recv) if comm.rank == 0 else (comm.Recv, comm.Send)):
            step(a, peer)

    mib = 1 << 20
    sizes = (8, 64, 512, 4096, 32768, 262144, mib, 4 * mib, 16 * mib, 64 * mib)
    # Collective steps send and receive at once; on shared memory that runs at another
    # rate than a ping-pong, so alpha/beta come from a two-way exchange.
    pp = [[n, t / 2] for n, t in sweep(sizes, pingpong)]  # one way, for reference
    ex = sweep(sizes, lambda a, b: comm.Sendrecv(a, peer, recvbuf=b, source=peer))
    rl = sweep(sizes[6:], lambda a, b: MPI.SUM.Reduce_local(a, b))  # both ranks at once
    ar = sweep((8, 4096, 65536, mib, 4 * mib, 16 * mib, dict(MODELS)["MLP 8.4M"], 64 * mib),
               lambda a, b: comm.Allreduce(a, b, op=MPI.SUM))
    if comm.rank != 0:
        return None
    return fit_and_save(args, pp, ex, rl, ar, " ".join(MPI.Get_library_version().split()[:3]))


def fit_and_save(args, pp, ex, rl, ar, mpi):
    """Fits the model on rank 0's sweeps, stores it (save) and prints measured against
    modelled allreduce times."""
    mib = 1 << 20
    (alpha, beta), gamma = fit_line(*zip(*ex)), fit_line(*zip(*rl))[1]
    m = Model(Link(alpha, beta), Link(alpha, beta), gamma, 0.0, 0.0)
    # delta: what MPI_Allreduce takes beyond transfer + reduction (MPICH copies the send
    # buffer; above 32 MiB its temporary buffer also page-faults), per byte, fitted on the
    # residual of sizes >= 1 MiB, below and above 32 MiB.
    res = [(n, t, t - total(best(n, 2, m)[1])) for n, t in ar if n >= mib]
    delta = fit_slope([x for x in res if x[0] <= FRESH_PAGES_ABOVE])
    delta_big = fit_slope([(n, t, r - n * delta) for n, t, r in res if n > FRESH_PAGES_ABOVE])
    fit = {"alpha_s": alpha, "beta_s_per_byte": beta, "gamma_s_per_byte": gamma,
           "delta_s_per_byte": delta, "delta_big_s_per_byte": delta_big}
    save(args, fit, {"pingpong_one_way": pp, "exchange": ex, "reduce_local": rl,
                     "allreduce": ar}, mpi)
    a_pp, b_pp = fit_line(*zip(*pp))
    print("wrote %s [%s], load %.2f before; ping-pong for reference: alpha %.2f us, %.2f GB/s"
          % (args.out, args.level, args.load_before, a_pp * 1e6, 1e-9 / b_pp))
    print("2-rank MPI_Allreduce, measured vs model (cheapest algorithm):")
    m = m._replace(delta=delta, delta_big=delta_big)
    for n, t in ar:
        name, c = best(n, 2, m)
        print("  %10d B  measured %9s  model %9s (%.2f x); without delta %9s  [%s]"
              % (n, fmt(t), fmt(total(c)), total(c) / t, fmt(total(c) - c.local), name))
    return fit


def save(args, fit, samples, mpi):
    """Merges one level's fit into the JSON, keeping the other level and its samples."""
    data = {"intra": None, "inter": None}
    if os.path.exists(args.out):
        with open(args.out) as f:
            data.update(json.load(f))
    stamp = {"measured_on": "%s, %d cores, %s" % (platform.node(), os.cpu_count() or 0, mpi),
             "date": datetime.date.today().isoformat(), "load_avg_1m_before": args.load_before}
    if args.level == "intra":
        data.update(stamp, intra=fit)
    else:  # an inter-node fit keeps its own provenance
        data["inter"] = dict(fit, **stamp)
    data.setdefault("samples", {})[args.level] = samples
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


# ---- report ------------------------------------------------------------------------------

def fmt(s):
    if s < 1e-3:
        return "%.*f us" % (1 if s < 1e-4 else 0, s * 1e6)
    return "%.*f ms" % (2 if s < 1e-2 else 1, s * 1e3) if s < 1 else "%.2f s" % s


def fmt_bytes(n):
    div, unit = next((d, u) for d, u in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1, "B"))
                     if n >= d or d == 1)
    return "%.3g %s" % (n / div, unit)


COLS = "".join("%11s" % ("p=%d" % p) for p in RANKS)


def table(m):
    head = "%-13s %-14s" % ("model", "algorithm") + COLS
    out = ["Projected time of one allreduce (* = cheapest at that p):", head, "-" * len(head)]
    for mname, n in MODELS:
        for k, (aname, f) in enumerate(ALGOS):
            cells = "".join("%10s%s" % (fmt(total(cost(f, n, p, m))),
                                        "*" if best(n, p, m)[0] == aname else " ") for p in RANKS)
            label = mname if k == 0 else "(%s)" % fmt_bytes(n) if k == 1 else ""
            out.append("%-13s %-14s" % (label, aname) + cells)
    return out


def smallest_bucket(p, m, share=0.1):
    """Smallest power-of-two bucket at which the cheapest algorithm spends <= share on
    latency. (One algorithm's n* = 10 lat / per-byte is relative to itself: recursive
    doubling reaches it early only because its per-byte term is huge.)"""
    for k in range(10, 41):
        name, c = best(2 ** k, p, m)
        if c.lat <= share * (total(c) - c.lat):
            return 2 ** k, name
    return float("inf"), "none"


def fusion(m):
    out = ["Fusion bucket for latency < 10% of the per-byte terms, n* = 10 * alpha_total / "
           "(beta_total + gamma_total + delta):", "%-14s" % "algorithm" + COLS]
    ref = 32 << 20  # a bucket size, for the choices made inside hier. leader
    for aname, f in ALGOS:
        per = [cost(f, ref, p, m) for p in RANKS]
        out.append("%-14s" % aname + "".join(
            "%11s" % fmt_bytes(10 * c.lat * ref / (total(c) - c.lat)) for c in per))
    for p in RANKS[2:]:
        n, name = smallest_bucket(p, m)
        one, two = total(best(64 << 20, p, m)[1]), 2 * total(best(32 << 20, p, m)[1])
        out.append("p=%-5d buckets >= %s keep latency < 10%% (%s); 64 MiB of gradients as one "
                   "bucket (fuseopt's default) %s, as two of 32 MiB %s" % (
                       p, fmt_bytes(n), name, fmt(one), fmt(two)))
    return out


def compression(m):
    out = ["Compression (cheapest algorithm; wire bytes / r, reduction unchanged, plus one "
           "gamma*n pass to cast):", "%-13s %6s  %-13s %9s %6s %18s %18s" % (
               "model", "p", "algorithm", "time", "wire%", "fp16 (r=2) dt", "8-bit (r=4) dt")]
    for mname, n in MODELS[1:]:
        for p in RANKS[2:]:
            name, c = best(n, p, m)
            t = total(c)
            cells = ["%s%s (%+.0f%%)" % ("-" if d < 0 else "+", fmt(abs(d)), 100 * d / t)
                     for d in (n * m.gamma - c.xfer * (1 - 1 / r) for r in (2, 4))]
            out.append("%-13s %6d  %-13s %9s %5.0f%% %18s %18s" % (
                mname, p, name, fmt(t), 100 * c.xfer / t, cells[0], cells[1]))
    return out + ["(dt < 0: compression saves time; 8-bit assumes re-quantising at every "
                  "hop, since 8-bit sums overflow)"]


def projection(m, inter_text):
    i, e = m.intra, m.inter
    return "\n".join([
        ASSUMPTIONS, "",
        "intra-node: alpha %.2f us, beta %.3f ns/B (%.2f GB/s); gamma %.3f, delta %.3f, "
        "delta_big %.3f ns/B" % (i.alpha * 1e6, i.beta * 1e9, 1e-9 / i.beta, m.gamma * 1e9,
                                 m.delta * 1e9, m.delta_big * 1e9),
        "inter-node: alpha %.2f us, beta %.3f ns/B (%.2f GB/s)  [%s]"
        % (e.alpha * 1e6, e.beta * 1e9, 1e-9 / e.beta, inter_text), ""]
        + table(m) + [""] + fusion(m) + [""] + compression(m))


def plot(path, models, samples):
    plt = report.pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5.2))
    mname, n = MODELS[1]
    ps = [2 ** k for k in range(1, 14)]
    for style, (lname, m) in zip(("-", "--"), models):
        for color, (aname, f) in zip(("C0", "C1", "C2", "C3", "C4"), ALGOS):
            ax1.plot(ps, [total(cost(f, n, p, m)) * 1e3 for p in ps], style, color=color,
                     marker="o" if style == "-" else None, ms=3, label="%s, %s" % (aname, lname))
    ax1.set(xscale="log", yscale="log", xlabel="ranks p (%d per node)" % PER_NODE,
            ylabel="one allreduce (ms)",
            title="%s gradients (%s): projected allreduce time" % (mname, fmt_bytes(n)))
    ax1.set_xticks(ps[::2], [str(p) for p in ps[::2]])
    ax1.legend(fontsize=7, ncol=2)
    m, sizes = models[0][1], [2 ** k for k in range(3, 27)]
    ax2.plot(sizes, [s / (m.intra.alpha + s * m.intra.beta) / 1e9 for s in sizes], "C2-",
             label="two-way exchange, fitted alpha-beta")
    ax2.plot(sizes, [s / total(best(s, 2, m)[1]) / 1e9 for s in sizes], "C3-",
             label="allreduce, model (cheapest algorithm)")
    for key, style, label in (("pingpong_one_way", "C0x", "ping-pong one way, measured"),
                              ("exchange", "C2o", "two-way exchange, measured"),
                              ("allreduce", "C3o", "MPI_Allreduce, measured")):
        pts = (samples or {}).get(key, [])
        ax2.plot([s for s, _ in pts], [s / t / 1e9 for s, t in pts], style, label=label)
    ax2.set(xscale="log", yscale="log", xlabel="message size n (bytes)",
            ylabel="n / t (GB/s; = bus bandwidth at p=2)",
            title="2 ranks on this host (intra-node): measured vs fitted")
    for ax in (ax1, ax2):
        ax.grid(True, which="both", alpha=0.3)
    ax2.legend(fontsize=8)
    report.save(plt, fig, path, 100)


def preset(key):
    return Link(LINKS[key][0] * 1e-6, 8 / (LINKS[key][1] * 1e9))


def choose_inter(args, data):
    """(short name, Link, description): flags, else a measured "inter", else 25gbe."""
    if data.get("inter") and not (args.link or args.inter_alpha_us or args.inter_gbps):
        i = data["inter"]
        return "measured", Link(i["alpha_s"], i["beta_s_per_byte"]), "measured: %s, %s" % (
            i.get("measured_on"), i.get("date"))
    key = args.link or "25gbe"
    if not (args.inter_alpha_us or args.inter_gbps):
        return key, preset(key), LINKS[key][2]
    alpha_us, gbps = args.inter_alpha_us or LINKS[key][0], args.inter_gbps or LINKS[key][1]
    name = "%g us, %g Gb/s" % (alpha_us, gbps)
    return name, Link(alpha_us * 1e-6, 8 / (gbps * 1e9)), name + " (command line)"


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
    if not data.get("intra"):
        raise SystemExit("%s has no intra-node fit: run --measure first" % args.params)
    i = data["intra"]
    name, inter, text = choose_inter(args, data)
    m = Model(Link(i["alpha_s"], i["beta_s_per_byte"]), inter, i["gamma_s_per_byte"],
              i.get("delta_s_per_byte", 0.0), i.get("delta_big_s_per_byte", 0.0))
    print("cost model: %s (%s, %s)" % (args.params, data.get("measured_on"), data.get("date")))
    print(projection(m, text))
    if args.plot:
        other = "ib100" if name == "25gbe" else "25gbe"
        plot(args.plot, [(name, m), (other, m._replace(inter=preset(other)))],
             data.get("samples", {}).get("intra"))
        print("\nwrote %s" % args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
