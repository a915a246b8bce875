"""Collectives whose results have a per-rank number of rows, with Horovod's
names, signatures and gradients: alltoall, reducescatter (single and
grouped), grouped allgather, and the sparse allreduce built on allgather.
The allreduce family, allgather and broadcast are in ops.py."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence
import torch

from ..api import ops as _np
from ..core import process_sets as _ps
from ..core import requests as _rq
from ..base.c_boundary import derived_name
from ..base.errors import InvalidArgumentError
from ..core.handles import Then
from . import _tensors as _t
from .ops import Average, Sum, _compressed, _group_names, _grouped, allgather_async

if TYPE_CHECKING:  # names used only in annotations
    from ..core.process_sets import ProcessSet
    from ..core.handles import Handle


def alltoall_async(tensor: torch.Tensor, splits: Any = None, name: Optional[str] = None,
                   process_set: Optional[ProcessSet] = None) -> Handle:
    """Starts an alltoall: rows of ``tensor`` go to ranks in order, ``splits[i]``
    rows to rank i (equal parts by default); returns a handle."""
    set_id = _ps.id_of(process_set)
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
                       splits=splits, keepalive=(src, ready), finish=finish, device=device,
                       process_set=set_id)


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        ctx.name, ctx.process_set = derived_name(name, ".grad"), process_set
        out, received = _rq.run_now(alltoall_async, tensor, splits, name, process_set)
        ctx.received = received
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, _received_grad):
        # The rows go back where they came from.
        return (_rq.run_now(alltoall_async, grad, ctx.received, ctx.name, ctx.process_set)[0],
                None, None, None)


def alltoall(tensor: torch.Tensor, splits: Any = None, name: Optional[str] = None,
             process_set: Optional[ProcessSet] = None) -> Any:
    """Sends splits[r] rows to rank r (an even split if None); differentiable.
    As in Horovod: returns the received tensor, and with ``splits`` given the
    tuple ``(received, received_splits)``."""
    _ps.id_of(process_set)
    out, received = _Alltoall.apply(tensor, splits, name, process_set)
    return out if splits is None else (out, received)


def reducescatter_async(tensor: torch.Tensor, name: Optional[str] = None,
                        op: Optional[int] = Average, process_set: Optional[ProcessSet] = None,
                        prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> Handle:
    """Horovod's argument order (process_set before the scale factors)."""
    return _grouped_reducescatter([tensor], [name], op, prescale_factor, postscale_factor,
                                  process_set, single=True)


def _grouped_reducescatter(tensors, names, op, prescale_factor, postscale_factor, process_set,
                           single=False):
    set_id = _ps.id_of(process_set)
    rank, size = _ps.rank_in(process_set), _ps.size_of(process_set)
    batch = _rq.Batch()
    outs = []
    for t, n in zip(tensors, names):
        src = _t.contiguous(t.detach())
        if src.dim() == 0:
            raise InvalidArgumentError("reducescatter needs a tensor with at least one dimension")
        rows = _np.reducescatter_rows(src.shape[0], rank, size)
        # Kept across calls of this name once dropped (output_pool): fresh
        # pages cost a fault per 4 KiB, 7 ms of a 16 MiB reducescatter's 11.
        out = _t.new_result(src, n, process_set, (rows,) + tuple(src.shape[1:]))
        device, ready = _t.device_of(src)
        batch.add(_rq.REDUCESCATTER, n, _t.dtype_name(src), tuple(src.shape), _t.ptr(src),
                  _t.ptr(out), reduce_op=op, prescale=prescale_factor, postscale=postscale_factor,
                  keepalive=(src, out, ready), device=device, process_set=set_id)
        outs.append(out)
    if single:
        handle = batch.submit()[0]
        return Then(handle, lambda _: outs[0])
    return Then(batch.submit_group(), lambda _: outs)


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, names, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.name, ctx.factor = derived_name(name, ".grad"), prescale_factor * postscale_factor
        ctx.process_set = process_set
        if op == Sum:
            ctx.factor *= _ps.size_of(process_set)
        return tuple(_grouped_reducescatter(tensors, names, op, prescale_factor,
                                            postscale_factor, process_set).wait())

    @staticmethod
    def backward(ctx, *grads):
        # Horovod's definition: the gathered gradient, times size for Sum and
        # times the scale factors.
        scaled = [g * ctx.factor if ctx.factor != 1.0 else g for g in grads]
        return (None,) * 6 + tuple(grouped_allgather(scaled, ctx.name,
                                                     process_set=ctx.process_set))


def _reducescatter_list(tensors, name, names, compression, op, prescale_factor,
                        postscale_factor, process_set):
    """Differentiable, compressed reducescatter of tensors under these names."""
    _ps.id_of(process_set)
    payloads, ctxs, restore = _compressed(compression, tensors, name, process_set)
    out = _Reducescatter.apply(name, names, op, prescale_factor, postscale_factor, process_set,
                               *payloads)
    return [restore(t, c) for t, c in zip(out, ctxs)]


