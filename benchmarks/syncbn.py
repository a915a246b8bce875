"""SyncBatchNorm benchmark: what synchronizing BatchNorm statistics costs a training
step, against plain (per-rank) BatchNorm and against the floor of the same
SyncBatchNorm whose statistics travel through raw MPI; and the back-to-back small
allreduces it is made of, fuseopt against raw MPI.

Jobs (2 ranks each, Note [interleaving] and Note [one job] in harness.py):
  torch    BatchNorm and fuseopt.torch.SyncBatchNorm in the same processes, steps of
           the two alternating in blocks; then allreduces of 4 B to 64 KiB, each waited
           on at once, with a little compute between (SyncBN's pattern).
  floor    The same SyncBatchNorm with its per-channel sums summed by mpi4py's
           Allreduce, and gradients averaged by one mpi4py Allreduce per step; then the
           same small allreduces through mpi4py. fuseopt never runs in this job (mpi4py
           and fuseopt must not share a process: harness.py).
  keras    keras.layers.BatchNormalization and fuseopt's SyncBatchNormalization, the same
           models, train_on_batch under fuseopt's DistributedOptimizer.
Models: the README demo's CNN (2 BatchNorm layers, 8x8 digits) and a ResNet-18-shaped
CNN (4 stages of 2 basic blocks, 20 BatchNorm layers, widths 16-128, 32x32 inputs);
batch 1, 3 and 8 per rank. A step's time is the slower rank's (Note [slowest rank]).

    python benchmarks/syncbn.py --reps 3
    python benchmarks/syncbn.py --quick
"""
import argparse
import os
import statistics
import sys
import time

import harness
import report

BATCHES = (1, 3, 8)
MODELS = ("demo", "resnet")
SIZES = (4, 64, 520, 4096, 16384, 65536)  # bytes; 520: a 64-channel layer's stats
VARIANTS = {"torch": ("BatchNorm", "SyncBatchNorm"), "floor": ("SyncBatchNorm (raw MPI)",),
            "keras": ("Keras BatchNormalization", "Keras SyncBatchNormalization")}
TARGETS = {("demo", 3): 0.8, ("resnet", 8): 0.7}  # SyncBN / BN throughput, issue 33
LATENCY_MAX = 2.0  # fuseopt / raw MPI, back-to-back allreduce <= 64 KiB


# ---- worker side ----------------------------------------------------------------------

def torch_model(name, norm):
    import torch.nn as nn
    if name == "demo":
        return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), norm(16), nn.ReLU(),
                             nn.Conv2d(16, 32, 3, padding=1), norm(32), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 16, 10))

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), norm(cout),
                                      nn.ReLU(), nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
                                      norm(cout))
            self.skip = nn.Sequential() if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), norm(cout))

        def forward(self, x):
            return (self.body(x) + self.skip(x)).relu()

    layers, cin = [nn.Conv2d(3, 16, 3, 1, 1, bias=False), norm(16), nn.ReLU()], 16
    for i, width in enumerate((16, 32, 64, 128)):
        layers += [Block(cin, width, 1 if i == 0 else 2), Block(width, width, 1)]
        cin = width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10))


def shape_of(name):
    return (1, 8, 8) if name == "demo" else (3, 32, 32)


def steps_of(name, quick):
    return (40, 8) if name == "demo" else (6, 3) if quick else (12, 4)  # steps, blocks


def time_blocks(steppers, steps, blocks, rank_times):
    """Per stepper: the time of each block of `steps` steps, blocks of the steppers
    alternating (so a slow spell hits all alike)."""
    out = {k: [] for k in steppers}
    for _ in range(blocks):
        for name, step in steppers.items():
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            out[name].append((time.perf_counter() - t0) / steps * 1e3)
    return {k: rank_times(v) for k, v in out.items()}


def slower_rank(gather):
    """Per block, the slower rank's figure (Note [slowest rank]), given how to
    gather a list from every rank."""
    return lambda per_block: [max(col) for col in zip(*gather(per_block))]


def record_steps(args, results, m, b, steppers, rank_times):
    """Warms each stepper up, then times them in alternating blocks."""
    for step in steppers.values():
        for _ in range(3):
            step()
    steps, blocks = steps_of(m, args.quick)
    for label, ms in time_blocks(steppers, steps, blocks, rank_times).items():
        results["steps"]["%s/%d/%s" % (m, b, label)] = statistics.median(ms)


