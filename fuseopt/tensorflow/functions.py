"""Making every rank start from the same variables, and Python objects
sent between ranks (Horovod's horovod/tensorflow/functions.py)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, List, Optional
import numpy as np
import tensorflow as tf

from ..training import naming
from ..api import objects as _objects
from ..api import ops as _np
from ..base.errors import InvalidArgumentError, UnsupportedError
from ..core import process_sets as _ps
from . import ops
from .tf_errors import with_tf_errors

if TYPE_CHECKING:  # names used only in annotations
    from ..core.process_sets import ProcessSet


def _var_name(v, i):
    return "broadcast.var.%s" % (getattr(v, "path", None) or getattr(v, "name", "var%d" % i))


@with_tf_errors
def broadcast_variables(variables: Any, root_rank: int = 0,
                        process_set: Optional[ProcessSet] = None, inplace: bool = False,
                        name_map: Any = None) -> Any:
    """Assigns root_rank's values to ``variables`` on every rank (Keras
    variables or tf.Variables). Eagerly, all broadcasts are submitted at once
    so they fuse; inside tf.function they are graph ops.

    ``name_map`` (mixed PyTorch/TensorFlow jobs, see docs/mixed.md): maps each
    variable's path to a shared name or ``fuseopt.Shared(name, perm)``, so a
    PyTorch rank's ``broadcast_parameters(..., name_map=...)`` can be the root
    or a receiver. Eager only; the ranks first check together that they agree
    on every shared tensor. ``process_set``: only its members take part
    (root_rank is a global rank). ``inplace`` (Horovod's choice between its
    two kernels) changes nothing here: the variables are assigned either way."""
    _ps.id_of(process_set)
    variables = list(variables)
    if name_map is not None:
        return _broadcast_mapped(variables, root_rank, name_map, process_set)
    names = [_var_name(v, i) for i, v in enumerate(variables)]
    if len(set(names)) != len(names):
        names = ["broadcast.var.%d" % i for i in range(len(variables))]
    if not tf.executing_eagerly():
        return tf.group(*[v.assign(ops.broadcast(v, root_rank, name=n, process_set=process_set))
                          for v, n in zip(variables, names)])
    handles = [_np.broadcast_async(_as_bytes_if_bool(v.numpy()), root_rank, name=n,
                                   process_set=process_set)
               for v, n in zip(variables, names)]
    for v, h in zip(variables, handles):
        out = h.wait()
        v.assign(out.astype(bool) if v.dtype == tf.bool else out)
    return None


def _as_bytes_if_bool(value):
    """Booleans travel as bytes, as in ops.broadcast (nothing is reduced)."""
    return value.view(np.uint8) if value.dtype == np.bool_ else value


@with_tf_errors
def broadcast_(variables: Any, root_rank: int, name: Optional[str] = None,
               process_set: Optional[ProcessSet] = None) -> Any:
    """Horovod's in-place broadcast: assigns root_rank's values to
    ``variables`` and returns their new values. ``name`` prefixes the
    negotiation names (each variable's own name follows)."""
    variables = list(variables)
    if name is None or not tf.executing_eagerly():
        assigned = broadcast_variables(variables, root_rank, process_set=process_set)
    else:
        assigned = broadcast_variables(variables, root_rank, process_set=process_set,
                                       name_map={variable_path(v): "%s.%d" % (name, i)
                                                 for i, v in enumerate(variables)})
    # In a graph the values read must come after the assignments (eagerly
    # they already have: broadcast_variables returns None).
    with tf.control_dependencies([assigned] if assigned is not None else []):
        return [v.read_value() if hasattr(v, "read_value") else tf.convert_to_tensor(v)
                for v in variables]


def broadcast_global_variables(root_rank: int) -> Any:
    """Horovod's TF1 call: in a graph (``tf.compat.v1``, eager execution
    off), the op that assigns root_rank's values to every global variable.
    As in Horovod, eagerly (TF2) it cannot work: there are no global
    variables to collect."""
    if not tf.executing_eagerly():
        return broadcast_variables(tf.compat.v1.global_variables(), root_rank)
    raise UnsupportedError(
        "hvd.broadcast_global_variables() does not support eager execution (TF2); use "
        "hvd.broadcast_variables(model.variables + optimizer.variables, root_rank) or, with "
        "Keras, hvd.callbacks.BroadcastGlobalVariablesCallback(root_rank)")


class BroadcastGlobalVariablesHook:
    """Horovod's TF1 ``tf.estimator`` hook. TensorFlow 2 has neither
    estimators nor session hooks (Horovod does not define it there either);
    making one says what to use instead."""

    def __init__(self, root_rank: int, device: str = "") -> None:
        raise UnsupportedError(
            "BroadcastGlobalVariablesHook is a TF1 SessionRunHook for tf.estimator, which "
            "TensorFlow 2 no longer has; use hvd.broadcast_variables(model.variables + "
            "optimizer.variables, root_rank) after the first step, or with Keras "
            "hvd.callbacks.BroadcastGlobalVariablesCallback(root_rank)")


def variable_path(v):
    """The name a name_map knows a variable by: its Keras path
    (``"model/dense/kernel"``), or a tf.Variable's name without ``:0``;
    None for a source without either."""
    path = getattr(v, "path", None) or getattr(v, "name", None)
    return None if path is None else str(path).split(":")[0]


def _broadcast_mapped(variables, root_rank, name_map, process_set):
    if not tf.executing_eagerly():
        raise InvalidArgumentError("broadcast_variables(name_map=...) runs eagerly; call it "
                                   "outside tf.function")
    shared = [naming.Shared(naming.BROADCAST_PREFIX + s.name, s.perm)
              for s in naming.resolve(name_map, [variable_path(v) for v in variables])]
    values = [v.numpy() if s.perm is None else np.ascontiguousarray(v.numpy().transpose(s.perm))
              for v, s in zip(variables, shared)]
    naming.verify_agreement({s.name: (x.shape, x.dtype.name) for s, x in zip(shared, values)},
                            "broadcast_variables", process_set)
    handles = [_np.broadcast_async(x, root_rank, name=s.name, process_set=process_set)
               for s, x in zip(shared, values)]
    for v, s, h in zip(variables, shared, handles):
        x = h.wait()
        v.assign(x if s.perm is None else x.transpose(s.inverse))
    return None


@with_tf_errors
def broadcast_object(obj: Any, root_rank: int = 0, session: Any = None,
                     name: Optional[str] = None,
                     process_set: Optional[ProcessSet] = None) -> Any:
    """root_rank's picklable ``obj`` on every rank (of ``process_set``).
    ``session`` (Horovod's, for TF1 graphs) is accepted and not needed: the
    object travels through the core directly, outside any graph."""
    return _objects.broadcast_object(obj, root_rank, name=name, process_set=process_set)


def broadcast_object_fn(root_rank: int = 0, session: Any = None, name: Optional[str] = None,
                        process_set: Optional[ProcessSet] = None) -> Callable[[Any], Any]:
    """Horovod's: a function ``f(obj)`` that broadcasts ``obj`` from
    root_rank each time it is called (Horovod builds its graph ops once for a
    TF1 session; here every call is an eager ``broadcast_object``)."""
    _ps.id_of(process_set)
    name = name or "broadcast_object_fn"

    def broadcast(obj: Any) -> Any:
        return broadcast_object(obj, root_rank, name=name, process_set=process_set)
    return broadcast


@with_tf_errors
def allgather_object(obj: Any, session: Any = None, name: Optional[str] = None,
                     process_set: Optional[ProcessSet] = None) -> List[Any]:
    """Every rank's picklable ``obj``, as a list in rank order. ``session``:
    as in broadcast_object."""
    return _objects.allgather_object(obj, name=name, process_set=process_set)
