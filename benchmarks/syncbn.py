"""SyncBatchNorm benchmark: what synchronizing BatchNorm statistics costs a training
step, against plain (per-rank) BatchNorm and against the floor of the same
SyncBatchNorm whose statistics travel through raw MPI; and the back-to-back small
allreduces it is made of, fuseopt against raw MPI.

Jobs (2 ranks each, Note [interleaving] and Note [one job] in harness.py):
  torch    BatchNorm and fuseopt.torch.SyncBatchNorm in the same processes, steps of
           the two alternating in blocks; then allreduces of 4 B to 64 KiB, each waited
           on at once, with a little compute between (SyncBN's pattern).
  floor    BatchNorm and the same SyncBatchNorm (the same native kernel) with its
           per-channel sums summed by mpi4py's Allreduce, gradients averaged by one mpi4py
           Allreduce per step; then the same small allreduces through mpi4py. fuseopt is
           never initialized in this job (mpi4py and fuseopt must not share a process:
           harness.py).
  layer    One process, communication removed: a SyncBatchNorm layer (the native kernel,
           no agreed reduction) against torch's BatchNorm layer, forward + backward, at
           the shapes of the demo's and the ResNet's layers.
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
VARIANTS = {"torch": ("BatchNorm", "SyncBatchNorm"),
            "floor": ("BatchNorm (raw MPI)", "SyncBatchNorm (raw MPI)"),
            "keras": ("Keras BatchNormalization", "Keras SyncBatchNormalization")}
TARGETS = {("demo", 3): 0.85, ("resnet", 8): 0.85}  # SyncBN / BN throughput, issue 42
LATENCY_MAX = 2.0  # agreed reduction / raw MPI, back-to-back, 4 B to 4 KiB
LATENCY_TARGET_SIZES = (4, 64, 520, 4096)
LAYER_MAX = 1.25  # one process: SyncBN layer / BatchNorm layer, forward + backward
# (batch, channels, height, width) of every BatchNorm layer, per model at its batch.
LAYERS = {"demo": [(3, 16, 8, 8), (3, 32, 8, 8)],
          "resnet": [(8, 16, 32, 32)] * 5 + [(8, 32, 16, 16)] * 5 + [(8, 64, 8, 8)] * 5 +
          [(8, 128, 4, 4)] * 5}


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


def latencies(call_for, barrier, quick):
    """Median microseconds of a back-to-back small reduction of each size, a little
    compute (a 32x32 matmul) between two of them; call_for(size) makes the call."""
    import numpy as np
    a = np.ones((32, 32), np.float32)
    out = {}
    for size in SIZES:
        call = call_for(size)
        samples = []
        barrier()
        for i in range(300 if quick else 2000):
            a @ a
            t0 = time.perf_counter()
            call()
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

    def allreduce(size):
        buf = np.ones(max(1, size // 4), np.float32)
        return lambda: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    norms = dict(zip(VARIANTS["floor"], (torch.nn.BatchNorm2d, MpiSyncBatchNorm)))
    return comm.Get_rank(), norms, comm.Barrier, comm.allgather, wrap, allreduce, None


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

    def allreduce(size):  # the blocking call: its wait runs the round itself
        import numpy as np
        buf = np.ones(max(1, size // 4), np.float32)
        return lambda: fuseopt.allreduce_(buf, name="lat.%d" % size, op=fuseopt.Sum)

    def agreed(size):  # the same bytes as float64 values (8 B for the 4 B row)
        return fuseopt.AgreedReduction("lat.agreed.%d" % size, max(1, size // 8))
    return hvd.rank(), norms, hvd.barrier, hvd.allgather_object, wrap, allreduce, agreed


def torch_job(args, floor):
    import numpy as np
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    rank, norms, barrier, gather, wrap, allreduce, agreed = (
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
    for field, call_for in (("latency_us", allreduce), ("agreed_us", agreed)):
        if call_for is None:
            continue
        us = latencies(call_for, barrier, args.quick)
        results[field] = dict(zip(us, rank_times(list(us.values()))))
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


def empty_wrappers(torch, channels):
    """Layers that wrap nothing (an empty_like each way) in a torch.autograd.Function
    and in a torch.library custom op with a registered autograd formula: the two ways
    a Python binding can reach a native kernel, each at its least."""
    class Empty(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, b):
            ctx.save_for_backward(x, w)
            return torch.empty_like(x)

        @staticmethod
        def backward(ctx, dy):
            x, w = ctx.saved_tensors
            return torch.empty_like(x), torch.empty_like(w), torch.empty_like(w)

    @torch.library.custom_op("fuseopt_bench::empty_bn", mutates_args=())
    def empty_op(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    @torch.library.custom_op("fuseopt_bench::empty_bn_grad", mutates_args=())
    def empty_grad(x: torch.Tensor, dy: torch.Tensor,
                   w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return torch.empty_like(x), torch.empty_like(w), torch.empty_like(w)

    def save(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], inputs[1])

    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        return empty_grad(x, dy, w)
    empty_op.register_autograd(backward, setup_context=save)
    w = torch.ones(channels, requires_grad=True)
    b = torch.zeros(channels, requires_grad=True)
    return {"function": lambda x: Empty.apply(x, w, b), "custom_op": lambda x: empty_op(x, w, b)}


def layer_job(args):
    """One process, no communication: forward + backward of a SyncBatchNorm layer
    whose statistics are this process's own (the native kernel's single calls) and
    of torch's BatchNorm2d, alternating, per layer shape (median us)."""
    import torch
    import fuseopt.torch as hvd
    from fuseopt.api.batch_norm import BatchNormKernel
    torch.set_num_threads(1)
    local = BatchNormKernel()

    class LocalSyncBatchNorm(hvd.SyncBatchNorm):
        _ranks = staticmethod(lambda: 2)  # take the synchronized path in one process

        def _host_kernel(self, channels):
            return local

    def median_us(layers, shape, per_block):
        """Median microseconds of each layer's forward + backward, in 10 blocks of
        per_block calls, the layers alternating block by block (the first two
        blocks warm up)."""
        x, dy = torch.randn(shape, requires_grad=True), torch.randn(shape)
        samples = {k: [] for k in layers}
        for block in range(10):
            for name, layer in layers.items():
                t0 = time.perf_counter()
                for _ in range(per_block):
                    layer(x).backward(dy)
                samples[name].append((time.perf_counter() - t0) / per_block * 1e6)
        return {name: statistics.median(v[2:]) for name, v in samples.items()}

    out = {}
    for shape in sorted({s for m in args.models for s in LAYERS[m]}):
        layers = {"bn": torch.nn.BatchNorm2d(shape[1]), "sync": LocalSyncBatchNorm(shape[1])}
        if shape == LAYERS["demo"][0]:  # what a layer of Python could cost at the least
            layers.update(empty_wrappers(torch, shape[1]))
        for name, us in median_us(layers, shape, 20 if args.quick else 100).items():
            out["%s/%s" % ("x".join(map(str, shape)), name)] = us
    # A rank that trains with 2 threads: both layers may use them.
    torch.set_num_threads(2)
    shape = LAYERS["resnet"][0]
    layers = {"bn": torch.nn.BatchNorm2d(shape[1]), "sync": LocalSyncBatchNorm(shape[1])}
    for name, us in median_us(layers, shape, 10 if args.quick else 40).items():
        out["%s/%s/2 threads" % ("x".join(map(str, shape)), name)] = us
    return 0, {"layer_us": out}


