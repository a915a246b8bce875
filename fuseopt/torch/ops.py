"""Collectives on torch tensors, with Horovod's names and signatures.

``*_async`` forms return a Handle (``synchronize(handle)`` / ``poll(handle)``);
the trailing-underscore forms work in place. ``allreduce``, ``allgather`` and
``broadcast`` are differentiable, as in Horovod.
"""
import torch

from .. import ops as _np_ops
from .. import requests as _rq
from .. import runtime
from ..errors import InvalidArgumentError
from .. import process_sets as _ps
from . import _tensors as _t

Sum = _np_ops.Sum
Average = _np_ops.Average
Min = _np_ops.Min
Max = _np_ops.Max
Product = _np_ops.Product
Adasum = _np_ops.Adasum



def allreduce_op(tensor, name, op, prescale_factor, postscale_factor, in_place):
    """enqueue()'s arguments for one allreduce (in place or into a new tensor)."""
    if tensor.requires_grad:  # e.g. a parameter; gradients themselves do not
        tensor = tensor.detach()
    if in_place:
        src = out = _t.writable(tensor, "allreduce_ tensor")
        src_ptr = out_ptr = _t.ptr(src)
    else:
        src = _t.contiguous(tensor)
        out = torch.empty_like(src)
        src_ptr, out_ptr = _t.ptr(src), _t.ptr(out)
    device, ready = _t.device_of(src)
    return ((_rq.ALLREDUCE, name, _t.dtype_name(src), tuple(src.shape), src_ptr, out_ptr),
            dict(reduce_op=op, prescale=prescale_factor, postscale=postscale_factor,
                 keepalive=(src, out, ready), finish=lambda _: out, device=device))


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=None):
    _ps.require_global(process_set)
    args, kwargs = allreduce_op(tensor, name, _np_ops.resolve_op(average, op), prescale_factor,
                                 postscale_factor, False)
    return _rq.enqueue(*args, **kwargs)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=None):
    _ps.require_global(process_set)
    args, kwargs = allreduce_op(tensor, name, _np_ops.resolve_op(average, op), prescale_factor,
                                 postscale_factor, True)
    return _rq.enqueue(*args, **kwargs)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=None):
    _ps.require_global(process_set)
    allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor).wait()
    return tensor


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor):
        ctx.op, ctx.scales = op, (prescale_factor, postscale_factor)
        ctx.name = _rq.derived_name(name, ".grad")
        return allreduce_async(tensor, None, name, op, prescale_factor, postscale_factor).wait()

    @staticmethod
    def backward(ctx, grad):
        return (allreduce_async(grad, None, ctx.name, ctx.op, *ctx.scales).wait(),
                None, None, None, None)


def allreduce(tensor, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=None):
    """Reduces ``tensor`` across ranks (Average by default) into a new tensor."""
    _ps.require_global(process_set)
    op = _np_ops.resolve_op(average, op)
    if compression is None:
        return _Allreduce.apply(tensor, name, op, prescale_factor, postscale_factor)
    payloads, ctx = compression.compress(tensor, name)
    op = compression.reduce_op if compression.reduce_op is not None else op
    reduced = [_Allreduce.apply(p, _rq.derived_name(name, ".%d" % i), op,
                                prescale_factor, postscale_factor)
               for i, p in enumerate(payloads)]
    return compression.decompress(reduced, ctx)



def _compressed(compression, tensors, name):
    """Horovod's compression around a collective: one payload per tensor."""
    if compression is None:
        return list(tensors), [None] * len(tensors), lambda t, ctx: t
    packed = [compression.compress(t, n) for t, n in zip(tensors, _group_names(tensors, name))]
    if any(len(payloads) != 1 for payloads, _ in packed):
        raise InvalidArgumentError("%s sends several payloads per tensor; only allreduce and "
                                   "DistributedOptimizer take it" % type(compression).__name__)
    return ([payloads[0] for payloads, _ in packed], [ctx for _, ctx in packed],
            lambda t, ctx: compression.decompress([t], ctx))


def _group_names(tensors, name):
    return [_rq.derived_name(name, ".%d" % i) for i in range(len(tensors))]


