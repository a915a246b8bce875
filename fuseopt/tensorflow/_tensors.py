"""TensorFlow tensors as fuseopt buffers.

Eager tensors are handed to the numpy layer directly. Inside a graph
(tf.function, Keras model.fit) the collective runs in a ``tf.numpy_function``;
all fuseopt ops of one graph are chained by control dependencies so that they
run in the order they were created, which is the same on every rank (TF would
otherwise be free to run independent ops in a different order per rank, and
two blocking collectives taken in different orders deadlock). XLA cannot run
Python, so ``jit_compile=True`` gets a clear error instead of an obscure one.
"""
import contextlib
import itertools
import weakref
from typing import Any, Dict

import numpy as np
import tensorflow as tf
from tensorflow.python.ops import control_flow_util

from ..api import ops as _np
from ..base.dtypes import CODES
from ..base.errors import FuseoptError, InvalidArgumentError, UnsupportedError
from ..core import output_pool
from ..core.requests import WIRE_AS_IS
from ..training import buckets
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


# -- Graph mode: result arrays reused between executions, and allreduces
# started bucket by bucket while backward runs.

class ResultBuffers:
    """Result arrays of one graph op, reused from one execution to the next.

    A fresh result array per step costs more than the copy into it (first-touch
    page faults: ~10 ms per step for an 8.4M-parameter model here).
    tf.numpy_function copies what the function returns into its output tensor,
    so the array is free again once the op has run; should a TensorFlow version
    keep a reference instead, output_pool.unshared sees it and a new array is
    made."""

    def __init__(self, n):
        self._arrays = [None] * n

    def take(self, inputs):
        out = []
        for i, x in enumerate(inputs):
            a = self._arrays[i]  # held by self._arrays and the name a, when free
            if a is None or a.shape != x.shape or a.dtype != x.dtype or \
                    not output_pool.unshared(a):
                a = self._arrays[i] = np.empty(x.shape, x.dtype)
            out.append(a)
        return out


# Graph mode, started buckets: token -> GroupHandle, until the waiting op
# takes it (see started_allreduce).
_in_flight: Dict[Any, Any] = {}
_tokens = itertools.count(1)


def _finish_abandoned(token):
    """An execution that stopped between a bucket's start and the wait (an
    error elsewhere in the step, an interrupt) leaves the bucket in flight,
    and its names with it: the next start of that bucket would be refused.
    The other ranks started it too (starting never blocks), so it completes;
    wait for it and drop the result."""
    handle = _in_flight.pop(token, None)
    if handle is not None:
        try:
            handle.wait()
        except FuseoptError:
            pass  # that step's error was raised back then


def started_allreduce(tensors, names, op, prescale, postscale, bucket_cap, meter,
                       process_set=None, wire=WIRE_AS_IS):
    """Graph mode with overlap: the list is cut into buckets of about
    ``bucket_cap`` bytes in the order backward produces gradients (the
    reverse of the variables'), one op per bucket only *starts* its
    allreduce, as soon as that bucket's tensors exist, and one op waits for
    all of them. Communication then runs on fuseopt's thread while TensorFlow
    computes the rest of backward. Starting never blocks, so the start ops
    need no fixed order across ranks; the waiting op keeps its place in the
    chain of blocking fuseopt ops (_tensors.run)."""
    sizes = [(t.shape.num_elements() or 0) * t.dtype.size for t in tensors]
    backward = list(range(len(tensors)))[::-1]
    plan = [[backward[k] for k in b] for b in buckets.split([sizes[i] for i in backward],
                                                            bucket_cap)]
    tokens = []
    for bucket in plan:
        bucket_names = [names[i] for i in bucket]
        outputs = ResultBuffers(len(bucket))
        last = []  # this op's previous token

        def start(*arrays, bucket_names=bucket_names, outputs=outputs, last=last):
            if last:
                _finish_abandoned(last.pop())
            handle = _np.submit_grouped_allreduce(list(arrays), bucket_names, op, prescale,
                                                  postscale, False, outputs.take(arrays),
                                                  process_set, wire)
            token = next(_tokens)
            _in_flight[token] = handle
            last.append(token)
            return [np.array(token, np.int64)]

        tokens += run(start, [tensors[i] for i in bucket], [tf.int64], "allreduce_start",
                      blocking=False)

    def finish(*started):
        handles = [_in_flight.pop(int(k)) for k in started]
        with meter.waiting() if meter is not None else contextlib.nullcontext():
            return [r for h in handles for r in h.wait()]

    order = [i for bucket in plan for i in bucket]
    outs = run(finish, tokens, [tensors[i].dtype for i in order], "allreduce_wait")
    result = [None] * len(tensors)
    for i, o in zip(order, outs):
        result[i] = o
    return result
