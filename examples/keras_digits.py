"""Keras 3 model.fit, data-parallel with fuseopt, on scikit-learn's digits.

A small CNN with SyncBatchNormalization, tiny per-rank batches, and the usual
Horovod callbacks: broadcast initial state, average metrics, warm up the
learning rate.

    fuseoptrun -np 2 python examples/keras_digits.py
"""
import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

import fuseopt.tensorflow.keras as hvd  # noqa: E402


class Throughput(keras.callbacks.Callback):
    def __init__(self, images_per_step):
        super().__init__()
        self.images_per_step = images_per_step

    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()
        self.steps = 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1

    def on_epoch_end(self, epoch, logs=None):
        if hvd.rank() == 0:
            rate = self.steps * self.images_per_step / (time.perf_counter() - self.start)
            print("epoch %d: loss %.3f accuracy %.3f val_accuracy %.3f  %.0f images/s on %d ranks"
                  % (epoch + 1, logs["loss"], logs["accuracy"], logs.get("val_accuracy", 0),
                     rate, hvd.size()), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=4, help="per rank")
    p.add_argument("--lr", type=float, default=0.02, help="per rank; scaled by size")
    args = p.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    hvd.init()
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype("float32").reshape(-1, 8, 8, 1)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], y[order]
    x_train, y_train, x_val, y_val = x[:1400], y[:1400], x[1400:], y[1400:]
    shard = slice(hvd.rank(), None, hvd.size())

    keras.utils.set_random_seed(hvd.rank())  # differs per rank; the callback syncs it
    model = keras.Sequential([
        keras.Input((8, 8, 1)),
        keras.layers.Conv2D(16, 3, padding="same"), hvd.SyncBatchNormalization(),
        keras.layers.ReLU(),
        keras.layers.Conv2D(32, 3, padding="same"), hvd.SyncBatchNormalization(),
        keras.layers.ReLU(), keras.layers.MaxPooling2D(), keras.layers.Flatten(),
        keras.layers.Dense(10, activation="softmax")])
    lr = args.lr * hvd.size()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(lr, momentum=0.9)),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    steps = len(x_train[shard]) // args.batch_size
    if hvd.rank() == 0:
        print("keras digits: %d ranks, batch %d per rank, %d steps per epoch"
              % (hvd.size(), args.batch_size, steps), flush=True)
    model.fit(x_train[shard], y_train[shard], batch_size=args.batch_size, epochs=args.epochs,
              validation_data=(x_val[shard], y_val[shard]), verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                         hvd.callbacks.MetricAverageCallback(),
                         hvd.callbacks.LearningRateWarmupCallback(lr, warmup_epochs=1,
                                                                  steps_per_epoch=steps),
                         Throughput(args.batch_size * hvd.size())])


if __name__ == "__main__":
    main()