def _grouped(tensors, average, name, op, prescale_factor, postscale_factor, in_place):
    op = _np_ops.resolve_op(average, op)
    batch = _rq.Batch()
    for t, n in zip(tensors, _group_names(tensors, name)):
        args, kwargs = allreduce_op(t, n, op, prescale_factor, postscale_factor, in_place)
        batch.add(*args, **kwargs)
    return batch.submit_group()


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=None):
    """Allreduces a list of tensors: submitted in one call, negotiated in one
    round and fused."""
    _ps.require_global(process_set)
    return _grouped(tensors, average, name, op, prescale_factor, postscale_factor, False)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=None):
    _ps.require_global(process_set)
    return _grouped(tensors, average, name, op, prescale_factor, postscale_factor, True)


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, *tensors):
        ctx.name, ctx.op, ctx.scales = _rq.derived_name(name, ".grad"), op, \
            (prescale_factor, postscale_factor)
        return tuple(_grouped(tensors, None, name, op, prescale_factor, postscale_factor,
                              False).wait())

    @staticmethod
    def backward(ctx, *grads):
        # As Horovod: the gradient is reduced with the forward's op and scales.
        return (None, None, None, None) + tuple(
            _grouped(grads, None, ctx.name, ctx.op, *ctx.scales, False).wait())


def grouped_allreduce(tensors, average=None, name=None, compression=None, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Allreduces a list of tensors together (one negotiation, fused);
    differentiable, with optional compression, as Horovod's."""
    _ps.require_global(process_set)
    op = _np_ops.resolve_op(average, op)
    payloads, ctxs, restore = _compressed(compression, tensors, name)
    if compression is not None and getattr(compression, "reduce_op", None) is not None:
        op = compression.reduce_op
    reduced = _GroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, *payloads)
    return [restore(t, c) for t, c in zip(reduced, ctxs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=None):
    _ps.require_global(process_set)
    grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                             postscale_factor).wait()
    return tensors


def allgather_async(tensor, name=None, process_set=None):
    _ps.require_global(process_set)
    src = _t.contiguous(tensor.detach())
    if src.dim() == 0:
        raise InvalidArgumentError("allgather needs a tensor with at least one dimension")
    device, ready = _t.device_of(src)
    return _rq.enqueue(_rq.ALLGATHER, name, _t.dtype_name(src), tuple(src.shape), _t.ptr(src),
                       keepalive=(src, ready), finish=lambda raw: _t.from_runtime_output(raw, src),
                       device=device)


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name):
        ctx.rows = tensor.shape[0]
        ctx.name = _rq.derived_name(name, ".grad")
        out = allgather_async(tensor, name).wait()
        return out

    @staticmethod
    def backward(ctx, grad):
        # Horovod's definition: the gradient averaged over ranks, this rank's rows.
        reduced = allreduce_async(grad, name=ctx.name, op=Average).wait()
        rows = allgather_async(torch.tensor([ctx.rows], dtype=torch.int64),
                               _rq.derived_name(ctx.name, ".rows")).wait()
        offset = int(rows[:runtime.rank()].sum())
        return reduced[offset:offset + ctx.rows], None


def allgather(tensor, name=None, process_set=None):
    """Concatenates every rank's tensor along the first dimension (which may
    differ per rank)."""
    _ps.require_global(process_set)
    return _Allgather.apply(tensor, name)


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    _ps.require_global(process_set)
    src = _t.contiguous(tensor.detach())
    out = torch.empty_like(src)
    device, ready = _t.device_of(src)
    return _rq.enqueue(_rq.BROADCAST, name, _t.dtype_name(src), tuple(src.shape), _t.ptr(src),
                       _t.ptr(out), root=root_rank, keepalive=(src, out, ready),
                       finish=lambda _: out, device=device)


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    _ps.require_global(process_set)
    buf = _t.writable(tensor.detach(), "broadcast_ tensor")
    device, ready = _t.device_of(buf)
    return _rq.enqueue(_rq.BROADCAST, name, _t.dtype_name(buf), tuple(buf.shape), _t.ptr(buf),
                       _t.ptr(buf), root=root_rank, keepalive=(buf, ready),
                       finish=lambda _: tensor, device=device)


def broadcast_(tensor, root_rank, name=None, process_set=None):
    _ps.require_global(process_set)
    return broadcast_async_(tensor, root_rank, name).wait()


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name):
        ctx.root = root_rank
        ctx.name = _rq.derived_name(name, ".grad")
        return broadcast_async(tensor, root_rank, name).wait()

    @staticmethod
    def backward(ctx, grad):
        # Horovod's definition: the gradient averaged over ranks on the root,
        # zero elsewhere (the other ranks' inputs did not matter).
        reduced = allreduce_async(grad, name=ctx.name, op=Average).wait()
        if runtime.rank() != ctx.root:
            reduced.zero_()
        return reduced, None, None


