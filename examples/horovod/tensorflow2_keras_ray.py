"""Keras `fit` on a Ray cluster through a static RayExecutor, written against
Horovod's API (``horovod.ray.RayExecutor``, ``horovod.tensorflow.keras``)
and run here with only the imports changed. The data is synthetic (this
machine has no network): 16 features, and the label is the index of the
largest of the first four.

What it exercises: RayExecutor.create_settings, RayExecutor(num_workers=,
cpus_per_worker=, use_gpu=), start, run(train, kwargs=...), shutdown; in
the workers hvd.init, DistributedOptimizer with the learning rate scaled by
size(), BroadcastGlobalVariablesCallback, MetricAverageCallback,
LearningRateWarmupCallback, a ModelCheckpoint on rank 0 only.

    python tensorflow2_keras_ray.py --num-workers 2 --epochs 2
    python tensorflow2_keras_ray.py --address auto      # an existing cluster
"""
import argparse

import ray

import fuseopt.tensorflow.keras as hvd
from fuseopt.ray import RayExecutor


def train(num_epochs, steps):
    import numpy as np
    import tensorflow as tf

    hvd.init()
    gpus = tf.config.experimental.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], "GPU")

    rng = np.random.default_rng(hvd.rank())
    features = rng.normal(size=(4096, 16)).astype(np.float32)
    labels = np.argmax(features[:, :4], axis=1)
    dataset = tf.data.Dataset.from_tensor_slices((features, labels)).repeat().shuffle(4096) \
        .batch(64)
    model = tf.keras.Sequential([tf.keras.Input((16,)),
                                 tf.keras.layers.Dense(64, activation="relu"),
                                 tf.keras.layers.Dropout(0.1),
                                 tf.keras.layers.Dense(4, activation="softmax")])
    scaled_lr = 0.002 * hvd.size()
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(),
                  optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.Adam(scaled_lr)),
                  metrics=["accuracy"])
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=2,
                                                 verbose=1),
    ]
    if hvd.rank() == 0:
        callbacks.append(tf.keras.callbacks.ModelCheckpoint("./ray-checkpoint-{epoch}.keras"))
    history = model.fit(dataset, steps_per_epoch=steps // hvd.size(), epochs=num_epochs,
                        callbacks=callbacks, verbose=2 if hvd.rank() == 0 else 0)
    return history.history["accuracy"][-1]


def main():
    parser = argparse.ArgumentParser(description="Keras on Ray, data parallel")
    parser.add_argument("--address", help="Ray cluster address (default: start one here)")
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200, help="steps per epoch over all ranks")
    args = parser.parse_args()

    ray.init(address=args.address)
    settings = RayExecutor.create_settings(timeout_s=30)
    executor = RayExecutor(settings, num_workers=args.num_workers, cpus_per_worker=1,
                           use_gpu=False)
    executor.start()
    accuracies = executor.run(train, kwargs=dict(num_epochs=args.epochs, steps=args.steps))
    executor.shutdown()
    print("final accuracy per rank: %s" % ", ".join("%.3f" % a for a in accuracies))


if __name__ == "__main__":
    main()