def worker(args):
    if args.job == "layer":
        rank, out = layer_job(args)
    elif args.job == "keras":
        rank, out = keras_job(args)
    else:
        rank, out = torch_job(args, args.job == "floor")
    harness.write_result(args.result_dir, rank, out)  # ranks hold the same figures


# ---- driver side ----------------------------------------------------------------------

def run_all(args):
    mpiexec = harness.find_mpiexec()
    jobs = [j for j in ("torch", "floor", "keras", "layer") if j in args.jobs]
    runs = {j: [] for j in jobs}
    started = time.time()
    for rep in range(args.reps):
        for _, _, j in harness.interleaved(jobs, 1, args.seed + rep):
            harness.log("rep %d: %s job ...\n" % (rep + 1, j))
            argv = [sys.executable, os.path.abspath(__file__), "--worker", "--job", j,
                    "--models", ",".join(args.models),
                    "--batches", ",".join(map(str, args.batches))] + \
                (["--quick"] if args.quick else [])
            outs, _ = harness.run_job("single" if j == "layer" else "mpi", argv,
                                      harness.base_env(), args.timeout, "%s job" % j, mpiexec)
            runs[j].append(outs[0])
    return runs, started


def median_of(runs, job, key, field="steps"):
    vals = [r[field][key] for r in runs.get(job, []) if key in r[field]]
    return statistics.median(vals) if vals else None