def broadcast(tensor, root_rank, name=None, process_set=None):
    """Every rank receives root_rank's tensor (a new tensor; differentiable)."""
    _ps.require_global(process_set)
    return _Broadcast.apply(tensor, root_rank, name)


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
        ctx.name = _rq.derived_name(name, ".grad")
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
    return _grouped_reducescatter([tensor], name, op, prescale_factor, postscale_factor,
                                  single=True)


def _grouped_reducescatter(tensors, name, op, prescale_factor, postscale_factor, single=False):
    batch = _rq.Batch()
    outs = []
    for t, n in zip(tensors, [name] if single else _group_names(tensors, name)):
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
    def forward(ctx, name, op, prescale_factor, postscale_factor, *tensors):
        ctx.name, ctx.factor = _rq.derived_name(name, ".grad"), prescale_factor * postscale_factor
        if op == Sum:
            ctx.factor *= runtime.size()
        return tuple(_grouped_reducescatter(tensors, name, op, prescale_factor,
                                            postscale_factor).wait())

    @staticmethod
    def backward(ctx, *grads):
        # Horovod's definition: the gathered gradient, times size for Sum and
        # times the scale factors.
        scaled = [g * ctx.factor if ctx.factor != 1.0 else g for g in grads]
        return (None, None, None, None) + tuple(grouped_allgather(scaled, ctx.name))


def reducescatter(tensor, name=None, compression=None, op=Average, process_set=None,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces across ranks; this rank gets its slice of the first dimension
    (the first rows % size ranks get one row more). Differentiable."""
    return grouped_reducescatter([tensor], name, compression, op, process_set, prescale_factor,
                                 postscale_factor)[0]


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=None,
                                prescale_factor=1.0, postscale_factor=1.0):
    _ps.require_global(process_set)
    return _grouped_reducescatter(list(tensors), name, op, prescale_factor, postscale_factor)


def grouped_reducescatter(tensors, name=None, compression=None, op=Average, process_set=None,
                          prescale_factor=1.0, postscale_factor=1.0):
    """reducescatter of a list of tensors in one negotiation; differentiable."""
    _ps.require_global(process_set)
    payloads, ctxs, restore = _compressed(compression, list(tensors), name)
    out = _Reducescatter.apply(name, op, prescale_factor, postscale_factor, *payloads)
    return [restore(t, c) for t, c in zip(out, ctxs)]


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
        ctx.name = _rq.derived_name(name, ".grad")
        return tuple(grouped_allgather_async(tensors, name).wait())

    @staticmethod
    def backward(ctx, *grads):
        # As allgather's, per tensor: averaged, then this rank's rows.
        reduced = _grouped(grads, None, ctx.name, Average, 1.0, 1.0, False).wait()
        rows = allgather_async(torch.tensor([ctx.rows], dtype=torch.int64),
                               _rq.derived_name(ctx.name, ".rows")).wait()
        offsets = rows[:runtime.rank()].sum(dim=0)
        return (None,) + tuple(r[int(o):int(o) + n]
                               for r, o, n in zip(reduced, offsets, ctx.rows))


def grouped_allgather(tensors, name=None, process_set=None):
    """allgather of a list of tensors in one negotiation; differentiable."""
    _ps.require_global(process_set)
    return list(_GroupedAllgather.apply(name, *tensors))


def synchronize(handle):
    """Waits for an async operation and returns its result (a callable handle,
    as sparse_allreduce_async returns, is called)."""
    return handle() if callable(handle) else handle.wait()


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
                              name=_rq.derived_name(name, ".indices"))
    values = allgather_async(tensor._values(), name=_rq.derived_name(name, ".values"))

    def handle():
        v, i = values.wait(), indices.wait()
        if op == Average:
            v = v / runtime.size()
        return torch.sparse_coo_tensor(i.transpose(0, 1), v, tensor.size())
    return handle


def poll(handle):
    """Whether an async operation has finished."""
    return handle.poll()


def barrier(process_set=None):
    """Returns once every rank has called barrier()."""
    _ps.require_global(process_set)
    _np_ops.barrier()


def join(device=-1):
    """This rank is out of data; it keeps serving the others' collectives with
    neutral values until every rank has joined. Returns the rank that joined
    last, as Horovod's. ``device`` is accepted for Horovod's signature: the
    stand-in values live where each tensor does."""
    return _np_ops.join()
