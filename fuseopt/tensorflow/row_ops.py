"""fuseopt.tensorflow's row collectives: alltoall and reducescatter, whose
results have a different number of rows than their inputs; differentiable
with Horovod's definitions (ops.py holds the others)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import tensorflow as tf

from .. import ops as _np
from .. import process_sets as _ps
from .. import requests as _rq
from ..arguments import derived_name
from ..compression import NoneCompressor, as_compressor, one_payload_each
from ..errors import InvalidArgumentError
from . import _tensors as _t
from .ops import Average, Sum, _allgather_raw, _operand

if TYPE_CHECKING:  # names used only in annotations
    from ..process_sets import ProcessSet


def alltoall(tensor: Any, splits: Any = None, name: Optional[str] = None,
             process_set: Optional[ProcessSet] = None, ignore_name_scope: bool = False) -> Any:
    """Sends splits[r] rows to rank r (an even split if None). As in Horovod:
    returns the received tensor, and ``(received, received_splits)`` when
    ``splits`` is given; differentiable (the rows' gradients go back where
    the rows came from)."""
    tensor, name = _operand(tensor, name, "alltoall", process_set)
    splits = None if splits is None else tf.convert_to_tensor(splits, dtype=tf.int64)

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
    if compression is not None:
        compression = as_compressor(compression)
        if isinstance(compression, NoneCompressor):
            compression = None
        elif compression.reduce_op is not None:
            raise InvalidArgumentError("%s changes the op; reducescatter takes Compression.fp16 "
                                       "or .bf16" % type(compression).__name__)
    (payload,), (ctx,), restore = one_payload_each(compression, [tensor], [name], size)
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
