"""An MNIST-shaped convolutional net trained with Keras `fit`, written
against Horovod's Keras API and run here with only the import changed
(``import fuseopt.tensorflow.keras as hvd``). The data is synthetic (this
machine has no network), 28x28 images whose label is the brightest
quadrant, so the model has something to learn.

What it exercises: hvd.init, DistributedOptimizer around a Keras optimizer
with the learning rate scaled by size(), BroadcastGlobalVariablesCallback,
MetricAverageCallback, LearningRateWarmupCallback, a ModelCheckpoint on rank
0 only, and steps per epoch divided by size().

    fuseoptrun -np 2 python tensorflow2_keras_mnist.py --epochs 2 --steps 16
"""
import argparse

import numpy as np
import tensorflow as tf

import fuseopt.tensorflow.keras as hvd


def synthetic_digits(rank, count=2048):
    """Images whose label (0-3) is the quadrant holding a bright square."""
    rng = np.random.default_rng(rank)
    labels = rng.integers(0, 4, count)
    images = rng.random((count, 28, 28, 1), dtype=np.float32) * 0.2
    for image, label in zip(images, labels):
        row, col = divmod(int(label), 2)
        image[row * 14 + 3:row * 14 + 11, col * 14 + 3:col * 14 + 11] += 0.8
    return images, labels


def build():
    layers = tf.keras.layers
    return tf.keras.Sequential([
        tf.keras.Input((28, 28, 1)),
        layers.Conv2D(16, 3, activation="relu"),
        layers.MaxPooling2D(),
        layers.Conv2D(32, 3, activation="relu"),
        layers.MaxPooling2D(),
        layers.Flatten(),
        layers.Dense(64, activation="relu"),
        layers.Dense(10, activation="softmax"),
    ])


def main():
    p = argparse.ArgumentParser(description="Keras fit on MNIST-shaped data, data parallel")
    p.add_argument("--epochs", type=int, default=24)
    p.add_argument("--steps", type=int, default=500, help="steps per epoch over all ranks")
    args = p.parse_args()
    hvd.init()
    for gpu in tf.config.list_physical_devices("GPU"):
        tf.config.experimental.set_memory_growth(gpu, True)

    images, labels = synthetic_digits(hvd.rank())
    dataset = tf.data.Dataset.from_tensor_slices((images, labels)).repeat().shuffle(1024) \
        .batch(32)
    model = build()
    # The global batch grows with the ranks, and so does the learning rate;
    # the warm-up callback ramps it up over the first epochs.
    scaled_lr = 0.001 * hvd.size()
    model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.Adam(scaled_lr)),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(), metrics=["accuracy"])
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=3,
                                                 verbose=1),
    ]
    if hvd.rank() == 0:  # one writer for the checkpoints
        callbacks.append(tf.keras.callbacks.ModelCheckpoint("./checkpoint-{epoch}.keras"))
    model.fit(dataset, steps_per_epoch=args.steps // hvd.size(), epochs=args.epochs,
              callbacks=callbacks, verbose=1 if hvd.rank() == 0 else 0)


if __name__ == "__main__":
    main()
