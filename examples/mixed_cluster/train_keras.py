"""The Keras half of a mixed job (see train_torch.py for how to start it)."""
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import fuseopt.tensorflow.keras as hvd  # noqa: E402
from shared_model import BATCH, CLASSES, EPOCHS, HIDDEN, LR, ROOT, load  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(1)
hvd.init()
x, y, x_val, y_val = load(hvd.rank(), hvd.size())
steps = min(hvd.allgather_object(len(x) // BATCH))

model = keras.Sequential([keras.Input((64,)),
                          keras.layers.Dense(HIDDEN, activation="relu", name="fc1"),
                          keras.layers.Dense(CLASSES, name="fc2")], name="mlp")
# Keras variable paths -> shared names; Dense kernels are already [in, out].
name_map = {"mlp/fc1/kernel": "fc1.kernel", "mlp/fc1/bias": "fc1.bias",
            "mlp/fc2/kernel": "fc2.kernel", "mlp/fc2/bias": "fc2.bias"}


class Progress(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.t0 = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        acc = (np.argmax(self.model(x_val).numpy(), 1) == y_val).mean()
        print("[rank %d, Keras]   epoch %d  loss %.3f  val acc %.3f  %.0f samples/s"
              % (hvd.rank(), epoch + 1, logs["loss"], acc,
                 steps * BATCH / (time.perf_counter() - self.t0)), flush=True)


model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR), name_map=name_map),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x[:steps * BATCH], y[:steps * BATCH], batch_size=BATCH, epochs=EPOCHS,
          shuffle=False, verbose=0,
          callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(ROOT, name_map=name_map),
                     Progress()])

weights = {"fc1.kernel": model.get_layer("fc1").kernel.numpy(),
           "fc2.kernel": model.get_layer("fc2").kernel.numpy()}
every = hvd.allgather_object(weights)
drift = max(float(np.abs(w[k] - weights[k]).max()) for w in every for k in weights)
print("[rank %d, Keras]   largest weight difference to any rank: %.2g" % (hvd.rank(), drift),
      flush=True)
hvd.shutdown()
