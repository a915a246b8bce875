"""TensorFlow tensors as fuseopt buffers.

Eager tensors are handed to the numpy layer directly. Inside a graph
(tf.function, Keras model.fit) the collective runs in a ``tf.numpy_function``;
all fuseopt ops of one graph are chained by control dependencies so that they
run in the order they were created, which is the same on every rank (TF would
otherwise be free to run independent ops in a different order per rank, and
two blocking collectives taken in different orders deadlock). XLA cannot run
Python, so ``jit_compile=True`` gets a clear error instead of an obscure one.
"""
import itertools
import weakref

import numpy as np
import tensorflow as tf
from tensorflow.python.ops import control_flow_util

from ..base.dtypes import CODES
from ..base.errors import FuseoptError, InvalidArgumentError, UnsupportedError
from . import kernels
from .tf_errors import graph_status

_SUPPORTED = set(CODES)  # the core's dtype names, which are TensorFlow's too
_trace_names = itertools.count()
_last_op = weakref.WeakKeyDictionary()  # graph -> last fuseopt op created in it
_used_names = weakref.WeakKeyDictionary()  # graph -> {negotiation name: times used}


def dtype_name(tensor):
    name = tf.as_dtype(tensor.dtype).name
    if name not in _SUPPORTED:
        raise InvalidArgumentError("tensor of dtype %s cannot be reduced; supported: %s"
                                   % (name, ", ".join(sorted(_SUPPORTED))))
    return name


def check_not_xla(what):
    graph = tf.compat.v1.get_default_graph()
    if control_flow_util.GraphOrParentsInXlaContext(graph):
        raise UnsupportedError(
            "fuseopt %s cannot run inside XLA (jit_compile=True): its collectives run on the "
            "host through tf.numpy_function. Compile with jit_compile=False (Keras: "
            "model.compile(..., jit_compile=False); tf.function(jit_compile=False))." % what)


def graph_name(name, kind):
    """A name fixed at trace time, so every execution of the op (and every
    rank, tracing the same program) uses the same negotiation key."""
    return name if name is not None else "tf.%s.%d" % (kind, next(_trace_names))


def unique_in_graph(names):
    """Negotiation names for ops built into the current graph: a name the
    graph already holds gets a ``.<k>`` suffix (two tape.gradient calls in
    one tf.function or TF1 graph may run at once, and one name cannot be in
    flight twice). Every rank traces the same program, so every rank picks
    the same suffixes; the first use keeps the name itself (a mixed job's
    shared names are unchanged). Eagerly, names are returned as they are."""
    if tf.executing_eagerly():
        return list(names)
    used = _used_names.setdefault(tf.compat.v1.get_default_graph(), {})
    out = []
    for name in names:
        if name is None:
            out.append(None)
            continue
        k = used.get(name, 0)
        used[name] = k + 1
        out.append(name if k == 0 else "%s.%d" % (name, k))
    return out


def _returning_status(fn, out_dtypes):
    """fn returning its outputs plus (status code, message) instead of
    raising a fuseopt error, which the status kernel then raises with the
    TensorFlow class Horovod's ops give."""
    def call(*arrays):
        try:
            return list(fn(*arrays)) + [np.int32(0), b""]
        except FuseoptError as e:
            code, message = graph_status(e)
            empty = [np.zeros(0, tf.as_dtype(d).as_numpy_dtype) for d in out_dtypes]
            return empty + [np.int32(code), message.encode("utf-8", "replace")]
    return call


def chained(build, what):
    """build() makes one graph op and returns its outputs: in a graph, the op
    runs after the graph's last fuseopt op and becomes the last one (the
    same order on every rank); eagerly, build() runs now."""
    if tf.executing_eagerly():
        return build()
    check_not_xla(what)
    graph = tf.compat.v1.get_default_graph()
    previous = _last_op.get(graph)
    with tf.control_dependencies([previous] if previous is not None else []):
        outs = build()
    _last_op[graph] = outs[0].op
    return outs


def run(fn, inputs, out_dtypes, what, blocking=True):
    """Runs fn(*numpy_arrays) -> list of arrays, eagerly or as a graph op.
    An op that only enqueues (blocking=False) can run in any order relative
    to the others, so it stays out of their chain and runs as soon as its
    inputs exist."""
    if tf.executing_eagerly():
        return [tf.convert_to_tensor(o) for o in fn(*[np.asarray(t) for t in inputs])]
    check_not_xla(what)
    graph = tf.compat.v1.get_default_graph()
    previous = _last_op.get(graph) if blocking else None
    kernel = kernels.status_kernel()
    body, dtypes = (fn, list(out_dtypes)) if kernel is None else (
        _returning_status(fn, out_dtypes), list(out_dtypes) + [tf.int32, tf.string])
    with tf.control_dependencies([previous] if previous is not None else []):
        outs = tf.numpy_function(body, list(inputs), dtypes, stateful=True, name="fuseopt_" + what)
        if kernel is not None:
            outs = kernel.fuseopt_check_status(outs[-2], outs[-1], outs[:-2],
                                               name="fuseopt_%s_status" % what)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    if outs and blocking:
        _last_op[graph] = outs[0].op
    return outs
