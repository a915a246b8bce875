"""Batch normalization through the native kernels, for the framework bindings.

A binding describes its tensors by address, dtype, shape and strides; this
module turns that into the core's channel views and argument structs, keeps
them between calls (a layer's shapes rarely change), and makes one native
call per pass (forward: local sums, the agreed reduction of them, and the
normalization; backward likewise). The arithmetic and the communication are
the core's: native/src/kernels/ and Note [Agreed reductions].
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from ..base._native import ffi, lib
from ..base.dtypes import CODES
from ..base.errors import check
from ..core import process_sets as _ps
from ..core import world
from .agreed import AgreedReduction

FLOAT_CODES = {name: CODES[name] for name in ("float32", "float64", "float16", "bfloat16")}

#: (outer, channels, inner, outer_stride, channel_stride, inner_stride)
View = Tuple[int, int, int, int, int, int]


def channel_view(shape: Sequence[int], strides: Sequence[int], axis: int) -> Optional[View]:
    """The [outer][channels][inner] view of a tensor whose channels lie on
    ``axis`` (strides in elements), or None when the dimensions on either side
    of it do not collapse into one stride each (then copy it contiguous)."""
    def collapse(dims):
        size, stride = 1, 0
        for d in reversed(dims):
            n, s = shape[d], strides[d]
            if n == 1:
                continue
            if size == 1:
                size, stride = n, s
            elif s != stride * size:
                return None
            else:
                size *= n
        return size, (stride if size > 1 else 1)
    before = collapse(range(axis))
    after = collapse(range(axis + 1, len(shape)))
    if before is None or after is None:
        return None
    return (before[0], shape[axis], after[0], before[1], strides[axis], after[1])


def _fill(view_struct, dtype, view):
    view_struct.dtype = dtype
    (view_struct.outer, view_struct.channels, view_struct.inner, view_struct.outer_stride,
     view_struct.channel_stride, view_struct.inner_stride) = view


def saved_statistics(values: np.ndarray) -> Tuple[np.ndarray, Any]:
    """What BatchNormKernel.forward returned, from its array alone (after it
    went through a framework and back as a copy)."""
    values = np.ascontiguousarray(values, np.float64)
    return values, ffi.from_buffer("double[]", values)


def _address(value):
    return ffi.NULL if not value else ffi.cast("void*", value)


class BatchNormKernel:
    """One batch-norm layer's native calls. ``stats`` and ``grads`` are the
    agreed reductions (fuseopt.AgreedReduction) of its forward sums (1 + 2C
    values) and backward sums (2C), or None for this rank's batch alone; or
    ``reducer``, a function summing a float64 NumPy array over the ranks
    in place, for a transport of the caller's own (the calls then come in
    halves around it)."""

    def __init__(self, stats=None, grads=None,
                 reducer: Optional[Callable[[np.ndarray], None]] = None) -> None:
        #: the agreed reductions (fuseopt.AgreedReduction), or None
        self.stats, self.grads = stats, grads
        self._stats = stats.handle if stats is not None else ffi.NULL
        self._grads = grads.handle if grads is not None else ffi.NULL
        self._reducer = reducer
        self._fwd = ffi.new("fuseopt_batch_norm_forward_t*")
        self._fwd.struct_size = ffi.sizeof("fuseopt_batch_norm_forward_t")
        self._bwd = ffi.new("fuseopt_batch_norm_backward_t*")
        self._bwd.struct_size = ffi.sizeof("fuseopt_batch_norm_backward_t")
        self._fwd_shape = self._bwd_shape = self._fwd_params = self._bwd_params = None

    def forward(self, x: int, y: int, dtype: int, view: View, eps: float, weight: int = 0,
                bias: int = 0, param_dtype: int = 0, running_mean: int = 0,
                running_var: int = 0, running_dtype: int = 0,
                momentum: float = 0.0, threads: int = 1) -> Tuple[np.ndarray, Any]:
        """y = batch norm of x (addresses; y may be x). Returns what backward
        needs: a float64 array [mean (C), invstd (C), count], and its address
        as a cdata pointer (pass both to backward). ``threads``: how many
        threads the kernel may use (the framework's intra-op setting)."""
        a = self._fwd
        if self._fwd_shape != (dtype, view):  # a layer's shape rarely changes
            self._fwd_shape = (dtype, view)
            _fill(a.x, dtype, view)
            _fill(a.y, dtype, view)
        params = (weight, bias, param_dtype, running_mean, running_var, running_dtype, momentum, eps,
                  threads)
        if self._fwd_params != params:
            self._fwd_params = params
            a.threads = threads
            a.param_dtype, a.running_dtype = param_dtype, running_dtype
            a.weight, a.bias = _address(weight), _address(bias)
            a.running_mean, a.running_var = _address(running_mean), _address(running_var)
            a.momentum, a.eps = momentum, eps
        saved = np.empty(2 * view[1] + 1)
        p = ffi.from_buffer("double[]", saved)
        if self._reducer is None:
            status = lib.fuseopt_batch_norm_forward_at(self._stats, a, x, y, p)
            if status:
                check(status)
        else:
            self._forward_in_halves(x, y, p, view[1])
        return saved, p

    def _forward_in_halves(self, x, y, p, c):
        a = self._fwd
        a.x.data, a.y.data = ffi.cast("void*", x), ffi.cast("void*", y)
        a.saved_mean, a.saved_invstd, a.saved_count = p, p + c, p + 2 * c
        sums = np.empty(1 + 2 * c)
        check(lib.fuseopt_batch_norm_forward_sums(a, ffi.cast("double*", ffi.from_buffer(sums))))
        self._reducer(sums)
        check(lib.fuseopt_batch_norm_forward_apply(a, ffi.cast("double*", ffi.from_buffer(sums))))

    def backward(self, x: int, dy: int, dx: int, dtype: int, view: View, saved: Tuple[np.ndarray, Any],
                 weight: int = 0, param_dtype: int = 0, grad_weight: int = 0,
                 grad_bias: int = 0, threads: int = 1) -> None:
        """dx = the input gradient for output gradient dy (dx may be dy), given
        what forward returned; grad_weight and grad_bias (addresses, or 0) get
        this rank's sums."""
        a = self._bwd
        if self._bwd_shape != (dtype, view):
            self._bwd_shape = (dtype, view)
            _fill(a.x, dtype, view)
            _fill(a.dy, dtype, view)
            _fill(a.dx, dtype, view)
        if self._bwd_params != (weight, param_dtype, threads):
            self._bwd_params = (weight, param_dtype, threads)
            a.threads = threads
            a.param_dtype = param_dtype
            a.weight = _address(weight)
        if self._reducer is None:
            status = lib.fuseopt_batch_norm_backward_at(self._grads, a, x, dy, dx, saved[1],
                                                        grad_weight, grad_bias)
            if status:
                check(status)
        else:
            self._backward_in_halves(x, dy, dx, saved, grad_weight, grad_bias, view[1])

    def _backward_in_halves(self, x, dy, dx, saved, grad_weight, grad_bias, c):
        a = self._bwd
        a.x.data, a.dy.data, a.dx.data = (ffi.cast("void*", v) for v in (x, dy, dx))
        values, p = saved
        a.saved_mean, a.saved_invstd, a.saved_count = p, p + c, values[2 * c]
        a.grad_weight, a.grad_bias = _address(grad_weight), _address(grad_bias)
        local = np.empty(2 * c)
        check(lib.fuseopt_batch_norm_backward_sums(a, ffi.cast("double*", ffi.from_buffer(local))))
        total = local.copy()
        self._reducer(total)
        check(lib.fuseopt_batch_norm_backward_apply(
            a, ffi.cast("double*", ffi.from_buffer(local)),
            ffi.cast("double*", ffi.from_buffer(total))))


# One kernel per (context, channels, process set): its agreed reductions
# belong to the context they were made in, and a re-init makes new ones.
_sync_kernels: Dict[Tuple[Any, int, int], BatchNormKernel] = {}
# Kernels of earlier contexts are kept, never freed: a traced TensorFlow graph
# holds their agreed reductions' addresses (tensorflow/kernels/batch_norm_op.cc),
# and a call through them must fail with SHUT_DOWN, not touch freed memory.
_retired: list = []


def sync_kernel(channels: int, process_set: Optional[Any] = None) -> BatchNormKernel:
    """The kernel of a synchronized batch-norm layer of ``channels`` channels
    over ``process_set`` (default: every rank). Named by size: layers of one
    size share its agreed reductions, one call after the other (each waits
    for its sums before the next layer can run)."""
    ctx = world.context()
    key = (ctx, channels, _ps.id_of(process_set))
    kernel = _sync_kernels.get(key)
    if kernel is None:
        if any(k[0] is not ctx for k in _sync_kernels):
            _retired.extend(_sync_kernels.values())
            _sync_kernels.clear()
        kernel = _sync_kernels[key] = BatchNormKernel(
            AgreedReduction("sync_batch_norm.stats.%d" % channels, 1 + 2 * channels,
                            process_set=process_set),
            AgreedReduction("sync_batch_norm.grads.%d" % channels, 2 * channels,
                            process_set=process_set))
    return kernel
