"""What a sharded optimizer computes over the whole model's averaged
gradients while each rank holds only its owned share of them: the gradient
norm for clipping, and whether any average is not finite (GradScaler). One
tiny allreduce each; every rank gets the same answer."""
from typing import List, Sequence

import torch

from ..ops import Max, Sum, allreduce


def _finite(grads: Sequence[torch.Tensor]) -> bool:
    """A sum is not finite iff an element is not (or it overflows)."""
    sums = [g.sum(dtype=torch.float32) for g in grads if g.is_floating_point()]
    return not sums or bool(torch.isfinite(torch.stack(sums)).all())


def agree_on_finiteness(owned: List[torch.Tensor], param_groups, process_set) -> None:
    """A GradScaler skips the step when the gradients it sees hold an
    infinity or NaN. Each rank sees its own share of the averages, so the
    ranks would disagree, and one stepping alone would wait for ever in
    the parameter broadcasts (and the loss scales would drift apart).
    They agree instead: where any owner's average is not finite, a rank
    whose visible gradients (those in ``param_groups``) are all finite marks
    one of them infinite, so every rank's scaler skips the step and lowers
    its scale alike."""
    mine = _finite([p.grad for p in owned if p.grad is not None])
    flag = torch.tensor([0.0 if mine else 1.0])
    if allreduce(flag, name="shard.finite", op=Max, process_set=process_set)[0] > 0:
        shown = [t.grad for g in param_groups for t in g["params"] if t.grad is not None]
        if shown and _finite(shown):
            shown[0].view(-1)[0] = float("inf")


def clip_grad_norm(owned: List[torch.Tensor], max_norm: float, norm_type: float,
                   process_set) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` over the whole model, each rank
    adding its owned gradients' share of the norm; returns the total norm."""
    grads = [p.grad for p in owned if p.grad is not None]
    norm_type = float(norm_type)
    zero = torch.zeros(1, dtype=torch.float64)
    if norm_type == float("inf"):
        local = torch.stack([g.detach().abs().max().double() for g in grads] + [zero[0]])
        total = allreduce(local.max().reshape(1), name="shard.clip.max", op=Max,
                          process_set=process_set)[0]
    else:
        local = torch.stack([g.detach().double().norm(norm_type) ** norm_type
                             for g in grads] + [zero[0]])
        total = allreduce(local.sum().reshape(1), name="shard.clip.sum", op=Sum,
                          process_set=process_set)[0] ** (1.0 / norm_type)
    scale = float(max_norm) / (float(total) + 1e-6)
    if scale < 1.0:
        for g in grads:
            g.mul_(scale)
    return total.to(torch.float32)
