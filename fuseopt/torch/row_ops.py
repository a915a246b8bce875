"""Collectives whose results have a per-rank number of rows, with Horovod's
names, signatures and gradients: alltoall, reducescatter (single and
grouped), grouped allgather, and the sparse allreduce built on allgather.
The allreduce family, allgather and broadcast are in ops.py."""
import torch

from .. import ops as _np_ops
from .. import process_sets as _ps
from .. import requests as _rq
from .. import runtime
from ..arguments import derived_name
from ..errors import InvalidArgumentError
from . import _tensors as _t
from .ops import Average, Sum, _compressed, _group_names, _grouped, allgather_async


def alltoall_async(tensor, splits=None, name=None, process_set=None):
    _ps.require_global(process_set)
    src = _t.contiguous(tensor.detach())
    if src.dim() == 0:
        raise InvalidArgumentError("alltoall needs a tensor with at least one dimension")
    if splits is not None:
        try:
            splits = [int(s) for s in torch.as_tensor(splits).reshape(-1).tolist()]
        except (TypeError, ValueError, RuntimeError) as e:
            raise InvalidArgumentError("alltoall splits must be integers: %s" % e) from None

    def finish(raw):
        return (_t.from_runtime_output(raw, src),
                torch.tensor(raw.recv_splits, dtype=torch.int32))

    device, ready = _t.device_of(src)
    return _rq.enqueue(_rq.ALLTOALL, name, _t.dtype_name(src), tuple(src.shape), _t.ptr(src),
                       splits=splits, keepalive=(src, ready), finish=finish, device=device)


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name):
        ctx.name = derived_name(name, ".grad")
        out, received = alltoall_async(tensor, splits, name).wait()
        ctx.received = received
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, _received_grad):
        # The rows go back where they came from.
        return alltoall_async(grad, ctx.received, ctx.name).wait()[0], None, None


def alltoall(tensor, splits=None, name=None, process_set=None):
    """Sends splits[r] rows to rank r (an even split if None); differentiable.
    As in Horovod: returns the received tensor, and with ``splits`` given the
    tuple ``(received, received_splits)``."""
    _ps.require_global(process_set)
    out, received = _Alltoall.apply(tensor, splits, name)
    return out if splits is None else (out, received)


def reducescatter_async(tensor, name=None, op=Average, process_set=None, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Horovod's argument order (process_set before the scale factors)."""
    _ps.require_global(process_set)
    return _grouped_reducescatter([tensor], [name], op, prescale_factor, postscale_factor,
                                  single=True)


def _grouped_reducescatter(tensors, names, op, prescale_factor, postscale_factor, single=False):
    batch = _rq.Batch()
    outs = []
    for t, n in zip(tensors, names):
        src = _t.contiguous(t.detach())
        if src.dim() == 0:
            raise InvalidArgumentError("reducescatter needs a tensor with at least one dimension")
        rows = _np_ops.reducescatter_rows(src.shape[0], runtime.rank(), runtime.size())
        out = torch.empty((rows,) + tuple(src.shape[1:]), dtype=src.dtype, device=src.device)
        device, ready = _t.device_of(src)
        batch.add(_rq.REDUCESCATTER, n, _t.dtype_name(src), tuple(src.shape), _t.ptr(src),
                  _t.ptr(out), reduce_op=op, prescale=prescale_factor, postscale=postscale_factor,
                  keepalive=(src, out, ready), device=device)
        outs.append(out)
    if single:
        handle = batch.submit()[0]
        return _rq.Then(handle, lambda _: outs[0])
    return _rq.Then(batch.submit_group(), lambda _: outs)


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, names, op, prescale_factor, postscale_factor, *tensors):
        ctx.name, ctx.factor = derived_name(name, ".grad"), prescale_factor * postscale_factor
        if op == Sum:
            ctx.factor *= runtime.size()
        return tuple(_grouped_reducescatter(tensors, names, op, prescale_factor,
                                            postscale_factor).wait())

    @staticmethod
    def backward(ctx, *grads):
        # Horovod's definition: the gathered gradient, times size for Sum and
        # times the scale factors.
        scaled = [g * ctx.factor if ctx.factor != 1.0 else g for g in grads]
        return (None, None, None, None, None) + tuple(grouped_allgather(scaled, ctx.name))