def best_of(runs, job, key, field):
    vals = [r[field][key] for r in runs.get(job, []) if key in r[field]]
    return min(vals) if vals else None


def paired_ratio(runs, job, prefix):
    """BatchNorm's step time over SyncBatchNorm's, per rep (both measured in
    the same job, in interleaved blocks), then the median over reps: a slow
    spell of the machine hits both sides of a rep's ratio alike, where a
    ratio of two medians could pair a slow rep's BatchNorm with a fast one's
    SyncBatchNorm."""
    bn, sbn = (prefix + VARIANTS[job][i] for i in (0, 1))
    ratios = [r["steps"][bn] / r["steps"][sbn] for r in runs.get(job, [])
              if r["steps"].get(bn) and r["steps"].get(sbn)]
    return statistics.median(ratios) if ratios else None


def _step_rows(args, runs, lines, verdicts):
    rows = []
    for m in args.models:
        for b in args.batches:
            def ms(job, i):
                return median_of(runs, job, "%s/%d/%s" % (m, b, VARIANTS[job][i]))
            pairs = {j: (ms(j, 0), ms(j, 1)) for j in ("torch", "floor", "keras")}
            ratio = {j: paired_ratio(runs, j, "%s/%d/" % (m, b)) for j in pairs}
            row = ["%s, batch %d/rank" % (m, b)]
            for j in ("torch", "floor", "keras"):
                row += [report.fmt(pairs[j][0]), report.fmt(pairs[j][1]),
                        report.fmt(ratio[j], "%.2fx")]
            rows.append(row)
            limit = TARGETS.get((m, b))
            for what, j in (("torch", "torch"), ("Keras", "keras")):
                if limit and ratio[j] is not None:
                    lines.append(verdicts.line(ratio[j] >= limit, "%s %s batch %d/rank: "
                                               "SyncBatchNorm throughput %.2fx BatchNorm's >= "
                                               "%.2fx" % (what, m, b, ratio[j], limit)))
            if ratio["torch"] is not None and ratio["floor"] is not None:
                # Compared as printed (two decimals): a tie the table shows is a tie.
                lines.append(verdicts.line(
                    round(ratio["torch"], 2) >= round(ratio["floor"], 2), "%s batch %d/rank: SyncBatchNorm through "
                    "fuseopt %.2fx BatchNorm's >= through raw MPI %.2fx"
                    % (m, b, ratio["torch"], ratio["floor"])))
    return report.table(["model", "BN ms", "SyncBN ms", "SyncBN/BN", "raw-MPI BN ms",
                         "raw-MPI SyncBN ms", "raw-MPI SyncBN/BN", "Keras BN ms",
                         "Keras SyncBN ms", "Keras SyncBN/BN"], "lrrrrrrrrr", rows)


def _latency_rows(runs, lines, verdicts):
    rows = []
    for size in SIZES:
        neg = best_of(runs, "torch", str(size), "latency_us")
        agreed = best_of(runs, "torch", str(size), "agreed_us")
        mpi = best_of(runs, "floor", str(size), "latency_us")
        r = agreed / mpi if agreed and mpi else None
        rows.append(["%d B" % size, report.fmt(agreed, "%.1f"), report.fmt(neg, "%.1f"),
                     report.fmt(mpi, "%.1f"), report.fmt(r, "%.2fx"),
                     report.fmt(neg / mpi if neg and mpi else None, "%.2fx")])
        if r is not None and size in LATENCY_TARGET_SIZES:
            lines.append(verdicts.line(r <= LATENCY_MAX, "back-to-back %d B agreed reduction: "
                                       "%.1f us / raw MPI %.1f us = %.2fx <= %.1fx"
                                       % (size, agreed, mpi, r, LATENCY_MAX)))
    return report.table(["size", "agreed us", "negotiated us", "raw MPI us", "agreed/raw",
                         "negotiated/raw"], "lrrrrr", rows)


