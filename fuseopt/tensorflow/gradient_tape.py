"""DistributedGradientTape: ``tape.gradient`` returns gradients averaged
across ranks, all of a step's gradients negotiated together so they fuse."""
from typing import Any, Dict, Optional, Sequence, Union

import tensorflow as tf

from .. import buckets, naming, optimizer_args, overlap
from . import ops
from .functions import variable_path
from .. import process_sets as _ps
from .compression import Compression


def gradient_names(sources):
    """Negotiation keys for gradients: the variables' paths when they have
    them (stable across ranks), else None (trace-order names)."""
    paths = [variable_path(s) for s in sources]
    names = [None if p is None else naming.GRADIENT_PREFIX + p for p in paths]
    if None in names or len(set(names)) != len(names):
        return None
    return names


def mapped_gradients(sources, name_map):
    """Names and layouts from a mixed-cluster name map (fuseopt.naming)."""
    shared = naming.resolve(name_map, [variable_path(s) for s in sources])
    return [naming.GRADIENT_PREFIX + s.name for s in shared], shared


def reduce_gradients(grads, sources, compression, op, gradient_predivide_factor,
                     sparse_as_dense, name_map=None, bucket_cap=None, process_set=None,
                     group_of=None):
    """Averages a list of gradients across ranks in one grouped allreduce
    (inside a graph: buckets of ``bucket_cap`` bytes, each started as soon as
    backward has produced it; see ops._started_allreduce).

    None gradients (a variable unused on this rank) take part as zeros, so
    every rank submits the same set of names. IndexedSlices are allgathered
    unless sparse_as_dense. With a name_map, gradients travel under their
    shared names, permuted into the shared layout and back. ``process_set``:
    the ranks that average (outside it, gradients stay local, as Horovod).
    ``group_of`` (buckets.group_of): Horovod's explicit groups, each reduced
    as one fused unit; the ungrouped gradients are bucketed as usual."""
    if _ps.id_of(process_set) != 0 and not process_set.included():
        return list(grads)
    grads = [tf.zeros_like(s) if g is None else g for g, s in zip(grads, sources)]
    shared = None
    if name_map is not None:
        names, shared = mapped_gradients(sources, name_map)
        grads = [g if s.perm is None else tf.transpose(tf.convert_to_tensor(g), s.perm)
                 for g, s in zip(grads, shared)]
    else:
        names = gradient_names(sources)
    grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) and sparse_as_dense
             else g for g in grads]
    if names is None:
        names = ops._names(len(grads), None, "gradients")
    scales = optimizer_args.scales(op, gradient_predivide_factor)
    dense_idx = [i for i, g in enumerate(grads) if not isinstance(g, tf.IndexedSlices)]
    out = list(grads)
    compression = None if compression is Compression.none else compression
    group_of = group_of or [None] * len(grads)
    units = {}  # group -> dense indices; None: the ungrouped ones, bucketed
    for i in dense_idx:
        units.setdefault(group_of[i], []).append(i)
    # The same order on every rank (blocking ops run in program order).
    for group in sorted(units, key=lambda g: (g is not None, g or 0)):
        idx = units[group]
        reduced = ops.allreduce_named([grads[i] for i in idx], [names[i] for i in idx], op,
                                      compression, *scales, meter=overlap.GRADIENTS,
                                      bucket_cap=bucket_cap if group is None else None,
                                      process_set=process_set)
        for i, r in zip(idx, reduced):
            out[i] = r
    for i, g in enumerate(grads):
        if isinstance(g, tf.IndexedSlices):
            out[i] = ops.allreduce(g, op=op, name=names[i], process_set=process_set)
    if shared is not None:
        out = [o if s.perm is None else tf.transpose(o, s.inverse) for o, s in zip(out, shared)]
    return out


class DistributedGradientTape:
    """Wraps a ``tf.GradientTape``::

        with tf.GradientTape() as tape:
            loss = ...
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)   # averaged

    Everything else (watch, jacobian, ...) goes to the wrapped tape.
    """

    def __init__(self, gradtape: tf.GradientTape, device_dense: str = "",
                 device_sparse: str = "", compression: Any = Compression.none,
                 sparse_as_dense: bool = False, op: int = ops.Average,
                 gradient_predivide_factor: float = 1.0, num_groups: int = 0,
                 groups: Optional[Union[int, Sequence[Any]]] = None,
                 process_set: Optional[_ps.ProcessSet] = None,
                 name_map: Optional[Union[Dict[str, Any], Any]] = None,
                 bucket_cap_mb: Optional[Union[float, str]] = None) -> None:
        _ps.id_of(process_set)
        optimizer_args.check(1, op, gradient_predivide_factor)
        self._process_set = process_set
        self._tape = gradtape
        self._bucket_cap = buckets.cap_bytes(bucket_cap_mb)
        self._name_map = name_map
        self._compression = compression
        self._sparse_as_dense = sparse_as_dense
        self._op = op
        self._predivide = gradient_predivide_factor
        self._num_groups, self._groups = buckets.check_groups(num_groups, groups)

    def gradient(self, target: Any, sources: Any, output_gradients: Any = None,
                 **kwargs: Any) -> Any:
        """The wrapped tape's gradients of ``target`` with respect to
        ``sources``, averaged (or reduced with ``op``) over ranks, in the
        structure of ``sources``."""
        grads = self._tape.gradient(target, sources, output_gradients, **kwargs)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads, expand_composites=False)
        reduced = reduce_gradients(flat_grads, flat_sources, self._compression, self._op,
                                   self._predivide, self._sparse_as_dense, self._name_map,
                                   self._bucket_cap, self._process_set,
                                   buckets.group_of(flat_sources, self._num_groups, self._groups))
        return tf.nest.pack_sequence_as(grads, reduced)

    def __getattr__(self, name):
        return getattr(self._tape, name)

    def __enter__(self):
        self._tape.__enter__()
        return self

    def __exit__(self, *exc):
        return self._tape.__exit__(*exc)