def latencies(allreduce, barrier, quick):
    """Median microseconds of a back-to-back allreduce of each size, a little compute
    (a 32x32 matmul) between two of them."""
    import numpy as np
    a = np.ones((32, 32), np.float32)
    out = {}
    for size in SIZES:
        buf = np.ones(max(1, size // 4), np.float32)
        samples = []
        barrier()
        for i in range(300 if quick else 2000):
            a @ a
            t0 = time.perf_counter()
            allreduce(buf, "lat.%d" % size)
            samples.append((time.perf_counter() - t0) * 1e6)
        out[str(size)] = statistics.median(samples[len(samples) // 10:])
    return out


def _mpi_floor_contenders(np, torch):
    """The floor: SyncBatchNorm's statistics and the gradients through raw
    MPI (mpi4py); fuseopt is never initialized. Returns what torch_job needs:
    (rank, norms, barrier, gather, wrap(model), allreduce(buf, name))."""
    import mpi4py
    mpi4py.rc.thread_level = "serialized"
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    import fuseopt.torch as hvd  # the layer only

    def mpi_sum(values):  # NumPy in, NumPy out, as the layer's own allreduce
        out = np.empty_like(values)
        comm.Allreduce(values, out, op=MPI.SUM)
        return out

    def mpi_sum_in_place(values):  # the same native kernel, in halves around raw MPI
        comm.Allreduce(MPI.IN_PLACE, values, op=MPI.SUM)

    class MpiSyncBatchNorm(hvd.SyncBatchNorm):
        _stats_reducer = staticmethod(mpi_sum_in_place)
        _ranks = staticmethod(comm.Get_size)

    def wrap(model):
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        params = list(model.parameters())

        def step_done():
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            flat = torch.from_numpy(mpi_sum(flat.numpy())) / comm.Get_size()
            torch.nn.utils.vector_to_parameters(flat, [p.grad for p in params])
            opt.step()
        return opt, step_done

    def allreduce(buf, _name):
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    return (comm.Get_rank(), {VARIANTS["floor"][0]: MpiSyncBatchNorm}, comm.Barrier,
            comm.allgather, wrap, allreduce)


def _fuseopt_contenders(torch):
    """BatchNorm and fuseopt's SyncBatchNorm under DistributedOptimizer;
    the same tuple as _mpi_floor_contenders."""
    import fuseopt
    import fuseopt.torch as hvd
    hvd.init()
    norms = dict(zip(VARIANTS["torch"], (torch.nn.BatchNorm2d, hvd.SyncBatchNorm)))

    def wrap(model):
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                       model.named_parameters())
        return opt, opt.step

    def allreduce(buf, name):  # the blocking call: its wait runs the round itself
        fuseopt.allreduce_(buf, name=name, op=fuseopt.Sum)
    return hvd.rank(), norms, hvd.barrier, hvd.allgather_object, wrap, allreduce


def torch_job(args, floor):
    import numpy as np
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    rank, norms, barrier, gather, wrap, allreduce = (
        _mpi_floor_contenders(np, torch) if floor else _fuseopt_contenders(torch))
    rank_times = slower_rank(gather)
    results = {"steps": {}}
    for m in args.models:
        for b in args.batches:
            steppers = {}
            for label, norm in norms.items():
                torch.manual_seed(0)
                model = torch_model(m, norm)
                opt, finish = wrap(model)
                g = torch.Generator().manual_seed(rank)
                x = torch.randn((b,) + shape_of(m), generator=g)
                y = torch.randint(0, 10, (b,), generator=g)

                def step(model=model, opt=opt, finish=finish, x=x, y=y):
                    opt.zero_grad()
                    F.cross_entropy(model(x), y).backward()
                    finish()
                steppers[label] = step
            record_steps(args, results, m, b, steppers, rank_times)
    results["latency_us"] = latencies(allreduce, barrier, args.quick)
    results["latency_us"] = dict(zip(results["latency_us"], rank_times(
        list(results["latency_us"].values()))))
    return rank, results


def keras_job(args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import keras
    import fuseopt.tensorflow.keras as hvd
    hvd.init()
    L = keras.layers
    norms = dict(zip(VARIANTS["keras"], (L.BatchNormalization, hvd.SyncBatchNormalization)))

    def model_of(name, norm):
        c, h, w = shape_of(name)
        inp = keras.Input((h, w, c))
        if name == "demo":
            x = L.ReLU()(norm()(L.Conv2D(16, 3, padding="same")(inp)))
            x = L.ReLU()(norm()(L.Conv2D(32, 3, padding="same")(x)))
            x = L.Flatten()(L.MaxPooling2D()(x))
            return keras.Model(inp, L.Dense(10)(x))
        x = L.ReLU()(norm()(L.Conv2D(16, 3, padding="same", use_bias=False)(inp)))
        cin = 16
        for i, width in enumerate((16, 32, 64, 128)):
            for j in range(2):
                stride = 2 if i and not j else 1
                y = L.ReLU()(norm()(L.Conv2D(width, 3, stride, "same", use_bias=False)(x)))
                y = norm()(L.Conv2D(width, 3, 1, "same", use_bias=False)(y))
                skip = x if stride == 1 and cin == width else norm()(
                    L.Conv2D(width, 1, stride, use_bias=False)(x))
                x, cin = L.ReLU()(L.Add()([y, skip])), width
        return keras.Model(inp, L.Dense(10)(L.GlobalAveragePooling2D()(x)))

    rank_times = slower_rank(hvd.allgather_object)
    results = {"steps": {}}
    for m in args.models:
        for b in args.batches:
            steppers = {}
            rng = np.random.default_rng(hvd.rank())
            c, h, w = shape_of(m)
            x = rng.standard_normal((b, h, w, c)).astype("float32")
            y = rng.integers(0, 10, b)
            for label, norm in norms.items():
                keras.utils.set_random_seed(0)
                model = model_of(m, norm)
                model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)),
                              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
                steppers[label] = (lambda model=model: model.train_on_batch(x, y))
            record_steps(args, results, m, b, steppers, rank_times)
    return hvd.rank(), results


def worker(args):
    rank, out = keras_job(args) if args.job == "keras" else torch_job(args, args.job == "floor")
    harness.write_result(args.result_dir, rank, out)  # ranks hold the same figures


# ---- driver side ----------------------------------------------------------------------

def run_all(args):
    mpiexec = harness.find_mpiexec()
    jobs = [j for j in ("torch", "floor", "keras") if j in args.jobs]
    runs = {j: [] for j in jobs}
    started = time.time()
    for rep in range(args.reps):
        for _, _, j in harness.interleaved(jobs, 1, args.seed + rep):
            harness.log("rep %d: %s job ...\n" % (rep + 1, j))
            argv = [sys.executable, os.path.abspath(__file__), "--worker", "--job", j,
                    "--models", ",".join(args.models),
                    "--batches", ",".join(map(str, args.batches))] + \
                (["--quick"] if args.quick else [])
            outs, _ = harness.run_job("mpi", argv, harness.base_env(), args.timeout,
                                      "%s job" % j, mpiexec)
            runs[j].append(outs[0])
    return runs, started


def median_of(runs, job, key, field="steps"):
    vals = [r[field][key] for r in runs.get(job, []) if key in r[field]]
    return statistics.median(vals) if vals else None


def build(args, runs):
    lines, verdicts = [], report.Verdicts()
    rows = []
    for m in args.models:
        for b in args.batches:
            def ms(job, label):
                return median_of(runs, job, "%s/%d/%s" % (m, b, label))
            bn, sbn = ms("torch", VARIANTS["torch"][0]), ms("torch", VARIANTS["torch"][1])
            floor = ms("floor", VARIANTS["floor"][0])
            kbn, ksbn = ms("keras", VARIANTS["keras"][0]), ms("keras", VARIANTS["keras"][1])
            ratio = bn / sbn if bn and sbn else None
            kratio = kbn / ksbn if kbn and ksbn else None
            rows.append(["%s, batch %d/rank" % (m, b), report.fmt(bn), report.fmt(sbn),
                         report.fmt(floor), report.fmt(ratio, "%.2fx"),
                         report.fmt(bn / floor if bn and floor else None, "%.2fx"),
                         report.fmt(kbn), report.fmt(ksbn), report.fmt(kratio, "%.2fx")])
            limit = TARGETS.get((m, b))
            for what, r in (("torch", ratio), ("Keras", kratio)):
                if limit and r is not None:
                    lines.append(verdicts.line(r >= limit, "%s %s batch %d/rank: SyncBatchNorm "
                                               "throughput %.2fx BatchNorm's >= %.1fx"
                                               % (what, m, b, r, limit)))
    table = report.table(["model", "BN ms", "SyncBN ms", "SyncBN raw-MPI ms", "SyncBN/BN",
                          "floor/BN", "Keras BN ms", "Keras SyncBN ms", "Keras SyncBN/BN"],
                         "lrrrrrrrr", rows)
    lat_rows = []
    for size in SIZES:
        fo, mpi = (median_of(runs, j, str(size), "latency_us") for j in ("torch", "floor"))
        r = fo / mpi if fo and mpi else None
        lat_rows.append(["%d B" % size, report.fmt(fo, "%.1f"), report.fmt(mpi, "%.1f"),
                         report.fmt(r, "%.2fx")])
        if r is not None:
            lines.append(verdicts.line(r <= LATENCY_MAX, "back-to-back %d B allreduce: fuseopt "
                                       "%.1f us / raw MPI %.1f us = %.2fx <= %.1fx"
                                       % (size, fo, mpi, r, LATENCY_MAX)))
    lat = report.table(["size", "fuseopt us", "raw MPI us", "ratio"], "lrrr", lat_rows)
    text = "\n".join(["Step times (ms, the slower rank, median over blocks and reps) and "
                      "throughput ratios (higher is better: BN ms / SyncBN ms):", ""] + table +
                     ["", "Back-to-back allreduce, waited on at once (median us):", ""] + lat +
                     [""] + lines)
    return text, verdicts


def plot(args, runs, path):
    plt = report.pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels, series = [], {k: [] for k in ("torch", "floor", "keras")}
    for m in args.models:
        for b in args.batches:
            labels.append("%s b%d" % (m, b))
            bn = median_of(runs, "torch", "%s/%d/%s" % (m, b, VARIANTS["torch"][0]))
            keras_bn = median_of(runs, "keras", "%s/%d/%s" % (m, b, VARIANTS["keras"][0]))
            for job, label, base in (("torch", VARIANTS["torch"][1], bn),
                                     ("floor", VARIANTS["floor"][0], bn),
                                     ("keras", VARIANTS["keras"][1], keras_bn)):
                v = median_of(runs, job, "%s/%d/%s" % (m, b, label))
                series[job].append(base / v if base and v else 0)
    xs = range(len(labels))
    for i, (job, name) in enumerate((("torch", "fuseopt SyncBN (torch)"),
                                     ("floor", "SyncBN, stats via raw MPI"),
                                     ("keras", "fuseopt SyncBN (Keras)"))):
        ax1.bar([x + (i - 1) * 0.27 for x in xs], series[job], 0.27, label=name)
    ax1.axhline(1.0, color="k", lw=0.8)
    ax1.set_xticks(list(xs))
    ax1.set_xticklabels(labels, rotation=20, fontsize=8)
    ax1.set_ylabel("throughput / BatchNorm's")
    ax1.legend(fontsize=8)
    for job, name in (("torch", "fuseopt"), ("floor", "raw MPI (mpi4py)")):
        ax2.plot(SIZES, [median_of(runs, job, str(s), "latency_us") or 0 for s in SIZES],
                 "o-", label=name)
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("bytes")
    ax2.set_ylabel("back-to-back allreduce (us)")
    ax2.legend(fontsize=8)
    report.save(plt, fig, path, 110)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer steps; one rep")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--jobs", default="torch,floor,keras")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--batches", default=",".join(map(str, BATCHES)))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=1200)
    p.add_argument("--out", default=harness.RESULTS)
    p.add_argument("--strict", action="store_true")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--job", help=argparse.SUPPRESS)
    p.add_argument("--result-dir", help=argparse.SUPPRESS)
    p.add_argument("--proc-index", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.models = args.models.split(",")
    args.batches = [int(b) for b in args.batches.split(",")]
    if args.worker:
        return worker(args)
    if args.quick:
        args.reps = 1
    os.makedirs(args.out, exist_ok=True)
    runs, started = run_all(args)
    text, verdicts = build(args, runs)
    meta = report.run_meta(args, started, harness.find_mpiexec())
    return report.finish(args, "syncbn", "SyncBatchNorm: step cost and small allreduces",
                         {"meta": meta, "runs": runs}, text,
                         lambda path: plot(args, runs, path), verdicts)


if __name__ == "__main__":
    sys.exit(main())
