"""Making every rank start from the same model and optimizer state."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional
import io

import torch

from ..training import naming
from ..training.compression import compression_state_of, shared_part
from ..api import objects as _objects
from ..core import process_sets as _ps
from ..core import world
from ..base.errors import InvalidArgumentError
from . import _tensors, ops

if TYPE_CHECKING:  # names used only in annotations
    from ..core.process_sets import ProcessSet


def broadcast_parameters(params: Any, root_rank: int = 0, prefix: str = "broadcast.param.",
                         name_map: Any = None, process_set: Optional[ProcessSet] = None) -> None:
    """Copies root_rank's tensors into everyone's, in place.

    ``params``: a ``state_dict()`` (tensors and buffers), an iterable of
    ``(name, tensor)`` such as ``model.named_parameters()``, or of tensors
    (``list(model.parameters())``, named by position). An entry that is not a
    tensor is an error, as in Horovod. All broadcasts are submitted at once
    so they fuse.

    ``name_map`` (mixed PyTorch/TensorFlow jobs, see docs/mixed.md): maps
    each name to a shared name or ``fuseopt.Shared(name, perm)``; the tensors
    then travel under the shared names and layout, so a Keras rank's
    ``broadcast_variables(..., name_map=...)`` can be the root or a receiver.
    The ranks first check together that they agree on every shared tensor.
    ``process_set``: only its members take part (root_rank is a global rank)."""
    _ps.id_of(process_set)
    if isinstance(params, dict):
        items = sorted(params.items())
    else:  # as Horovod, bare tensors too (model.parameters()): named by position
        items = [p if isinstance(p, tuple) else ("%d" % i, p) for i, p in enumerate(params)]
    if not all(len(item) == 2 for item in items):
        raise InvalidArgumentError("broadcast_parameters needs a state_dict, (name, tensor) "
                                   "pairs such as model.named_parameters(), or tensors")
    for n, t in items:
        if not torch.is_tensor(t):
            # Skipping it would leave the ranks apart without a word.
            raise InvalidArgumentError(
                "broadcast_parameters: %r is a %s, not a tensor; broadcast it with "
                "broadcast_object, or leave it out" % (n, type(t).__name__))
    items = [(n, t.data if isinstance(t, torch.nn.Parameter) else t) for n, t in items]
    if name_map is None:
        shared = [naming.Shared(prefix + n) for n, _ in items]
    else:
        shared = [naming.Shared(naming.BROADCAST_PREFIX + s.name, s.perm)
                  for s in naming.resolve(name_map, [n for n, _ in items])]
        naming.verify_agreement({s.name: (s.shared_shape(t.shape), _tensors.dtype_name(t))
                                 for (_, t), s in zip(items, shared)}, "broadcast_parameters",
                                process_set)
    pending = []
    for (_, target), s in zip(items, shared):
        if s.perm is None and target.is_contiguous():
            pending.append((None, s, ops.broadcast_async_(target, root_rank, name=s.name,
                                                          process_set=process_set)))
        else:
            view = target if s.perm is None else target.permute(s.perm)
            pending.append((target, s, ops.broadcast_async(view, root_rank, name=s.name,
                                                           process_set=process_set)))
    for target, s, handle in pending:
        result = handle.wait()
        if target is not None:
            target.copy_(result if s.perm is None else result.permute(s.inverse))


def _torch_dumps(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _torch_loads(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), weights_only=False)


def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None,
                     process_set: Optional[ProcessSet] = None) -> Any:
    """root_rank's picklable object (tensors included) on every rank; if
    the root cannot serialize it, its error is raised on every rank."""
    _ps.id_of(process_set)
    return _objects.broadcast_object(obj, root_rank, name=name or "torch.broadcast_object",
                                     process_set=process_set, dumps=_torch_dumps,
                                     loads=_torch_loads)


def allgather_object(obj: Any, name: Optional[str] = None,
                     process_set: Optional[ProcessSet] = None) -> List[Any]:
    """A list of every rank's picklable object, in rank order."""
    return _objects.allgather_object(obj, name=name, process_set=process_set)


def broadcast_optimizer_state(optimizer: Any, root_rank: int = 0, model: Any = None,
                              process_set: Optional[ProcessSet] = None) -> None:
    """Makes every rank's optimizer state (buffers such as momentum, step
    counts, and hyper-parameters like lr in param_groups) equal root_rank's.

    As Horovod does, an optimizer with no state yet first takes one local
    step on zero gradients, so that its state exists (Adam then counts that
    step: a script gets Horovod's numbers, step for step). ``model``, as in
    Horovod, names the sparse parameters (``nn.Embedding(sparse=True)``) whose
    zero gradient must be sparse for that step under SGD (SparseAdam's always
    are). LBFGS, whose step needs a closure, is copied as it is."""
    _ps.id_of(process_set)
    if hasattr(optimizer, "broadcast_state"):  # sharded: each rank takes its shard of root's
        return optimizer.broadcast_state(root_rank)
    sparse = _sparse_parameters(model)
    inner = getattr(optimizer, "optimizer", optimizer)
    if not inner.state_dict()["state"] and not isinstance(inner, torch.optim.LBFGS):
        _create_state(inner, sparse)
    state = broadcast_object(inner.state_dict() if world.rank() == root_rank else None,
                             root_rank, name="broadcast.optimizer_state",
                             process_set=process_set)
    if world.rank() != root_rank:
        inner.load_state_dict(state)
    _broadcast_compression_state(optimizer, root_rank, process_set)


def _broadcast_compression_state(optimizer, root_rank, process_set):
    """The compressor's shared state (PowerSGD's Q and step counts) from
    root_rank; each rank keeps its own error buffers (a rank that has none,
    e.g. one that joined an elastic job, starts from zero)."""
    state = compression_state_of(optimizer)
    if state is None:
        return
    shared = broadcast_object(shared_part(state) if world.rank() == root_rank else None, root_rank,
                              name="broadcast.compression_state", process_set=process_set)
    if world.rank() != root_rank:
        optimizer.load_compression_state(shared)


def _sparse_parameters(model):
    if model is None:
        return set()
    if not isinstance(model, torch.nn.Module):
        raise InvalidArgumentError("broadcast_optimizer_state: model= takes a torch.nn.Module, "
                                   "not %s" % type(model).__name__)
    return {id(p) for m in model.modules()
            if isinstance(m, torch.nn.Embedding) and m.sparse for p in m.parameters()}


def _create_state(optimizer, sparse):
    """Horovod's initialising step: zero gradients, one local step (the
    wrapped optimizer's own, so nothing is communicated). Gradients are
    sparse where the step needs them so: SparseAdam's, and SGD's for the
    parameters in ``sparse`` (ids)."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
                if isinstance(optimizer, torch.optim.SparseAdam) or \
                        (isinstance(optimizer, torch.optim.SGD) and id(p) in sparse):
                    p.grad = p.grad.to_sparse()
    optimizer.step()
