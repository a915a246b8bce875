"""Collectives on TensorFlow tensors, eager and inside tf.function.

Horovod's names and signatures. ``allreduce``, ``allgather`` and
``broadcast`` have gradients (tf.custom_gradient), so they can sit inside a
model. ``grouped_allreduce`` negotiates a list in one step so it fuses.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional, Sequence
import contextlib

import numpy as np
import tensorflow as tf

from ..api import ops as _np
from ..base.c_boundary import derived_name
from ..training.compression import as_compressor, on_wire
from ..core.requests import WIRE_AS_IS
from ..core import world
from ..base.errors import InvalidArgumentError, UnsupportedError
from . import _tensors as _t
from ._tensors import ResultBuffers, started_allreduce as _started_allreduce
from ..core import process_sets as _ps
from ..core import requests as _rq
from ..training.compression import reducing_over
from ..training.powersgd import finish_rounds, regroup
from .compression import NoneCompressor
from .tf_errors import with_tf_errors

if TYPE_CHECKING:  # names used only in annotations
    from ..core.process_sets import ProcessSet

Sum, Average, Min, Max, Product = _np.Sum, _np.Average, _np.Min, _np.Max, _np.Product
Adasum = _np.Adasum
_OP_NAMES = {Min: "Min", Max: "Max", Product: "Product", Adasum: "Adasum"}


def _grouped_allreduce_raw(tensors, names, op, prescale, postscale, meter=None,
                           bucket_cap=None, process_set=None, wire=WIRE_AS_IS):
    """One numpy call for the whole list: all enqueued, then all waited
    (inside ``meter.waiting()`` when given: the train step blocks on it).
    In a graph with ``bucket_cap`` (bytes), buckets start as soon as their
    tensors exist instead (_started_allreduce). ``wire``: float32 tensors
    travel as a 16-bit float (compression.on_wire)."""
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    dtypes = [t.dtype for t in tensors]
    for t in tensors:
        _t.dtype_name(t)
    if bucket_cap is not None and tensors and not tf.executing_eagerly():
        outs = _started_allreduce(tensors, names, op, prescale, postscale, bucket_cap, meter,
                                  process_set, wire)
        for o, t in zip(outs, tensors):
            o.set_shape(t.shape)
        return outs

    # Eager results are handed out as they are, so only graph ops reuse theirs.
    outputs = None if tf.executing_eagerly() else ResultBuffers(len(tensors))

    def fn(*arrays):
        with meter.waiting() if meter is not None else contextlib.nullcontext():
            return _rq.run_now(_np.submit_grouped_allreduce, list(arrays), names, op, prescale,
                               postscale, False, outputs.take(arrays) if outputs else None,
                               process_set, wire)

    outs = _t.run(fn, tensors, dtypes, "allreduce")
    for o, t in zip(outs, tensors):
        o.set_shape(t.shape)
    return outs


def _names(n, name, kind):
    if tf.executing_eagerly():
        if name is None:
            return [None] * n
        return [derived_name(name, "")] if n == 1 else \
            [derived_name(name, ".%d" % i) for i in range(n)]
    base = _t.graph_name(name, kind)
    return [base] if n == 1 else ["%s.%d" % (base, i) for i in range(n)]


def _is_bool(tensor):
    """A boolean tensor, variable (TF1's reference dtype ``bool_ref`` too),
    array or list."""
    dtype = getattr(tensor, "dtype", None)
    if dtype is not None:
        try:
            return tf.as_dtype(dtype).base_dtype == tf.bool
        except TypeError:
            return False
    return isinstance(tensor, (list, tuple, bool)) and np.asarray(tensor).dtype == bool


def _operand(tensor, name, kind, process_set, rows=False):
    """A single-tensor collective's tensor and negotiation name, after the
    checks each makes first (set, dtype; ``rows``: at least one dimension)."""
    _ps.id_of(process_set)
    tensor = tf.convert_to_tensor(tensor)
    _t.dtype_name(tensor)
    if rows and tensor.shape.rank == 0:
        raise InvalidArgumentError("%s needs a tensor with at least one dimension" % kind)
    return tensor, _names(1, name, kind)[0]


@with_tf_errors
def grouped_allreduce(tensors: Sequence[Any], average: Optional[bool] = None,
                      device_dense: str = "", device_sparse: str = "",
                      compression: Any = None, op: Optional[int] = None,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      process_set: Optional[ProcessSet] = None,
                      ignore_name_scope: bool = False,
                      name: Optional[str] = None) -> List[Any]:
    """Allreduces a list of tensors together (one negotiation, fused).
    tf.IndexedSlices among them are allgathered, as ``allreduce`` does."""
    _ps.id_of(process_set)
    tensors = list(tensors)
    if not tensors:
        return tensors
    op = _np.resolve_op(average, op)
    names = _names(len(tensors), name, "grouped_allreduce")
    out: List[Any] = [None] * len(tensors)
    dense = []
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            out[i] = _allreduce_slices(t, op, prescale_factor, postscale_factor, names[i],
                                       process_set)
        else:
            dense.append(i)
    if dense:
        reduced = allreduce_named([tensors[i] for i in dense], [names[i] for i in dense], op,
                                  compression, prescale_factor, postscale_factor,
                                  process_set=process_set)
        for i, r in zip(dense, reduced):
            out[i] = r
    return out


def allreduce_named(tensors, names, op, compression=None, prescale_factor=1.0,
                    postscale_factor=1.0, meter=None, bucket_cap=None, process_set=None):
    """grouped_allreduce with explicit negotiation names (None: automatic),
    differentiable, with optional compression (payload names get '.k');
    meter: an overlap.OverlapMeter timing the wait; bucket_cap: bytes per
    early-started bucket in graphs (None: one op for the whole list);
    process_set: the set the list is reduced in (its gradient too)."""
    if compression is not None:
        compression = as_compressor(compression)
    if compression is not None and getattr(compression, "reduce_op", None) is not None:
        op = compression.reduce_op
    wire = on_wire(compression) if compression is not None else WIRE_AS_IS
    if wire and all(tf.as_dtype(t.dtype) == tf.float32 for t in tensors):
        # The core casts on its copies: the bits of compress and decompress
        # without their two passes over every tensor.
        compression = None
    else:
        wire = WIRE_AS_IS
    if compression is not None and not isinstance(compression, NoneCompressor):
        # Compressors that sum divide by the ranks reduced over: the set's
        # (read in compress, carried to decompress in ctx).
        with reducing_over(_ps.size_of(process_set)):
            packed = [compression.compress_payloads(t, n) for t, n in zip(tensors, names)]
        payloads = [p for ps, _ in packed for p in ps]
        payload_names = [n if (k == 0 or n is None) else "%s.%d" % (n, k)
                         for (ps, _), n in zip(packed, names) for k in range(len(ps))]
        reduced = allreduce_named(payloads, payload_names, op, None, prescale_factor,
                                  postscale_factor, meter, bucket_cap, process_set)
        firsts = list(zip(regroup(reduced, [ps for ps, _ in packed]), [c for _, c in packed]))

        def reduce_round(positions, lists, round_):
            # Further rounds (PowerSGD's second) in one grouped op, named by round.
            flat = [p for ps in lists for p in ps]
            flat_names = [None if names[j] is None else "%s.round%d.%d" % (names[j], round_, k)
                          for j, ps in zip(positions, lists) for k in range(len(ps))]
            return regroup(allreduce_named(flat, flat_names, op, None, prescale_factor,
                                           postscale_factor, meter, None, process_set), lists)
        return finish_rounds(compression, firsts, reduce_round)

    @tf.custom_gradient
    def reduce(*xs):
        outs = _grouped_allreduce_raw(xs, names, op, prescale_factor, postscale_factor, meter,
                                      bucket_cap, process_set, wire)

        def grad(*dys):
            grad_names = [None if n is None else n + ".grad" for n in names]
            return _grouped_allreduce_raw(dys, grad_names, op, prescale_factor, postscale_factor,
                                          process_set=process_set, wire=wire)
        return outs, grad

    return list(reduce(*tensors))


@with_tf_errors
def allreduce(tensor: Any, average: Optional[bool] = None, device_dense: str = "",
              device_sparse: str = "", compression: Any = None, op: Optional[int] = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              name: Optional[str] = None, process_set: Optional[ProcessSet] = None,
              ignore_name_scope: bool = False) -> Any:
    """Reduces ``tensor`` across ranks (Average by default). IndexedSlices are
    allgathered (values and indices) as in Horovod."""
    _ps.id_of(process_set)
    if isinstance(tensor, tf.IndexedSlices):
        return _allreduce_slices(tensor, _np.resolve_op(average, op), prescale_factor,
                                 postscale_factor, name, process_set)
    return grouped_allreduce([tensor], average, compression=compression, op=op,
                             prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                             name=name, process_set=process_set)[0]


def _allreduce_slices(tensor, op, prescale_factor, postscale_factor, name, process_set):
    """IndexedSlices are allgathered (values and indices), as in Horovod.
    Allgathered rows can only be summed (or averaged) and are not scaled:
    as Horovod, anything else is refused, not approximated."""
    if op not in (Sum, Average):
        raise UnsupportedError("allreduce of tf.IndexedSlices supports op=Sum or Average "
                               "only, not %s; densify the gradient first (sparse_as_dense="
                               "True, or tf.convert_to_tensor)" % _OP_NAMES.get(op, op))
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise UnsupportedError("allreduce of tf.IndexedSlices does not support "
                               "prescale_factor or postscale_factor; densify the gradient "
                               "first (sparse_as_dense=True, or tf.convert_to_tensor)")
    values = allgather(tensor.values, name=derived_name(name, ".values"),
                       process_set=process_set)
    indices = allgather(tensor.indices, name=derived_name(name, ".indices"),
                        process_set=process_set)
    if op == Average:
        values = values / _ps.size_of(process_set)
    return tf.IndexedSlices(values, indices, dense_shape=tensor.dense_shape)


def _allgather_raw(tensor, name, process_set=None):
    def fn(a):
        return [_rq.run_now(_np.allgather_async, a, name=name, process_set=process_set)]

    out = _t.run(fn, [tensor], [tensor.dtype], "allgather")[0]
    out.set_shape([None] + tensor.shape.as_list()[1:])
    return out


@with_tf_errors
def allgather(tensor: Any, name: Optional[str] = None, ignore_name_scope: bool = False,
              process_set: Optional[ProcessSet] = None) -> Any:
    """Concatenates every rank's tensor along the first dimension."""
    if _is_bool(tensor):  # as Horovod: nothing is reduced, so booleans travel as bytes
        return tf.cast(allgather(tf.cast(tensor, tf.uint8), name, process_set=process_set), tf.bool)
    tensor, name = _operand(tensor, name, "allgather", process_set, rows=True)

    @tf.custom_gradient
    def gather(x):
        out = _allgather_raw(x, name, process_set)

        def grad(dy):
            # Horovod's definition: averaged over ranks, then this rank's rows.
            reduced = _grouped_allreduce_raw([dy], [derived_name(name, ".grad")],
                                             Average, 1.0, 1.0, process_set=process_set)[0]
            rows = _allgather_raw(tf.shape(x, out_type=tf.int64)[:1],
                                  derived_name(name, ".rows"), process_set)
            offset = tf.reduce_sum(rows[:_ps.rank_in(process_set)])
            return reduced[offset:offset + tf.shape(x, out_type=tf.int64)[0]]
        return out, grad

    return gather(tensor)


def _grouped_reduce_raw(tensors, roots, names, op, prescale, postscale):
    """Each tensor reduced to its root (a global rank), in one numpy call:
    fused like an allreduce, with a reduce-scatter's bytes. A root's result
    is its reduction; elsewhere the values are unspecified."""
    def fn(*arrays):
        # Copies: the reductions write in place, and the arrays may be TF's own buffers.
        return _rq.run_now(_np.grouped_reduce_async_, [np.array(a) for a in arrays], roots,
                           names, op, prescale, postscale)

    outs = _t.run(fn, tensors, [t.dtype for t in tensors], "reduce")
    for o, t in zip(outs, tensors):
        o.set_shape(t.shape)
    return outs


def _broadcast_raw(tensor, root_rank, name, process_set=None):
    def fn(a):
        return [_rq.run_now(_np.broadcast_async, a, root_rank, name=name,
                            process_set=process_set)]

    out = _t.run(fn, [tensor], [tensor.dtype], "broadcast")[0]
    out.set_shape(tensor.shape)
    return out


@with_tf_errors
def broadcast(tensor: Any, root_rank: int, name: Optional[str] = None,
              ignore_name_scope: bool = False, process_set: Optional[ProcessSet] = None) -> Any:
    """Every rank receives root_rank's tensor (differentiable, as Horovod's:
    the root's gradient is the average over ranks, the others' zero)."""
    if _is_bool(tensor):
        as_bytes = broadcast(tf.cast(tensor, tf.uint8), root_rank, name, process_set=process_set)
        return tf.cast(as_bytes, tf.bool)
    tensor, name = _operand(tensor, name, "broadcast", process_set)

    @tf.custom_gradient
    def bcast(x):
        out = _broadcast_raw(x, root_rank, name, process_set)

        def grad(dy):
            reduced = _grouped_allreduce_raw([dy], [derived_name(name, ".grad")],
                                             Average, 1.0, 1.0, process_set=process_set)[0]
            # Off the root, zeros that still depend on the allreduce, as
            # Horovod's: tf.zeros_like would let a graph prune it on those
            # ranks, and the root would wait for them forever.
            return reduced if world.rank() == root_rank else reduced * 0
        return out, grad

    return bcast(tensor)


@with_tf_errors
def barrier(process_set: Optional[ProcessSet] = None) -> Any:
    """Returns once every rank (of ``process_set``) has called barrier(); in a
    ``tf.function``, an op that does so when it runs."""
    _ps.id_of(process_set)
    if tf.executing_eagerly():
        _np.barrier(process_set)
        return None

    def wait():
        _np.barrier(process_set)
        return [np.int32(0)]
    return _t.run(wait, [], [tf.int32], "barrier")[0]


@with_tf_errors
def join() -> Any:
    """This rank is out of data; it keeps serving the others' collectives
    until every rank has joined. Returns the rank that joined last, as
    Horovod's."""
    if tf.executing_eagerly():
        return _np.join()
    return _t.run(lambda: [np.int32(_np.join())], [], [tf.int32], "join")[0]
