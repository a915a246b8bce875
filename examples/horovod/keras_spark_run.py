"""Keras training inside Spark with ``horovod.spark.run``'s calls, written
against Horovod's API and run here with only the imports changed
(``import fuseopt.spark``, ``import fuseopt.tensorflow.keras as hvd``). The
shape is that of Horovod's Spark Keras examples: the driver builds and
compiles the model, sends it to the ranks as bytes, each rank trains on its
shard and rank 0 returns the history and the best checkpoint as bytes. The
data is synthetic tabular data (this machine has no network): a sales-like
target from 8 features.

What it exercises: fuseopt.spark.run(train_fn, args=(model_bytes,),
num_proc=, stdout=, stderr=, verbose=, prefix_output_with_timestamp=);
in the ranks hvd.init, hvd.load_model (the optimizer comes back wrapped in
DistributedOptimizer), the learning rate scaled by size(),
BroadcastGlobalVariablesCallback, MetricAverageCallback,
LearningRateWarmupCallback, ReduceLROnPlateau, ModelCheckpoint on rank 0.

    python keras_spark_run.py --num-proc 2 --epochs 3
    spark-submit keras_spark_run.py --master spark://host:7077 --num-proc 8
"""
import argparse
import os
import sys
import tempfile

import fuseopt.spark


def serialize_model(model):
    """A compiled Keras model as the bytes of a .keras file."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.keras")
        model.save(path)
        with open(path, "rb") as f:
            return f.read()


def deserialize_model(model_bytes, load_model_fn):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.keras")
        with open(path, "wb") as f:
            f.write(model_bytes)
        return load_model_fn(path)


def shard(rank, size, rows=4096):
    """This rank's rows of one synthetic table (the same table on every rank)."""
    import numpy as np
    rng = np.random.default_rng(0)
    features = rng.normal(size=(rows, 8)).astype(np.float32)
    sales = (features @ rng.normal(size=8) + 0.3 * features[:, 0] ** 2).astype(np.float32)
    return features[rank::size], sales[rank::size]


def train_fn(model_bytes, epochs, batch_size):
    # Imported here: the function runs in a fresh process on a Spark executor.
    import tensorflow as tf
    import fuseopt.tensorflow.keras as hvd

    hvd.init()
    model = deserialize_model(model_bytes, hvd.load_model)
    scaled_lr = float(model.optimizer.learning_rate.numpy()) * hvd.size()
    model.optimizer.learning_rate.assign(scaled_lr)
    verbose = 2 if hvd.rank() == 0 else 0
    checkpoint = os.path.join(tempfile.mkdtemp(), "checkpoint.keras")
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(root_rank=0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=2,
                                                 verbose=verbose),
        tf.keras.callbacks.ReduceLROnPlateau(monitor="val_loss", patience=5, verbose=verbose),
    ]
    if hvd.rank() == 0:
        callbacks.append(tf.keras.callbacks.ModelCheckpoint(checkpoint, monitor="val_loss",
                                                            save_best_only=True))
    x, y = shard(hvd.rank(), hvd.size())
    split = len(x) * 9 // 10
    history = model.fit(x[:split], y[:split], validation_data=(x[split:], y[split:]),
                        batch_size=batch_size, epochs=epochs, callbacks=callbacks,
                        verbose=verbose)
    if hvd.rank() == 0:
        with open(checkpoint, "rb") as f:
            return history.history, f.read()


def main():
    parser = argparse.ArgumentParser(description="Keras inside Spark, data parallel")
    parser.add_argument("--master", help="Spark master (default: local[num-proc])")
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--local-checkpoint-file", default="checkpoint.keras")
    args = parser.parse_args()

    import tensorflow as tf
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    conf = SparkConf().setAppName("training").setMaster(args.master or
                                                       "local[%d]" % args.num_proc)
    spark = SparkSession.builder.config(conf=conf).getOrCreate()

    model = tf.keras.Sequential([tf.keras.Input((8,)),
                                 tf.keras.layers.Dense(32, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.005), loss="mse")
    model_bytes = serialize_model(model)

    history, best_model_bytes = fuseopt.spark.run(
        train_fn, args=(model_bytes, args.epochs, args.batch_size), num_proc=args.num_proc,
        stdout=sys.stdout, stderr=sys.stderr, verbose=2, prefix_output_with_timestamp=True)[0]
    print("Best validation loss: %f" % min(history["val_loss"]))
    with open(args.local_checkpoint_file, "wb") as f:
        f.write(best_model_bytes)
    print("Written checkpoint to %s" % args.local_checkpoint_file)
    spark.stop()


if __name__ == "__main__":
    main()
