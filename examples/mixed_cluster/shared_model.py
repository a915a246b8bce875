"""What both halves of the mixed job agree on: the MLP's shape, the shared
tensor names, the data shards and the schedule. Framework-neutral (NumPy)."""
import numpy as np
from sklearn.datasets import load_digits

HIDDEN = 64
CLASSES = 10
BATCH = 32          # per rank
EPOCHS = 8
LR = 0.2
ROOT = 0            # the rank whose initial weights everyone starts from

# Shared names, in the shared layout [in, out] (Keras's Dense layout).
SHARED = ["fc1.kernel", "fc1.bias", "fc2.kernel", "fc2.bias"]


def load(rank, size):
    """This rank's training shard and the common validation set."""
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], y[order].astype(np.int64)
    x_train, y_train, x_val, y_val = x[:1400], y[:1400], x[1400:], y[1400:]
    return x_train[rank::size], y_train[rank::size], x_val, y_val
