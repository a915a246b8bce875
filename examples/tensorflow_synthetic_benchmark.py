"""Synthetic Keras training throughput with fuseopt, Horovod-style output.

    fuseoptrun -np 2 python examples/tensorflow_synthetic_benchmark.py

Uses model.fit on random data with the 8.4M-parameter MLP (or a small CNN),
prints images/sec per rank per iteration, the mean with a 95% interval, and
the total over all ranks.
"""
import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

import fuseopt.tensorflow.keras as hvd  # noqa: E402


def make_model(name):
    if name == "mlp":
        return keras.Sequential([keras.Input((1024,)), keras.layers.Dense(2048, activation="relu"),
                                 keras.layers.Dense(2048, activation="relu"),
                                 keras.layers.Dense(1024, activation="relu"),
                                 keras.layers.Dense(10)]), (1024,)
    return keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(32, 3, activation="relu"),
                             keras.layers.Conv2D(64, 3, activation="relu"),
                             keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)]), (32, 32, 3)


class Timer(keras.callbacks.Callback):
    def __init__(self, batches_per_iter, batch_size, warmup):
        super().__init__()
        self.batches_per_iter, self.batch_size, self.warmup = batches_per_iter, batch_size, warmup
        self.img_secs, self.count = [], 0

    def on_train_batch_end(self, batch, logs=None):
        self.count += 1
        if self.count == self.warmup:
            self.start = time.perf_counter()
        elif self.count > self.warmup and (self.count - self.warmup) % self.batches_per_iter == 0:
            now = time.perf_counter()
            img_sec = self.batch_size * self.batches_per_iter / (now - self.start)
            self.start = now
            self.img_secs.append(img_sec)
            if hvd.rank() == 0:
                print("Iter #%d: %.1f img/sec per rank" % (len(self.img_secs) - 1, img_sec),
                      flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="mlp", choices=("mlp", "cnn"))
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--num-warmup-batches", type=int, default=5)
    p.add_argument("--num-batches-per-iter", type=int, default=10)
    p.add_argument("--num-iters", type=int, default=5)
    p.add_argument("--fp16-allreduce", action="store_true")
    args = p.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    hvd.init()
    model, shape = make_model(args.model)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01),
                                                     compression=compression),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    steps = args.num_warmup_batches + args.num_batches_per_iter * args.num_iters
    data = np.random.default_rng(0).normal(size=(args.batch_size,) + shape).astype("float32")
    x = np.repeat(data[None], steps, 0).reshape((-1,) + shape)
    y = np.zeros(len(x), "int64")
    timer = Timer(args.num_batches_per_iter, args.batch_size, args.num_warmup_batches)
    if hvd.rank() == 0:
        print("Model: %s, batch size %d per rank, %d rank(s)"
              % (args.model, args.batch_size, hvd.size()), flush=True)
    model.fit(x, y, batch_size=args.batch_size, epochs=1, verbose=0, shuffle=False,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), timer])
    mean, conf = np.mean(timer.img_secs), 1.96 * np.std(timer.img_secs)
    if hvd.rank() == 0:
        print("Img/sec per rank: %.1f +-%.1f" % (mean, conf))
        print("Total img/sec on %d rank(s): %.1f +-%.1f" % (hvd.size(), hvd.size() * mean,
                                                           hvd.size() * conf))


if __name__ == "__main__":
    main()
