"""DistributedGradientTape: ``tape.gradient`` returns gradients averaged
across ranks, all of a step's gradients negotiated together so they fuse."""
import tensorflow as tf

from . import ops
from .compression import Compression


def gradient_names(sources):
    """Negotiation keys for gradients: the variables' paths when they have
    them (stable across ranks), else None (trace-order names)."""
    names = []
    for s in sources:
        path = getattr(s, "path", None) or getattr(s, "name", None)
        names.append(None if path is None else "grad." + str(path).split(":")[0])
    if None in names or len(set(names)) != len(names):
        return None
    return names


def reduce_gradients(grads, sources, compression, op, gradient_predivide_factor,
                     sparse_as_dense, names=None):
    """Averages a list of gradients across ranks in one grouped allreduce.

    None gradients (a variable unused on this rank) take part as zeros, so
    every rank submits the same set of names. IndexedSlices are allgathered
    unless sparse_as_dense."""
    grads = [tf.zeros_like(s) if g is None else g for g, s in zip(grads, sources)]
    grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) and sparse_as_dense
             else g for g in grads]
    if names is None:
        names = gradient_names(sources)
    if names is None:
        names = ops._names(len(grads), None, "gradients")
    scales = (1.0 / gradient_predivide_factor, gradient_predivide_factor) \
        if op == ops.Average else (1.0, 1.0)
    dense_idx = [i for i, g in enumerate(grads) if not isinstance(g, tf.IndexedSlices)]
    out = list(grads)
    compression = None if compression is Compression.none else compression
    reduced = ops.allreduce_named([grads[i] for i in dense_idx], [names[i] for i in dense_idx],
                                  op, compression, *scales) if dense_idx else []
    for i, r in zip(dense_idx, reduced):
        out[i] = r
    for i, g in enumerate(grads):
        if isinstance(g, tf.IndexedSlices):
            out[i] = ops.allreduce(g, op=op, name=names[i])
    return out


class DistributedGradientTape:
    """Wraps a ``tf.GradientTape``::

        with tf.GradientTape() as tape:
            loss = ...
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)   # averaged

    Everything else (watch, jacobian, ...) goes to the wrapped tape.
    """

    def __init__(self, gradtape, device_dense="", device_sparse="", compression=Compression.none,
                 sparse_as_dense=False, op=ops.Average, gradient_predivide_factor=1.0,
                 num_groups=0, groups=None, process_set=None):
        self._tape = gradtape
        self._compression = compression
        self._sparse_as_dense = sparse_as_dense
        self._op = op
        self._predivide = gradient_predivide_factor

    def gradient(self, target, sources, output_gradients=None, **kwargs):
        grads = self._tape.gradient(target, sources, output_gradients, **kwargs)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads, expand_composites=False)
        reduced = reduce_gradients(flat_grads, flat_sources, self._compression, self._op,
                                   self._predivide, self._sparse_as_dense)
        return tf.nest.pack_sequence_as(grads, reduced)

    def __getattr__(self, name):
        return getattr(self._tape, name)

    def __enter__(self):
        self._tape.__enter__()
        return self

    def __exit__(self, *exc):
        return self._tape.__exit__(*exc)
