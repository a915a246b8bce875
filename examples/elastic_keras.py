"""Elastic Keras training on scikit-learn's digits: survives lost hosts and
grows onto new ones (docs/reliability.md, "Elastic training").

    fuseoptrun -np 4 --min-np 2 --max-np 8 --host-discovery-script ./hosts.sh \
        python examples/elastic_keras.py

After a reset fuseoptrun starts the script anew on the hosts it has; ``train``
resumes from the last commit (weights, optimizer slots, epoch and batch), and
the reset callback scales the learning rate to the new number of ranks.
"""
import argparse

import keras
import numpy as np
from sklearn.datasets import load_digits

import fuseopt.tensorflow.keras as hvd

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=5)
p.add_argument("--batch-size", type=int, default=16, help="per rank")
p.add_argument("--batches-per-commit", type=int, default=10)
p.add_argument("--lr", type=float, default=0.002, help="per rank: scaled by size()")
args = p.parse_args()

hvd.init()
x, y = load_digits(return_X_y=True)
x = (x / 16.0).astype(np.float32)
# Each rank trains on its own equal slice of the data (so every rank takes as
# many steps); the slices change with the number of ranks after a reset.
per_rank = len(x) // hvd.size()
shard = slice(hvd.rank() * per_rank, (hvd.rank() + 1) * per_rank)

model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(args.lr * hvd.size())),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.optimizer.build(model.trainable_variables)  # KerasState keeps the optimizer's slots too

state = hvd.elastic.KerasState(model, batch=0, epoch=0)


def on_state_reset():
    model.optimizer.learning_rate = args.lr * hvd.size()


state.register_reset_callbacks([on_state_reset])
callbacks = [hvd.elastic.UpdateEpochStateCallback(state),
             hvd.elastic.UpdateBatchStateCallback(state),
             hvd.elastic.CommitStateCallback(state, batches_per_commit=args.batches_per_commit),
             hvd.callbacks.MetricAverageCallback()]


@hvd.elastic.run
def train(state):
    state.model.fit(x[shard], y[shard], batch_size=args.batch_size, epochs=args.epochs - state.epoch, callbacks=callbacks,
                    verbose=2 if hvd.rank() == 0 else 0)


train(state)
loss, accuracy = model.evaluate(x, y, verbose=0)
if hvd.rank() == 0:
    print("final training accuracy %.3f on %d ranks" % (accuracy, hvd.size()))
hvd.shutdown()
