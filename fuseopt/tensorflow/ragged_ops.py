"""fuseopt.tensorflow's row collectives: alltoall, reducescatter and the
grouped allgather and reducescatter, whose results have a different number
of rows than their inputs; differentiable with Horovod's definitions (ops.py
holds the others)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from ..api import ops as _np
from ..core import process_sets as _ps
from ..core import requests as _rq
from ..base.c_boundary import derived_name
from ..training.compression import NoneCompressor, as_compressor, one_payload_each
from ..base.errors import InvalidArgumentError
from . import _tensors as _t
from .ops import (Average, Sum, _allgather_raw, _grouped_allreduce_raw, _is_bool, _names,
                  _operand)
from .tf_errors import with_tf_errors

if TYPE_CHECKING:  # names used only in annotations
    from ..core.process_sets import ProcessSet


@with_tf_errors
def alltoall(tensor: Any, splits: Any = None, name: Optional[str] = None,
             ignore_name_scope: bool = False, process_set: Optional[ProcessSet] = None) -> Any:
    """Sends splits[r] rows to rank r (an even split if None). As in Horovod:
    returns the received tensor, and ``(received, received_splits)`` when
    ``splits`` is given; differentiable (the rows' gradients go back where
    the rows came from)."""
    tensor, name = _operand(tensor, name, "alltoall", process_set)
    # Any integer tensor or list, as Horovod's (int32 is common).
    splits = None if splits is None else tf.cast(tf.convert_to_tensor(splits), tf.int64)

    def exchange(x, splits, name):
        def fn(a, *s):
            out, recv = _rq.run_now(_np.alltoall_async, a, splits=s[0] if s else None,
                                    name=name, process_set=process_set)
            return [out, recv.astype(np.int32)]

        out, recv = _t.run(fn, [x] + ([splits] if splits is not None else []),
                           [x.dtype, tf.int32], "alltoall")
        out.set_shape([None] + x.shape.as_list()[1:])
        recv.set_shape([_ps.size_of(process_set)])
        return out, recv

    @tf.custom_gradient
    def send(x):
        out, recv = exchange(x, splits, name)

        def grad(dy, _d_recv=None):
            return exchange(dy, tf.cast(recv, tf.int64), derived_name(name, ".grad"))[0]
        return (out, recv), grad

    out, recv = send(tensor)
    return out if splits is None else (out, recv)


@with_tf_errors
def reducescatter(tensor: Any, device_dense: str = "", compression: Any = None,
                  op: Optional[int] = Average, name: Optional[str] = None,
                  process_set: Optional[ProcessSet] = None, ignore_name_scope: bool = False,
                  prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> Any:
    """Reduces across ranks; this rank gets its slice of the first dimension
    (Horovod's argument order). Differentiable as Horovod's: the gradient
    is the allgathered output gradient, times the ranks for Sum and times
    the scale factors. ``compression`` must send one payload per tensor
    (Compression.fp16, .bf16); the payload is negotiated under ``name``
    itself, as the PyTorch binding's, so that mixed jobs meet."""
    tensor, name = _operand(tensor, name, "reducescatter", process_set, rows=True)
    size = _ps.size_of(process_set)
    (payload,), (ctx,), restore = one_payload_each(_wire_compression(compression), [tensor],
                                                   [name], size)
    factor = prescale_factor * postscale_factor * (size if op == Sum else 1)

    @tf.custom_gradient
    def scatter(x):
        def fn(a):
            return [_rq.run_now(_np.reducescatter_async, a, name=name, op=op,
                                prescale_factor=prescale_factor,
                                postscale_factor=postscale_factor, process_set=process_set)]

        out = _t.run(fn, [x], [x.dtype], "reducescatter")[0]
        out.set_shape([None] + x.shape.as_list()[1:])

        def grad(dy):
            return _allgather_raw(dy * factor if factor != 1 else dy,
                                  derived_name(name, ".grad"), process_set)
        return out, grad

    return restore(scatter(payload), ctx)


def _wire_compression(compression):
    """A reducescatter's compressor: one that only changes the wire dtype."""
    if compression is None:
        return None
    compression = as_compressor(compression)
    if isinstance(compression, NoneCompressor):
        return None
    if compression.reduce_op is not None:
        raise InvalidArgumentError("%s changes the op; reducescatter takes Compression.fp16 "
                                   "or .bf16" % type(compression).__name__)
    return compression


def _gathered_rows(xs, name, process_set):
    """Per tensor of xs, the rows the ranks before this one hold (an
    allgather of every rank's row counts)."""
    local = tf.stack([tf.shape(x, out_type=tf.int64)[0] for x in xs])
    counts = tf.reshape(_allgather_raw(tf.reshape(local, [1, len(xs)]), name, process_set),
                        [-1, len(xs)])
    return tf.reduce_sum(counts[:_ps.rank_in(process_set)], axis=0), local


@with_tf_errors
def grouped_allgather(tensors: Sequence[Any], name: Optional[str] = None,
                      ignore_name_scope: bool = False,
                      process_set: Optional[ProcessSet] = None) -> List[Any]:
    """allgather of a list of tensors, submitted together and negotiated in
    one round. Differentiable as Horovod's: each gradient averaged over
    ranks, then this rank's rows."""
    tensors = list(tensors)
    if not tensors:
        return []
    if any(_is_bool(t) for t in tensors):  # as allgather: booleans travel as bytes
        gathered = grouped_allgather([tf.cast(t, tf.uint8) if _is_bool(t) else t
                                      for t in tensors], name, process_set=process_set)
        return [tf.cast(g, tf.bool) if _is_bool(t) else g for g, t in zip(gathered, tensors)]
    names = _names(len(tensors), name, "grouped_allgather")
    operands = [_operand(t, n, "allgather", process_set, rows=True)
                for t, n in zip(tensors, names)]
    names = [n for _, n in operands]

    @tf.custom_gradient
    def gather(*xs):
        def fn(*arrays):
            return _rq.run_now(_np.grouped_allgather_async, list(arrays), names, process_set)

        outs = _t.run(fn, xs, [x.dtype for x in xs], "grouped_allgather")
        for out, x in zip(outs, xs):
            out.set_shape([None] + x.shape.as_list()[1:])

        def grad(*dys):
            reduced = _grouped_allreduce_raw(list(dys), [derived_name(n, ".grad") for n in names],
                                             Average, 1.0, 1.0, process_set=process_set)
            before, rows = _gathered_rows(xs, derived_name(names[0], ".rows"), process_set)
            return [r[before[i]:before[i] + rows[i]] for i, r in enumerate(reduced)]
        return outs, grad

    return list(gather(*[x for x, _ in operands]))


@with_tf_errors
def grouped_reducescatter(tensors: Sequence[Any], device_dense: str = "",
                          compression: Any = None, op: Optional[int] = Average,
                          process_set: Optional[ProcessSet] = None, prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> List[Any]:
    """reducescatter of a list of tensors, submitted together, negotiated in
    one round and fused (Horovod's argument order; no name, as Horovod's).
    Differentiable as reducescatter."""
    tensors = list(tensors)
    if not tensors:
        return tensors
    names = _names(len(tensors), None, "grouped_reducescatter")
    operands = [_operand(t, n, "reducescatter", process_set, rows=True)
                for t, n in zip(tensors, names)]
    names = [n for _, n in operands]
    size = _ps.size_of(process_set)
    payloads, ctxs, restore = one_payload_each(_wire_compression(compression),
                                               [x for x, _ in operands], names, size)
    factor = prescale_factor * postscale_factor * (size if op == Sum else 1)

    @tf.custom_gradient
    def scatter(*xs):
        def fn(*arrays):
            return _rq.run_now(_np.grouped_reducescatter_async, list(arrays), names, op,
                               prescale_factor, postscale_factor, process_set)

        outs = _t.run(fn, xs, [x.dtype for x in xs], "grouped_reducescatter")
        for out, x in zip(outs, xs):
            out.set_shape([None] + x.shape.as_list()[1:])

        def grad(*dys):
            return [_allgather_raw(dy * factor if factor != 1 else dy, derived_name(n, ".grad"),
                                   process_set) for dy, n in zip(dys, names)]
        return outs, grad

    return [restore(out, ctx) for out, ctx in zip(scatter(*payloads), ctxs)]
