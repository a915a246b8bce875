"""Periodic synchronization (local SGD): communicate every K steps, not every step.

Ranks step on their own gradients and average their *parameters* (and,
optionally, optimizer buffers such as momentum) every ``period`` steps. This
trades some statistical efficiency for far less communication. When to sync
is fuseopt.training.local_sgd's rule, shared with the Keras callback.
"""
from typing import Any, Callable, Optional

import torch

from ..training.local_sgd import SyncRule, relative_drift
from . import ops
from .functions import broadcast_parameters


class LocalSGD:
    """Wraps an ordinary (not Distributed) optimizer::

        opt = LocalSGD(torch.optim.SGD(model.parameters(), lr=0.1), model, period=4)
        loss.backward(); opt.step(); opt.zero_grad()

    ``step()`` steps locally and, every ``period`` steps, averages the
    model's parameters and buffers across ranks (``sync_optimizer_state``
    also averages floating-point optimizer state such as momentum).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, model: torch.nn.Module,
                 period: int = 4, sync_optimizer_state: bool = False, root_rank: int = 0,
                 _rule: Optional[SyncRule] = None) -> None:
        self.rule = _rule or SyncRule(period)
        self.optimizer = optimizer
        self.model = model
        self.sync_optimizer_state = sync_optimizer_state
        broadcast_parameters(model.state_dict(), root_rank, prefix="local_sgd.init.")
        self._anchor = self._snapshot()

    @property
    def period(self) -> int:
        """Steps between syncs (AdaptiveLocalSGD: the most steps between them)."""
        return self.rule.period

    @property
    def steps(self) -> int:
        """Steps taken so far."""
        return self.rule.steps

    @property
    def syncs(self) -> int:
        """Syncs so far."""
        return self.rule.syncs

    @property
    def last_drift(self) -> float:
        """The largest relative drift of any rank at the last check (adaptive
        rule only; 0.0 before the first check)."""
        return self.rule.last_drift

    @property
    def param_groups(self) -> Any:
        """The wrapped optimizer's parameter groups (for LR schedulers)."""
        return self.optimizer.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        """The wrapped optimizer's zero_grad."""
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        """The wrapped optimizer's state_dict (this rank's: call sync() first
        for one every rank shares)."""
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        """Loads the wrapped optimizer's state."""
        self.optimizer.load_state_dict(state_dict)

    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """Steps the wrapped optimizer on this rank's gradients, then syncs
        when the rule says so. Returns the closure's loss, if any."""
        loss = self.optimizer.step(closure)
        if self.rule.after_step(self._local_drift):
            self.sync()
        return loss

    def _snapshot(self):
        if self.rule.threshold is None:
            return None
        return [p.detach().clone() for p in self.model.parameters()]

    def _local_drift(self):
        return relative_drift((float((p.detach() - a).pow(2).sum()), float(a.pow(2).sum()))
                              for p, a in zip(self.model.parameters(), self._anchor))

    def sync(self) -> None:
        """Averages parameters (and optimizer state if asked) now."""
        tensors = [(n, t) for n, t in self.model.state_dict().items()
                   if torch.is_floating_point(t)]
        if self.sync_optimizer_state:
            for i, p in enumerate(self.model.parameters()):
                for key, value in self.optimizer.state.get(p, {}).items():
                    if torch.is_tensor(value) and torch.is_floating_point(value) and value.dim():
                        tensors.append(("opt.%d.%s" % (i, key), value))
        handles = [ops.allreduce_async_(t, name="local_sgd." + n, op=ops.Average)
                   for n, t in tensors]
        for h in handles:
            h.wait()
        self.rule.synced()
        self._anchor = self._snapshot()


class AdaptiveLocalSGD(LocalSGD):
    """Syncs when the models may have drifted apart (the largest relative
    drift of any rank exceeds ``threshold``, measured from ``min_period``
    steps after a sync on), or at the latest every ``max_period`` steps."""

    def __init__(self, optimizer: torch.optim.Optimizer, model: torch.nn.Module,
                 threshold: float = 1e-3, max_period: int = 32, min_period: int = 1,
                 sync_optimizer_state: bool = False, root_rank: int = 0) -> None:
        super().__init__(optimizer, model, max_period, sync_optimizer_state, root_rank,
                         _rule=SyncRule(max_period, threshold, min_period))

    @property
    def threshold(self) -> Optional[float]:
        """Relative drift above which the ranks sync."""
        return self.rule.threshold

    @property
    def min_period(self) -> int:
        """Steps after a sync before the drift is checked again."""
        return self.rule.min_period
