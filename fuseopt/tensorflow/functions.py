"""Making every rank start from the same variables."""
import tensorflow as tf

from .. import ops as _np
from . import ops


def _var_name(v, i):
    return "broadcast.var.%s" % (getattr(v, "path", None) or getattr(v, "name", "var%d" % i))


def broadcast_variables(variables, root_rank=0, process_set=None):
    """Assigns root_rank's values to ``variables`` on every rank (Keras
    variables or tf.Variables). Eagerly, all broadcasts are submitted at once
    so they fuse; inside tf.function they are graph ops."""
    variables = list(variables)
    names = [_var_name(v, i) for i, v in enumerate(variables)]
    if len(set(names)) != len(names):
        names = ["broadcast.var.%d" % i for i in range(len(variables))]
    if not tf.executing_eagerly():
        return tf.group(*[v.assign(ops.broadcast(v, root_rank, name=n))
                          for v, n in zip(variables, names)])
    handles = [_np.broadcast_async(v.numpy(), root_rank, name=n) for v, n in zip(variables, names)]
    for v, h in zip(variables, handles):
        v.assign(h.wait())
    return None
