"""Periodic synchronization (local SGD): communicate every K steps, not every step.

Ranks step on their own gradients and average their *parameters* (and,
optionally, optimizer buffers such as momentum) every ``period`` steps. This
trades some statistical efficiency for far less communication. When to sync
is fuseopt.local_sgd's rule, shared with the Keras callback.
"""
import torch

from ..local_sgd import SyncRule, relative_drift
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

    def __init__(self, optimizer, model, period=4, sync_optimizer_state=False, root_rank=0,
                 _rule=None):
        self.rule = _rule or SyncRule(period)
        self.optimizer = optimizer
        self.model = model
        self.sync_optimizer_state = sync_optimizer_state
        broadcast_parameters(model.state_dict(), root_rank, prefix="local_sgd.init.")
        self._anchor = self._snapshot()

    period = property(lambda self: self.rule.period)
    steps = property(lambda self: self.rule.steps)
    syncs = property(lambda self: self.rule.syncs)
    last_drift = property(lambda self: self.rule.last_drift)

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict):
        self.optimizer.load_state_dict(state_dict)

    def step(self, closure=None):
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

    def sync(self):
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

    def __init__(self, optimizer, model, threshold=1e-3, max_period=32, min_period=1,
                 sync_optimizer_state=False, root_rank=0):
        super().__init__(optimizer, model, max_period, sync_optimizer_state, root_rank,
                         _rule=SyncRule(max_period, threshold, min_period))

    threshold = property(lambda self: self.rule.threshold)
    min_period = property(lambda self: self.rule.min_period)
