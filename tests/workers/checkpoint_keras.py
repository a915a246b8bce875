"""Keras fit with CheckpointCallback; can be killed mid-way and resumed.

Usage: checkpoint_keras.py DIR TAG EPOCHS [--kill-at-epoch E] [--powersgd]
Rank 0 writes DIR/final-TAG.npz with the final weights. With --powersgd the
gradients are compressed by PowerSGD, whose state the checkpoint carries."""
import os
import signal
import sys

from tf_common import global_data, hvd, keras, np, rank_rows

BATCH, STEPS = 8, 6


class KillAt(keras.callbacks.Callback):
    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.epoch and hvd.rank() == 1:
            os.kill(os.getpid(), signal.SIGKILL)


def main(directory, tag, epochs, kill_at=-1, powersgd=False):
    hvd.init()
    keras.utils.set_random_seed(100 + hvd.rank())   # per-rank dropout streams
    x, y = global_data(3, hvd.size() * BATCH * STEPS, dim=10, classes=4)
    x, y = rank_rows(x, BATCH, STEPS), rank_rows(y, BATCH, STEPS)
    model = keras.Sequential([keras.Input((10,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dropout(0.3), keras.layers.Dense(4)])
    compression = hvd.Compression.powersgd(rank=1, start_iter=2) if powersgd \
        else hvd.Compression.none
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01),
                                                     compression=compression),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    path = os.path.join(directory, "ckpt.fuseopt")
    ckpt = hvd.load_checkpoint(path, model, missing_ok=True)
    start = 0 if ckpt is None else ckpt.step + 1
    if ckpt is not None:
        print("[rank %d] resumed after epoch %d" % (hvd.rank(), ckpt.step), flush=True)
    callbacks = [hvd.callbacks.CheckpointCallback(path), KillAt(kill_at)]
    if ckpt is None:
        callbacks.insert(0, hvd.callbacks.BroadcastGlobalVariablesCallback(0))
    model.fit(x, y, batch_size=BATCH, epochs=epochs, initial_epoch=start, shuffle=False,
              verbose=0, callbacks=callbacks)
    if powersgd:  # what was compressed, and how often (a checkpoint must carry it)
        print("[rank %d] powersgd steps %s" % (hvd.rank(), sorted(
            model.optimizer.compression_state()["steps"].values())), flush=True)
    if hvd.rank() == 0:
        np.savez(os.path.join(directory, "final-%s.npz" % tag), *model.get_weights())
    print("[rank %d] done" % hvd.rank(), flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    kill = int(args[args.index("--kill-at-epoch") + 1]) if "--kill-at-epoch" in args else -1
    main(args[0], args[1], int(args[2]), kill, "--powersgd" in args)
