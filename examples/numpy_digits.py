"""Data-parallel softmax regression on scikit-learn's bundled digits, in
plain numpy: each rank trains on its shard, gradients are averaged with one
grouped allreduce per step (fused into one collective by the runtime).

    fuseoptrun -np 2 python examples/numpy_digits.py
"""
import argparse
import time

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import fuseopt


def softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.5)
    args = p.parse_args()

    fuseopt.init()
    rank, size = fuseopt.rank(), fuseopt.size()
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
    shard = slice(rank, None, size)  # each rank sees a different part of the data
    x_train, y_train = x_train[shard], y_train[shard]

    rng = np.random.default_rng(0)  # same seed everywhere, then made identical anyway
    w = fuseopt.broadcast(rng.normal(0, 0.01, (64, 10)).astype(np.float32), 0, name="w0")
    b = np.zeros(10, np.float32)
    steps_per_epoch = len(x_train) // args.batch_size
    if rank == 0:
        print("fuseopt numpy digits: %d ranks, %d samples per rank, batch %d per rank"
              % (size, len(x_train), args.batch_size), flush=True)
    start = time.perf_counter()
    for epoch in range(args.epochs):
        order = np.random.default_rng(epoch * 1000 + rank).permutation(len(x_train))
        t0 = time.perf_counter()
        loss_sum = 0.0
        for step in range(steps_per_epoch):
            idx = order[step * args.batch_size:(step + 1) * args.batch_size]
            xb, yb = x_train[idx], y_train[idx]
            prob = softmax(xb @ w + b)
            loss_sum += -np.log(prob[np.arange(len(yb)), yb] + 1e-9).mean()
            prob[np.arange(len(yb)), yb] -= 1.0
            grad_w = xb.T @ prob / len(yb)
            grad_b = prob.mean(axis=0)
            grad_w, grad_b = fuseopt.grouped_allreduce([grad_w, grad_b],
                                                       names=["grad.w", "grad.b"])
            w -= args.lr * grad_w
            b -= args.lr * grad_b
        dt = time.perf_counter() - t0
        loss = fuseopt.allreduce(np.array([loss_sum / steps_per_epoch]), name="loss")[0]
        acc_local = np.array([(np.argmax(x_test @ w + b, 1) == y_test).mean()])
        acc = fuseopt.allreduce(acc_local, name="acc")[0]
        if rank == 0 and (epoch % 5 == 4 or epoch == 0):
            print("epoch %2d  loss %.4f  test acc %.3f  %.0f samples/s (all ranks)"
                  % (epoch + 1, loss, acc, steps_per_epoch * args.batch_size * size / dt),
                  flush=True)
    if rank == 0:
        print("done in %.1f s; final test accuracy %.3f" % (time.perf_counter() - start, acc))
    fuseopt.shutdown()


if __name__ == "__main__":
    main()
