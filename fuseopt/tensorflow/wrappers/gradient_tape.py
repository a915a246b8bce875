"""DistributedGradientTape: ``tape.gradient`` returns gradients averaged
across ranks, all of a step's gradients negotiated together so they fuse."""
from typing import Any, Dict, Optional, Sequence, Union

import keras
import tensorflow as tf

from ...training import buckets, naming, optimizer_args
from ...training.compression import keeps_state
from ...api import overlap
from .. import _tensors as _t
from .. import ops
from ..functions import variable_path
from ...core import process_sets as _ps
from ...base.errors import InvalidArgumentError
from ..compression import Compression


def gradient_names(sources):
    """Negotiation keys for gradients: the variables' paths when they have
    them (stable across ranks), else None (trace-order names)."""
    paths = [variable_path(s) for s in sources]
    names = [None if p is None else naming.GRADIENT_PREFIX + p for p in paths]
    if None in names or len(set(names)) != len(names):
        return None
    return names


def mapped_gradients(sources, name_map):
    """Names and layouts from a mixed-cluster name map (fuseopt.training.naming)."""
    shared = naming.resolve(name_map, [variable_path(s) for s in sources])
    return [naming.GRADIENT_PREFIX + s.name for s in shared], shared


def reduce_gradients(grads, sources, compression, op, gradient_predivide_factor,
                     sparse_as_dense, name_map=None, bucket_cap=None, process_set=None,
                     group_of=None, generic_names=False):
    """Averages a list of gradients across ranks in one grouped allreduce
    (inside a graph: buckets of ``bucket_cap`` bytes, each started as soon as
    backward has produced it; see _tensors.started_allreduce).

    None gradients (a variable unused on this rank) take part as zeros, so
    every rank submits the same set of names. IndexedSlices are allgathered
    unless sparse_as_dense. With a name_map, gradients travel under their
    shared names, permuted into the shared layout and back. ``process_set``:
    the ranks that average (outside it, gradients stay local, as Horovod).
    ``group_of`` (buckets.group_of): Horovod's explicit groups, each reduced
    as one fused unit; the ungrouped gradients are bucketed as usual.
    ``generic_names``: negotiate by position, not by variable path."""
    if _ps.id_of(process_set) != 0 and not process_set.included():
        return list(grads)
    grads = [tf.zeros_like(s) if g is None else g for g, s in zip(grads, sources)]
    shared = None
    if name_map is not None:
        names, shared = mapped_gradients(sources, name_map)
        grads = [g if s.perm is None else tf.transpose(tf.convert_to_tensor(g), s.perm)
                 for g, s in zip(grads, shared)]
    else:
        names = None if generic_names else gradient_names(sources)
    grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) and sparse_as_dense
             else g for g in grads]
    if names is None:
        if keeps_state(compression):  # its state would be keyed by a new name each call
            raise InvalidArgumentError(
                "%s keeps state per gradient, keyed by the variable's name, but these variables "
                "have no distinct names (or use_generic_names=True): name them, e.g. "
                "tf.Variable(..., name=\"w\"), as Keras layers do" % type(compression).__name__)
        names = ops._names(len(grads), None, "gradients")
    names = _t.unique_in_graph(names)
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


def reduce_except_local(grads, sources, local_ids, scale_local, process_set, reduce):
    """``reduce(grads, sources)`` over the gradients of shared sources; the
    gradients of sources whose id() is in ``local_ids`` stay on this rank,
    divided by the process set's size with ``scale_local`` (as Horovod, its
    pull 3695: so that a local layer's step matches what averaging the
    summed loss would give)."""
    grads, sources = list(grads), list(sources)
    shared = [i for i, s in enumerate(sources) if id(s) not in local_ids]
    reduced = reduce([grads[i] for i in shared], [sources[i] for i in shared])
    if len(shared) == len(grads):
        return reduced
    size = float(_ps.size_of(process_set))
    out = [_divided(g, size) if scale_local and g is not None else g for g in grads]
    for i, g in zip(shared, reduced):
        out[i] = g
    return out


def _divided(grad, size):
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / size, grad.indices, grad.dense_shape)
    return grad / size


