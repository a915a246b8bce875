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
from . import _tensors as _t

Sum = _np_ops.Sum
Average = _np_ops.Average
Min = _np_ops.Min
Max = _np_ops.Max
Product = _np_ops.Product



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
    args, kwargs = allreduce_op(tensor, name, _np_ops.resolve_op(average, op), prescale_factor,
                                 postscale_factor, False)
    return _rq.enqueue(*args, **kwargs)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=None):
    args, kwargs = allreduce_op(tensor, name, _np_ops.resolve_op(average, op), prescale_factor,
                                 postscale_factor, True)
    return _rq.enqueue(*args, **kwargs)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=None):
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
    op = _np_ops.resolve_op(average, op)
    if compression is None:
        return _Allreduce.apply(tensor, name, op, prescale_factor, postscale_factor)
    payloads, ctx = compression.compress(tensor, name)
    op = compression.reduce_op if compression.reduce_op is not None else op
    reduced = [_Allreduce.apply(p, _rq.derived_name(name, ".%d" % i), op,
                                prescale_factor, postscale_factor)
               for i, p in enumerate(payloads)]
    return compression.decompress(reduced, ctx)



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
    return _grouped(tensors, average, name, op, prescale_factor, postscale_factor, False)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=None):
    return _grouped(tensors, average, name, op, prescale_factor, postscale_factor, True)


def grouped_allreduce(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=None):
    return grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                   postscale_factor).wait()


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=None):
    grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                             postscale_factor).wait()
    return tensors


def allgather_async(tensor, name=None, process_set=None):
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
        # Each rank's rows received gradient on every rank: sum them, keep ours.
        reduced = allreduce_async(grad, name=ctx.name, op=Sum).wait()
        rows = allgather_async(torch.tensor([ctx.rows], dtype=torch.int64),
                               _rq.derived_name(ctx.name, ".rows")).wait()
        offset = int(rows[:runtime.rank()].sum())
        return reduced[offset:offset + ctx.rows], None


def allgather(tensor, name=None, process_set=None):
    """Concatenates every rank's tensor along the first dimension (which may
    differ per rank)."""
    return _Allgather.apply(tensor, name)


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    src = _t.contiguous(tensor.detach())
    out = torch.empty_like(src)
    device, ready = _t.device_of(src)
    return _rq.enqueue(_rq.BROADCAST, name, _t.dtype_name(src), tuple(src.shape), _t.ptr(src),
                       _t.ptr(out), root=root_rank, keepalive=(src, out, ready),
                       finish=lambda _: out, device=device)


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    buf = _t.writable(tensor.detach(), "broadcast_ tensor")
    device, ready = _t.device_of(buf)
    return _rq.enqueue(_rq.BROADCAST, name, _t.dtype_name(buf), tuple(buf.shape), _t.ptr(buf),
                       _t.ptr(buf), root=root_rank, keepalive=(buf, ready),
                       finish=lambda _: tensor, device=device)


def broadcast_(tensor, root_rank, name=None, process_set=None):
    return broadcast_async_(tensor, root_rank, name).wait()


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name):
        ctx.root = root_rank
        ctx.name = _rq.derived_name(name, ".grad")
        return broadcast_async(tensor, root_rank, name).wait()

    @staticmethod
    def backward(ctx, grad):
        # Every rank's output came from the root's input: the root's gradient
        # is the sum over ranks; the others' inputs did not matter.
        reduced = allreduce_async(grad, name=ctx.name, op=Sum).wait()
        if runtime.rank() != ctx.root:
            reduced.zero_()
        return reduced, None, None


def broadcast(tensor, root_rank, name=None, process_set=None):
    """Every rank receives root_rank's tensor (a new tensor; differentiable)."""
    return _Broadcast.apply(tensor, root_rank, name)


def alltoall_async(tensor, splits=None, name=None, process_set=None):
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


def alltoall(tensor, splits=None, name=None, process_set=None):
    """Sends splits[r] rows to rank r (even split if None). Returns
    ``(received, received_splits)``."""
    return alltoall_async(tensor, splits, name).wait()


def reducescatter_async(tensor, name=None, op=Average, prescale_factor=1.0,
                        postscale_factor=1.0, process_set=None):
    src = _t.contiguous(tensor.detach())
    if src.dim() == 0:
        raise InvalidArgumentError("reducescatter needs a tensor with at least one dimension")
    rows = _np_ops.reducescatter_rows(src.shape[0], runtime.rank(), runtime.size())
    out = torch.empty((rows,) + tuple(src.shape[1:]), dtype=src.dtype, device=src.device)
    device, ready = _t.device_of(src)
    return _rq.enqueue(_rq.REDUCESCATTER, name, _t.dtype_name(src), tuple(src.shape),
                       _t.ptr(src), _t.ptr(out), reduce_op=op, prescale=prescale_factor,
                       postscale=postscale_factor, keepalive=(src, out, ready),
                       finish=lambda _: out, device=device)


def reducescatter(tensor, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0,
                  process_set=None):
    """Reduces across ranks; this rank gets its slice of the first dimension."""
    return reducescatter_async(tensor, name, op, prescale_factor, postscale_factor).wait()


def synchronize(handle):
    """Waits for an async operation and returns its result."""
    return handle.wait()


def poll(handle):
    """Whether an async operation has finished."""
    return handle.poll()


barrier = _np_ops.barrier


def join(device=-1):
    """This rank is out of data; it keeps serving the others' collectives with
    neutral values until every rank has joined. Returns -1 (Horovod returns
    the last rank to join; fuseopt does not track it)."""
    _np_ops.join()
    return -1