def _reducescatter_list(tensors, name, names, compression, op, prescale_factor,
                        postscale_factor):
    """Differentiable, compressed reducescatter of tensors under these names."""
    payloads, ctxs, restore = _compressed(compression, tensors, name)
    out = _Reducescatter.apply(name, names, op, prescale_factor, postscale_factor, *payloads)
    return [restore(t, c) for t, c in zip(out, ctxs)]


def reducescatter(tensor, name=None, compression=None, op=Average, process_set=None,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces across ranks; this rank gets its slice of the first dimension
    (the first rows % size ranks get one row more). Differentiable. Negotiated
    under ``name`` itself, as every binding's reducescatter is."""
    _ps.require_global(process_set)
    return _reducescatter_list([tensor], name, [name], compression, op, prescale_factor,
                               postscale_factor)[0]


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=None,
                                prescale_factor=1.0, postscale_factor=1.0):
    _ps.require_global(process_set)
    tensors = list(tensors)
    return _grouped_reducescatter(tensors, _group_names(tensors, name), op, prescale_factor,
                                  postscale_factor)


def grouped_reducescatter(tensors, name=None, compression=None, op=Average, process_set=None,
                          prescale_factor=1.0, postscale_factor=1.0):
    """reducescatter of a list of tensors in one negotiation; differentiable."""
    _ps.require_global(process_set)
    tensors = list(tensors)
    return _reducescatter_list(tensors, name, _group_names(tensors, name), compression, op,
                               prescale_factor, postscale_factor)


def grouped_allgather_async(tensors, name=None, process_set=None):
    """allgather of a list of tensors, submitted in one call."""
    _ps.require_global(process_set)
    batch = _rq.Batch()
    for t, n in zip(tensors, _group_names(tensors, name)):
        src = _t.contiguous(t.detach())
        if src.dim() == 0:
            raise InvalidArgumentError("allgather needs a tensor with at least one dimension")
        device, ready = _t.device_of(src)
        batch.add(_rq.ALLGATHER, n, _t.dtype_name(src), tuple(src.shape), _t.ptr(src),
                  keepalive=(src, ready),
                  finish=lambda raw, src=src: _t.from_runtime_output(raw, src), device=device)
    handles = batch.submit()
    return _rq.Then(handles, lambda results: results)


class _GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, *tensors):
        ctx.rows = [t.shape[0] for t in tensors]
        ctx.name = derived_name(name, ".grad")
        return tuple(grouped_allgather_async(tensors, name).wait())

    @staticmethod
    def backward(ctx, *grads):
        # As allgather's, per tensor: averaged, then this rank's rows.
        reduced = _grouped(grads, None, ctx.name, Average, 1.0, 1.0, False).wait()
        rows = allgather_async(torch.tensor([ctx.rows], dtype=torch.int64),
                               derived_name(ctx.name, ".rows")).wait()
        offsets = rows[:runtime.rank()].sum(dim=0)
        return (None,) + tuple(r[int(o):int(o) + n]
                               for r, o, n in zip(reduced, offsets, ctx.rows))


def grouped_allgather(tensors, name=None, process_set=None):
    """allgather of a list of tensors in one negotiation; differentiable."""
    _ps.require_global(process_set)
    return list(_GroupedAllgather.apply(name, *tensors))


def sparse_allreduce_async(tensor, name, op, process_set=None):
    """Horovod's reduction of a sparse COO tensor: every rank's indices and
    values are allgathered, so the result holds all ranks' entries,
    uncoalesced (duplicates add up when it is coalesced or densified);
    ``op=Average`` divides the values by size(). Returns a callable handle:
    ``synchronize(handle)`` or ``handle()`` gives the sparse result."""
    _ps.require_global(process_set)
    if not tensor.is_sparse:
        raise InvalidArgumentError("sparse_allreduce_async needs a sparse COO tensor")
    indices = allgather_async(tensor._indices().transpose(0, 1).contiguous(),
                              name=derived_name(name, ".indices"))
    values = allgather_async(tensor._values(), name=derived_name(name, ".values"))

    def handle():
        v, i = values.wait(), indices.wait()
        if op == Average:
            v = v / runtime.size()
        return torch.sparse_coo_tensor(i.transpose(0, 1), v, tensor.size())
    return handle
