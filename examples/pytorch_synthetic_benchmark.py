"""Synthetic training throughput, in the style of Horovod's benchmark script.

    fuseoptrun -np 2 python examples/pytorch_synthetic_benchmark.py --model mlp

Prints images/sec per rank for each batch of iterations, then the mean with a
95% interval and the total over all ranks. torchvision is not required: the
models are defined here (a 8.4M-parameter MLP and a small ResNet-style CNN).
"""
import argparse
import timeit

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import fuseopt.torch as hvd


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(x + self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))


def make_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                             nn.Linear(2048, 1024), nn.ReLU(), nn.Linear(1024, 10)), (1024,)
    if name == "resnet":
        return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), Block(32), Block(32),
                             nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                             Block(64), Block(64), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                             nn.Linear(64, 10)), (3, 32, 32)
    raise SystemExit("unknown model %s (mlp, resnet)" % name)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="mlp", choices=("mlp", "resnet"))
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--num-warmup-batches", type=int, default=5)
    p.add_argument("--num-batches-per-iter", type=int, default=10)
    p.add_argument("--num-iters", type=int, default=5)
    p.add_argument("--fp16-allreduce", action="store_true")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    args = p.parse_args()

    hvd.init()
    torch.set_num_threads(args.threads)
    model, shape = make_model(args.model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    data = torch.randn((args.batch_size,) + shape)
    target = torch.randint(0, 10, (args.batch_size,))

    def benchmark_step():
        optimizer.zero_grad()
        F.cross_entropy(model(data), target).backward()
        optimizer.step()

    def log(s):
        if hvd.rank() == 0:
            print(s, flush=True)

    log("Model: %s, batch size %d per rank, %d rank(s), %d thread(s) each"
        % (args.model, args.batch_size, hvd.size(), args.threads))
    timeit.timeit(benchmark_step, number=args.num_warmup_batches)
    img_secs = []
    for x in range(args.num_iters):
        t = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
        img_sec = args.batch_size * args.num_batches_per_iter / t
        log("Iter #%d: %.1f img/sec per rank" % (x, img_sec))
        img_secs.append(img_sec)
    mean, conf = np.mean(img_secs), 1.96 * np.std(img_secs)
    log("Img/sec per rank: %.1f +-%.1f" % (mean, conf))
    log("Total img/sec on %d rank(s): %.1f +-%.1f" % (hvd.size(), hvd.size() * mean,
                                                       hvd.size() * conf))


if __name__ == "__main__":
    main()
