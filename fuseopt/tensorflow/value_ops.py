"""Horovod's ``*_op`` functions (``rank_op``, ``size_op``, ...): ops whose
value is read when they run, not when the graph is traced, so that a
``tf.function`` traced before an elastic reset sees the new world. Eagerly
they give the value at once, as an int32 scalar tensor."""
from typing import Any, Callable, Optional

import numpy as np
import tensorflow as tf

from ..core import requests as _rq
from ..core import world
from ..base.errors import FuseoptError, NotInitializedError

# process_set_included_op's error codes: Horovod's values.
PROCESS_SET_ERROR_INIT = -1
PROCESS_SET_ERROR_UNKNOWN_SET = -3


def _value_op(read: Callable[[], int], name: Optional[str]) -> Any:
    def value():
        return np.int32(read())

    if tf.executing_eagerly():
        return tf.constant(value(), dtype=tf.int32)
    out = tf.numpy_function(value, [], tf.int32, stateful=True, name=name or "fuseopt_value")
    out.set_shape([])
    return out


def rank_op(name: Optional[str] = None) -> Any:
    """This process's rank, read when the op runs."""
    return _value_op(world.rank, name)


def local_rank_op(name: Optional[str] = None) -> Any:
    """This process's rank on its node, read when the op runs."""
    return _value_op(world.local_rank, name)


def local_size_op(name: Optional[str] = None) -> Any:
    """The number of ranks on this node, read when the op runs."""
    return _value_op(world.local_size, name)


def size_op(process_set_id: int = 0, name: Optional[str] = None) -> Any:
    """The number of ranks (of the process set with this id), read when the
    op runs."""
    return _value_op(lambda: _rq.set_info(process_set_id)[1], name)


def process_set_included_op(process_set_id: int = 0, name: Optional[str] = None) -> Any:
    """1 if this rank belongs to the process set with this id, 0 if not; as
    Horovod's, -1 before init() and -3 for an id that names no set."""
    def included():
        try:
            rank, _ = _rq.set_info(process_set_id)
        except NotInitializedError:
            return PROCESS_SET_ERROR_INIT
        except FuseoptError:
            return PROCESS_SET_ERROR_UNKNOWN_SET
        return int(rank >= 0)

    return _value_op(included, name)
