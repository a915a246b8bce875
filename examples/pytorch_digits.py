"""A small CNN with BatchNorm on scikit-learn's bundled digits, data-parallel.

With tiny per-rank batches, plain BatchNorm normalizes each rank's 3 samples
on their own; SyncBatchNorm normalizes over the global batch. This script
trains both from the same starts (3 seeds: initial weights and data order),
prints progress and throughput, and closes with each one's validation
accuracy as a mean and spread over the seeds, since one run's accuracy
differs from the next by about as much as the two norms differ.

    fuseoptrun -np 2 python examples/pytorch_digits.py
"""
import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits

import fuseopt.torch as hvd


def make_model():
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 16, 10))


def load():
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.tensor(y)
    g = torch.Generator().manual_seed(0)
    order = torch.randperm(len(x), generator=g)
    x, y = x[order], y[order]
    return x[:1400], y[:1400], x[1400:], y[1400:]


def train(sync_bn, args, data, seed=0):
    x_train, y_train, x_val, y_val = data
    torch.manual_seed(42 + seed)
    model = make_model()
    if sync_bn:
        model = hvd.SyncBatchNorm.convert_sync_batchnorm(model)
    # Linear scaling rule: the global batch grows with the number of ranks.
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    xs, ys = x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]
    steps = len(xs) // args.batch_size
    label = "SyncBatchNorm" if sync_bn else "BatchNorm"
    for epoch in range(args.epochs):
        model.train()
        t0 = time.perf_counter()
        order = torch.randperm(len(xs), generator=torch.Generator().manual_seed(100 * seed + epoch))
        total = 0.0
        for step in range(steps):
            idx = order[step * args.batch_size:(step + 1) * args.batch_size]
            loss = F.cross_entropy(model(xs[idx]), ys[idx])
            loss.backward()
            opt.step()
            opt.zero_grad()
            total += loss.item()
        elapsed = time.perf_counter() - t0
        model.eval()
        with torch.no_grad():
            local_acc = (model(x_val).argmax(1) == y_val).float().mean()
        acc = hvd.allreduce(local_acc, name="val_acc").item()
        loss = hvd.allreduce(torch.tensor(total / steps), name="train_loss").item()
        speed = steps * args.batch_size * hvd.size() / elapsed
        if hvd.rank() == 0:
            print("[%-13s seed %d] epoch %d  loss %.3f  val acc %.3f  %6.0f images/s on %d ranks"
                  % (label, seed, epoch + 1, loss, acc, speed, hvd.size()), flush=True)
    opt.remove_hooks()
    return acc, speed


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=3, help="per rank")
    p.add_argument("--lr", type=float, default=0.01, help="per rank (scaled by size)")
    p.add_argument("--seeds", type=int, default=3)
    args = p.parse_args()
    torch.set_num_threads(1)
    hvd.init()
    data = load()
    if hvd.rank() == 0:
        print("digits CNN: %d ranks, batch %d per rank, %d epochs, %d seeds"
              % (hvd.size(), args.batch_size, args.epochs, args.seeds))
    runs = {False: [], True: []}
    for seed in range(args.seeds):  # the two norms alternate: a slow spell hits both
        for sync_bn in (False, True):
            runs[sync_bn].append(train(sync_bn, args, data, seed))
    if hvd.rank() == 0:
        summary = {}
        for sync_bn, label in ((False, "BatchNorm"), (True, "SyncBatchNorm")):
            accs = [acc for acc, _ in runs[sync_bn]]
            spread = statistics.stdev(accs) if len(accs) > 1 else 0.0
            summary[sync_bn] = statistics.median(speed for _, speed in runs[sync_bn])
            print("%-13s validation accuracy %.3f +- %.3f (mean +- std over %d seeds), "
                  "%.0f images/s (median over seeds of the last epoch)"
                  % (label, statistics.mean(accs), spread, len(accs), summary[sync_bn]))
        print("SyncBatchNorm throughput: %.2fx BatchNorm's" % (summary[True] / summary[False]))


if __name__ == "__main__":
    main()