class DistributedGradientTape:
    """Wraps a ``tf.GradientTape``::

        with tf.GradientTape() as tape:
            loss = ...
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)   # averaged

    Everything else (watch, jacobian, ...) goes to the wrapped tape.
    ``register_local_source(v)``: ``v``'s gradient stays on this rank
    (divided by the process set's size with ``scale_local_gradients``).
    """

    def __init__(self, gradtape: tf.GradientTape, device_dense: str = "",
                 device_sparse: str = "", compression: Any = Compression.none,
                 sparse_as_dense: bool = False, op: int = ops.Average,
                 gradient_predivide_factor: float = 1.0, num_groups: int = 0,
                 groups: Optional[Union[int, Sequence[Any]]] = None,
                 process_set: Optional[_ps.ProcessSet] = None,
                 scale_local_gradients: bool = True,
                 name_map: Optional[Union[Dict[str, Any], Any]] = None,
                 bucket_cap_mb: Optional[Union[float, str]] = None) -> None:
        _ps.id_of(process_set)
        optimizer_args.check(1, op, gradient_predivide_factor)
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self._local_sources: Dict[int, Any] = {}  # id -> source (kept alive: ids stay unique)
        self._tape = gradtape
        self._bucket_cap = buckets.cap_bytes(bucket_cap_mb)
        self._name_map = name_map
        self._compression = compression
        self._sparse_as_dense = sparse_as_dense
        self._op = op
        self._predivide = gradient_predivide_factor
        self._num_groups, self._groups = buckets.check_groups(num_groups, groups)

    def register_local_source(self, source: Any) -> None:
        """Horovod's: ``source``'s gradient is not reduced across ranks;
        this rank's own is returned (scaled, see the class)."""
        self._local_sources[id(source)] = source

    def gradient(self, target: Any, sources: Any, output_gradients: Any = None,
                 use_generic_names: bool = False, **kwargs: Any) -> Any:
        """The wrapped tape's gradients of ``target`` with respect to
        ``sources``, averaged (or reduced with ``op``) over ranks, in the
        structure of ``sources``. ``use_generic_names``: negotiate them by
        position instead of by variable path (Horovod's option)."""
        grads = self._tape.gradient(target, sources, output_gradients, **kwargs)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads, expand_composites=False)

        def reduce(grads, sources):
            return reduce_gradients(grads, sources, self._compression, self._op,
                                    self._predivide, self._sparse_as_dense, self._name_map,
                                    self._bucket_cap, self.process_set,
                                    buckets.group_of(sources, self._num_groups, self._groups),
                                    generic_names=use_generic_names)
        reduced = reduce_except_local(flat_grads, flat_sources, self._local_sources,
                                      self.scale_local_gradients, self.process_set, reduce)
        return tf.nest.pack_sequence_as(grads, reduced)

    def get_local_and_global_gradients(self, target: Any, sources: Any,
                                       output_gradients: Any = None,
                                       use_generic_names: bool = False) -> Any:
        """Horovod's: ``(local, global)``, two lists of ``(source, gradient)``
        pairs, for the registered local sources and the others."""
        grads = self.gradient(target, sources, output_gradients, use_generic_names)
        local: list = []
        shared: list = []
        for s, g in zip(tf.nest.flatten(sources), tf.nest.flatten(grads)):
            (local if id(s) in self._local_sources else shared).append((s, g))
        return local, shared

    def __getattr__(self, name):
        return getattr(self._tape, name)

    def __enter__(self):
        self._tape.__enter__()
        return self

    def __exit__(self, *exc):
        return self._tape.__exit__(*exc)


def PartialDistributedGradientTape(gradtape: tf.GradientTape, device_dense: str = "",
                                   device_sparse: str = "", compression: Any = Compression.none,
                                   sparse_as_dense: bool = False, op: int = ops.Average,
                                   gradient_predivide_factor: float = 1.0, num_groups: int = 0,
                                   groups: Optional[Union[int, Sequence[Any]]] = None,
                                   process_set: Optional[_ps.ProcessSet] = None,
                                   local_layers: Any = None,
                                   scale_local_gradients: bool = True) -> DistributedGradientTape:
    """Horovod's: a DistributedGradientTape whose ``local_layers`` (a Keras
    layer or a list of them) keep their gradients on each rank."""
    layers = local_layers_of(local_layers)
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                   groups, process_set, scale_local_gradients)
    for layer in layers:
        for var in layer.trainable_weights:
            tape.register_local_source(var)
    return tape


def local_layers_of(local_layers: Any) -> list:
    """Horovod's ``local_layers`` argument as a list of Keras layers (a
    ValueError, as Horovod's, for anything else)."""
    if local_layers is None:
        return []
    if isinstance(local_layers, keras.layers.Layer):
        return [local_layers]
    local_layers = list(local_layers)
    if not all(isinstance(layer, keras.layers.Layer) for layer in local_layers):
        raise ValueError("All local layers must be of tf.keras.layers.Layer type.")
    return local_layers