def _layer_rows(args, runs, lines, verdicts):
    rows = []
    for m in args.models:
        total = {"bn": 0.0, "sync": 0.0}
        for shape in sorted(set(LAYERS[m])):
            key = "x".join(map(str, shape))
            bn, sync = (median_of(runs, "layer", "%s/%s" % (key, k), "layer_us")
                        for k in ("bn", "sync"))
            if not bn or not sync:
                continue
            n = LAYERS[m].count(shape)
            total["bn"] += n * bn
            total["sync"] += n * sync
            rows.append(["%s (%d in %s)" % (key, n, m), report.fmt(bn, "%.1f"),
                         report.fmt(sync, "%.1f"), report.fmt(sync / bn, "%.2fx")])
            for k, label in (("function", "an empty torch.autograd.Function"),
                             ("custom_op", "an empty torch.library custom op")):
                empty = median_of(runs, "layer", "%s/%s" % (key, k), "layer_us")
                if empty:
                    rows.append(["%s: %s" % (key, label), report.fmt(bn, "%.1f"),
                                 report.fmt(empty, "%.1f"), report.fmt(empty / bn, "%.2fx")])
        if m == "resnet":
            key = "x".join(map(str, LAYERS[m][0]))
            bn, sync = (median_of(runs, "layer", "%s/%s/2 threads" % (key, k), "layer_us")
                        for k in ("bn", "sync"))
            if bn and sync:
                rows.append(["%s, torch with 2 threads" % key, report.fmt(bn, "%.1f"),
                             report.fmt(sync, "%.1f"), report.fmt(sync / bn, "%.2fx")])
                lines.append(verdicts.line(sync / bn <= LAYER_MAX, "one process, %s with 2 "
                                           "threads: SyncBatchNorm %.2fx BatchNorm's <= %.2fx"
                                           % (key, sync / bn, LAYER_MAX)))
        if total["bn"]:
            r = total["sync"] / total["bn"]
            rows.append(["**%s, all layers**" % m, report.fmt(total["bn"], "%.1f"),
                         report.fmt(total["sync"], "%.1f"), report.fmt(r, "%.2fx")])
            lines.append(verdicts.line(r <= LAYER_MAX, "one process, %s's layers: SyncBatchNorm "
                                       "forward+backward %.2fx BatchNorm's <= %.2fx"
                                       % (m, r, LAYER_MAX)))
    return report.table(["layer shape", "BatchNorm us", "SyncBatchNorm us", "ratio"], "lrrr",
                        rows)


def build(args, runs):
    lines, verdicts = [], report.Verdicts()
    text = ["Step times (ms, the slower rank, median over blocks and reps) and throughput "
            "ratios (higher is better: BN ms / SyncBN ms of the same job, the median over reps); "
            "the raw-MPI columns are the floor: "
            "the same layers with every sum through mpi4py:", ""]
    text += _step_rows(args, runs, lines, verdicts)
    if "layer" in runs:
        text += ["", "One process, communication removed: a layer's forward + backward "
                 "(median us; SyncBatchNorm is the native kernel's two calls):", ""]
        text += _layer_rows(args, runs, lines, verdicts)
    text += ["", "Back-to-back allreduce, waited on at once, a 32x32 matmul between two "
             "(median us of 2,000 calls, the slower rank, the best of the reps for every "
             "contender alike: each contender runs in its own job, so a slow spell of this "
             "machine cannot hit both, and a microsecond figure is read at its best): "
             "fuseopt.AgreedReduction (float64 values of the same "
             "bytes; 8 B for the 4 B row), the negotiated fuseopt.allreduce_, raw MPI "
             "(mpi4py):", ""]
    text += _latency_rows(runs, lines, verdicts)
    return "\n".join(text + [""] + lines), verdicts


def plot(args, runs, path):
    plt = report.pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels, series = [], {k: [] for k in ("torch", "floor", "keras")}
    for m in args.models:
        for b in args.batches:
            labels.append("%s b%d" % (m, b))
            bn = median_of(runs, "torch", "%s/%d/%s" % (m, b, VARIANTS["torch"][0]))
            keras_bn = median_of(runs, "keras", "%s/%d/%s" % (m, b, VARIANTS["keras"][0]))
            floor_bn = median_of(runs, "floor", "%s/%d/%s" % (m, b, VARIANTS["floor"][0]))
            for job, label, base in (("torch", VARIANTS["torch"][1], bn),
                                     ("floor", VARIANTS["floor"][1], floor_bn),
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
    for job, field, name in (("torch", "agreed_us", "fuseopt AgreedReduction"),
                             ("torch", "latency_us", "fuseopt allreduce_ (negotiated)"),
                             ("floor", "latency_us", "raw MPI (mpi4py)")):
        ax2.plot(SIZES, [best_of(runs, job, str(s), field) or 0 for s in SIZES],
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
    p.add_argument("--jobs", default="torch,floor,keras,layer")
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
