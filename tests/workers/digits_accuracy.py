"""Trained accuracy of compressed training, over seeds: the digits MLP on 2
(or more) ranks, each rank on its own shard, one run per (compressor, seed).

Accuracy after a few epochs of SGD with momentum 0.9 is chaotic in the seed
and in the CPU's rounding (torch picks kernels by ATEN_CPU_CAPABILITY), so a
single run says little: claims are about the mean over seeds. Rank 0 prints
one JSON line, ``ACCURACY {...}``, with every run's validation accuracy; the
parent test (tests/test_compression_accuracy.py) and the benchmark
(benchmarks/compression_accuracy.py) judge and tabulate it.

    digits_accuracy.py --seeds 12 --compressors none,ef_sign --setting d:0.05:0.9
"""
import argparse
import json

import torch
import torch.nn as nn
import torch.nn.functional as F

import fuseopt.torch as hvd

# The settings of docs/torch.md's table: layer widths, learning rate, momentum.
NETS = {"s": (64, 64, 10), "d": (64, 64, 64, 10)}
EPOCHS = 6
BATCH = 16  # per rank
HELD_OUT = 397  # of sklearn's 1,797 digits


def digits():
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x / 16.0, dtype=torch.float32)
    y = torch.tensor(y)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    x, y = x[perm], y[perm]
    cut = len(x) - HELD_OUT
    return x[:cut], y[:cut], x[cut:], y[cut:]


def compressor(name):
    return {"none": hvd.Compression.none, "fp16": hvd.Compression.fp16,
            "bf16": hvd.Compression.bf16, "ef_sign": hvd.Compression.ef_sign()}[name]


def mlp(widths):
    layers = []
    for a, b in zip(widths, widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def train(data, widths, lr, momentum, compression, seed):
    """Validation accuracy after EPOCHS epochs; the weights must end equal on every rank."""
    x, y, x_val, y_val = data
    xs, ys = x[hvd.rank()::hvd.size()], y[hvd.rank()::hvd.size()]
    torch.manual_seed(seed)
    model = mlp(widths)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum),
                                   model.named_parameters(), compression=compression)
    for _ in range(EPOCHS):
        for i in range(0, len(xs) - BATCH + 1, BATCH):
            F.cross_entropy(model(xs[i:i + BATCH]), ys[i:i + BATCH]).backward()
            opt.step()
            opt.zero_grad()
    opt.remove_hooks()
    first = model[0].weight.detach().reshape(1, -1)
    every = hvd.allgather(first, name="digits_accuracy.weights")
    assert all(torch.equal(every[k], every[0]) for k in range(hvd.size())), "ranks diverged"
    with torch.no_grad():
        return (model(x_val).argmax(1) == y_val).float().mean().item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=12)
    parser.add_argument("--compressors", default="none,ef_sign")
    parser.add_argument("--setting", action="append", default=[],
                        help="net:lr:momentum, net one of %s (default d:0.05:0.9)" % sorted(NETS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    hvd.init()
    data = digits()
    result = {}
    for setting in args.setting or ["d:0.05:0.9"]:
        net, lr, momentum = setting.split(":")
        result[setting] = {name: [train(data, NETS[net], float(lr), float(momentum),
                                        compressor(name), seed) for seed in range(args.seeds)]
                           for name in args.compressors.split(",")}
    if hvd.rank() == 0:
        print("ACCURACY " + json.dumps({"capability": torch.backends.cpu.get_cpu_capability(),
                                        "ranks": hvd.size(), "runs": result}), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
