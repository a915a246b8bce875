"""fuseopt for Keras 3 (``import fuseopt.tensorflow.keras as hvd``)::

    hvd.init()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(1e-3)), loss=...)
    model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                               hvd.callbacks.MetricAverageCallback()])

Everything in ``fuseopt.tensorflow`` is available here too.
"""
from .. import *  # noqa: F401,F403  (the same API as fuseopt.tensorflow)
from .. import DistributedOptimizer  # noqa: F401
from . import callbacks  # noqa: F401
from ...checkpoint import CheckpointError  # noqa: F401
from .checkpoint import load_checkpoint, save_checkpoint  # noqa: F401
