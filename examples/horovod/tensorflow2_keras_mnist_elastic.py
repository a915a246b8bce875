"""The Keras MNIST-shaped training of tensorflow2_keras_mnist.py under
Horovod's elastic API, run here with only the import changed: the job may
lose or gain hosts, and training resumes from the last commit.

What it exercises: hvd.elastic.KerasState with batch and epoch,
register_reset_callbacks (rescaling the learning rate to the new size()),
UpdateEpochStateCallback, UpdateBatchStateCallback, CommitStateCallback,
@hvd.elastic.run, and the --use-mixed-precision flag.

    fuseoptrun -np 2 --min-np 1 --max-np 4 --host-discovery-script ./hosts.sh \\
        python tensorflow2_keras_mnist_elastic.py --epochs 3 --steps 8
"""
import argparse

import tensorflow as tf

import fuseopt.tensorflow.keras as hvd
from tensorflow2_keras_mnist import build, synthetic_digits


def main():
    p = argparse.ArgumentParser(description="elastic Keras fit on MNIST-shaped data")
    p.add_argument("--use-mixed-precision", action="store_true",
                   help="float16 compute with float32 variables")
    p.add_argument("--epochs", type=int, default=24)
    p.add_argument("--steps", type=int, default=500, help="steps per epoch over all ranks")
    args = p.parse_args()
    if args.use_mixed_precision:
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
    hvd.init()

    images, labels = synthetic_digits(hvd.rank())
    dataset = tf.data.Dataset.from_tensor_slices((images, labels)).repeat().shuffle(1024) \
        .batch(32)
    model = build()
    model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.Adam(
        0.001 * hvd.size())), loss=tf.keras.losses.SparseCategoricalCrossentropy(),
        metrics=["accuracy"])
    # One step builds the optimizer's variables, so that the state holds them.
    model.fit(dataset, steps_per_epoch=1, epochs=1, verbose=0)
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)

    def after_reset():
        state.model.optimizer.learning_rate = 0.001 * hvd.size()

    state.register_reset_callbacks([after_reset])
    callbacks = [hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.CommitStateCallback(state)]
    if hvd.rank() == 0:
        callbacks.append(tf.keras.callbacks.ModelCheckpoint("./checkpoint-{epoch}.keras"))

    @hvd.elastic.run
    def train(state):
        state.model.fit(dataset, steps_per_epoch=args.steps // hvd.size(),
                        epochs=args.epochs - state.epoch, callbacks=callbacks, verbose=1)

    train(state)


if __name__ == "__main__":
    main()
