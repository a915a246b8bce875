"""fuseopt for Keras 3 (``import fuseopt.tensorflow.keras as hvd``)::

    hvd.init()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(1e-3)), loss=...)
    model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                               hvd.callbacks.MetricAverageCallback()])

Everything in ``fuseopt.tensorflow`` is available here too.
"""
from __future__ import annotations

from typing import Any, Optional
from .. import *  # noqa: F401,F403  (the same API as fuseopt.tensorflow)
# The Keras module's own argument order, in place of fuseopt.tensorflow's.
from ..wrappers.factory import DistributedOptimizer  # type: ignore[assignment]  # noqa: F401
from ..wrappers.factory import PartialDistributedOptimizer  # noqa: F401
from . import callbacks  # noqa: F401
# hvd.elastic.run, KerasState, the state callbacks. Not ``from . import``:
# the star import above already bound ``elastic`` to fuseopt.tensorflow's.
import importlib as _importlib
elastic = _importlib.import_module(__name__ + ".elastic")
from ...training.elastic import HostsUpdatedInterrupt  # noqa: F401
from ...training.checkpoint import CheckpointError  # noqa: F401
from .checkpoint import load_checkpoint, save_checkpoint  # noqa: F401

# Horovod's Keras module has its own collectives, with other argument orders
# than horovod.tensorflow's (``hvd.allreduce(value, "name")`` names the
# reduction here), so they are restated, not re-exported.
import inspect  # noqa: E402

import keras  # noqa: E402

from ...base.errors import UnsupportedError  # noqa: E402
from .. import ops as _tf_ops  # noqa: E402
from .. import ragged_ops as _tf_ragged_ops  # noqa: E402
from ..compression import Compression as _Compression  # noqa: E402
from ..wrappers.optimizer import (DistributedKerasOptimizer as _DistKeras,  # noqa: E402
                         DistributedLossScaleOptimizer as _DistLoss)

_DISTRIBUTED = (_DistKeras, _DistLoss)


def allreduce(  # type: ignore[no-redef]  # restated: Keras's argument order
        value: Any, name: Optional[str] = None, average: Optional[bool] = None,
        prescale_factor: float = 1.0, postscale_factor: float = 1.0,
        op: Optional[int] = None, compression: Any = _Compression.none) -> Any:
    """Reduces ``value`` (a tensor, array or number) across ranks: Average by
    default. Horovod's Keras signature: ``name`` is the second argument."""
    return _tf_ops.allreduce(value, average=average, compression=compression, op=op,
                             prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                             name=name)


def allgather(  # type: ignore[no-redef]  # restated: Keras's argument order
        value: Any, name: Optional[str] = None) -> Any:
    """Concatenates every rank's ``value`` along the first dimension."""
    return _tf_ops.allgather(value, name=name)


def broadcast(  # type: ignore[no-redef]  # restated: Keras's argument order
        value: Any, root_rank: int, name: Optional[str] = None) -> Any:
    """root_rank's ``value`` on every rank."""
    return _tf_ops.broadcast(value, root_rank, name=name)


def reducescatter(  # type: ignore[no-redef]  # restated: Keras's argument order
        value: Any, name: Optional[str] = None,
        op: Optional[int] = _tf_ops.Average) -> Any:
    """Reduces across ranks; this rank gets its slice of the first dimension."""
    return _tf_ragged_ops.reducescatter(value, op=op, name=name)


def load_model(filepath: str, custom_optimizers: Any = None, custom_objects: Any = None,
               compression: Any = _Compression.none, legacy_opts: bool = False) -> Any:
    """Horovod's: loads a saved Keras model and wraps its optimizer in a
    DistributedOptimizer with ``compression`` (one saved with a
    DistributedOptimizer comes back wrapped already). ``custom_optimizers``:
    optimizer classes the file refers to by name."""
    if legacy_opts:
        raise UnsupportedError("load_model(legacy_opts=True): Keras 3 has no legacy optimizers")
    objects = dict(custom_objects or {})
    objects.update({cls.__name__: cls for cls in custom_optimizers or ()})
    model = keras.models.load_model(filepath, custom_objects=objects)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and not isinstance(optimizer, _DISTRIBUTED):
        model.optimizer = DistributedOptimizer(optimizer, compression=compression)
    return model


def _exported(name: str, value: Any) -> bool:
    """Part of the API: not private, not a typing helper, not a module other
    than ``callbacks`` (``keras``, and the submodules imported above)."""
    if name.startswith("_") or getattr(value, "__module__", None) in ("typing", "__future__"):
        return False
    return not inspect.ismodule(value) or name == "callbacks"


# What ``from fuseopt.tensorflow.keras import *`` and the API checks see.
__all__ = sorted(n for n, v in list(globals().items()) if _exported(n, v))
