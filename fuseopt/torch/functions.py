"""Making every rank start from the same model and optimizer state."""
import io

import torch

from .. import objects as _objects
from .. import runtime
from ..errors import InvalidArgumentError
from . import ops


def broadcast_parameters(params, root_rank=0, prefix="broadcast.param."):
    """Copies root_rank's tensors into everyone's, in place.

    ``params``: a ``state_dict()`` (tensors and buffers) or an iterable of
    ``(name, tensor)`` such as ``model.named_parameters()``. All broadcasts
    are submitted at once so they fuse."""
    items = sorted(params.items()) if isinstance(params, dict) else list(params)
    if not all(isinstance(item, tuple) and len(item) == 2 for item in items):
        raise InvalidArgumentError("broadcast_parameters needs a state_dict or (name, tensor) "
                                   "pairs such as model.named_parameters()")
    pending = []
    for name, tensor in items:
        if not torch.is_tensor(tensor):
            continue
        target = tensor.data if isinstance(tensor, torch.nn.Parameter) else tensor
        if target.is_contiguous():
            pending.append((None, ops.broadcast_async_(target, root_rank, name=prefix + name)))
        else:
            pending.append((target, ops.broadcast_async(target, root_rank, name=prefix + name)))
    for target, handle in pending:
        result = handle.wait()
        if target is not None:
            target.copy_(result)


def broadcast_object(obj, root_rank=0, name=None):
    """root_rank's picklable object (tensors included) on every rank."""
    if runtime.rank() == root_rank:
        buf = io.BytesIO()
        torch.save(obj, buf)
        payload = buf.getvalue()
    else:
        payload = None
    payload = _objects.broadcast_object(payload, root_rank, name=name or "torch.broadcast_object")
    return obj if runtime.rank() == root_rank else torch.load(io.BytesIO(payload),
                                                              weights_only=False)


def allgather_object(obj, name=None):
    """A list of every rank's picklable object, in rank order."""
    return _objects.allgather_object(obj, name=name)


def broadcast_optimizer_state(optimizer, root_rank=0):
    """Makes every rank's optimizer state (buffers such as momentum, step
    counts, and hyper-parameters like lr in param_groups) equal root_rank's.
    Works whether or not the state has been created yet."""
    inner = getattr(optimizer, "optimizer", optimizer)
    state = broadcast_object(inner.state_dict() if runtime.rank() == root_rank else None,
                             root_rank, name="broadcast.optimizer_state")
    if runtime.rank() != root_rank:
        inner.load_state_dict(state)