def reducescatter(tensor: torch.Tensor, name: Optional[str] = None, compression: Any = None,
                  op: Optional[int] = Average, process_set: Optional[ProcessSet] = None,
                  prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> torch.Tensor:
    """Reduces across ranks; this rank gets its slice of the first dimension
    (the first rows % size ranks get one row more). Differentiable. Negotiated
    under ``name`` itself, as every binding's reducescatter is."""
    return _reducescatter_list([tensor], name, [name], compression, op, prescale_factor,
                               postscale_factor, process_set)[0]


def grouped_reducescatter_async(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                                op: Optional[int] = Average,
                                process_set: Optional[ProcessSet] = None,
                                prescale_factor: float = 1.0,
                                postscale_factor: float = 1.0) -> Handle:
    """Starts a reducescatter of a list of tensors, fused together; returns
    one handle for the list."""
    tensors = list(tensors)
    return _grouped_reducescatter(tensors, _group_names(tensors, name), op, prescale_factor,
                                  postscale_factor, process_set)


def grouped_reducescatter(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                          compression: Any = None, op: Optional[int] = Average,
                          process_set: Optional[ProcessSet] = None, prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> List[torch.Tensor]:
    """reducescatter of a list of tensors in one negotiation; differentiable."""
    tensors = list(tensors)
    return _reducescatter_list(tensors, name, _group_names(tensors, name), compression, op,
                               prescale_factor, postscale_factor, process_set)


def grouped_allgather_async(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                            process_set: Optional[ProcessSet] = None) -> Then:
    """allgather of a list of tensors, submitted in one call."""
    set_id = _ps.id_of(process_set)
    batch = _rq.Batch()
    for t, n in zip(tensors, _group_names(tensors, name)):
        src = _t.contiguous(t.detach())
        if src.dim() == 0:
            raise InvalidArgumentError("allgather needs a tensor with at least one dimension")
        device, ready = _t.device_of(src)
        batch.add(_rq.ALLGATHER, n, _t.dtype_name(src), tuple(src.shape), _t.ptr(src),
                  keepalive=(src, ready),
                  finish=lambda raw, src=src: _t.from_runtime_output(raw, src), device=device,
                  process_set=set_id)
    handles = batch.submit()
    return Then(handles, lambda results: results)


class _GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.rows = [t.shape[0] for t in tensors]
        ctx.name, ctx.process_set = derived_name(name, ".grad"), process_set
        return tuple(_rq.run_now(grouped_allgather_async, tensors, name, process_set))

    @staticmethod
    def backward(ctx, *grads):
        # As allgather's, per tensor: averaged, then this rank's rows.
        ps = ctx.process_set
        reduced = _rq.run_now(_grouped, grads, None, ctx.name, Average, 1.0, 1.0, False, ps)
        rows = _rq.run_now(allgather_async, torch.tensor([ctx.rows], dtype=torch.int64),
                           derived_name(ctx.name, ".rows"), ps)
        offsets = rows[:_ps.rank_in(ps)].sum(dim=0)
        return (None, None) + tuple(r[int(o):int(o) + n]
                               for r, o, n in zip(reduced, offsets, ctx.rows))


def grouped_allgather(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                      process_set: Optional[ProcessSet] = None) -> List[torch.Tensor]:
    """allgather of a list of tensors in one negotiation; differentiable."""
    _ps.id_of(process_set)
    return list(_GroupedAllgather.apply(name, process_set, *tensors))


def sparse_allreduce_async(tensor: torch.Tensor, name: Optional[str], op: Optional[int],
                           process_set: Optional[ProcessSet] = None) -> Callable[[], Any]:
    """Horovod's reduction of a sparse COO tensor: every rank's indices and
    values are allgathered, so the result holds all ranks' entries,
    uncoalesced (duplicates add up when it is coalesced or densified);
    ``op=Average`` divides the values by the number of ranks. Returns a callable handle:
    ``synchronize(handle)`` or ``handle()`` gives the sparse result."""
    _ps.id_of(process_set)
    if not tensor.is_sparse:
        raise InvalidArgumentError("sparse_allreduce_async needs a sparse COO tensor")
    indices = allgather_async(tensor._indices().transpose(0, 1).contiguous(),
                              name=derived_name(name, ".indices"), process_set=process_set)
    values = allgather_async(tensor._values(), name=derived_name(name, ".values"),
                             process_set=process_set)

    def handle():
        v, i = values.wait(), indices.wait()
        if op == Average:
            v = v / _ps.size_of(process_set)
        # Checked: indices come from other ranks, and a bad one would crash later.
        return torch.sparse_coo_tensor(i.transpose(0, 1), v, tensor.size(), check_invariants=True)
    return handle
