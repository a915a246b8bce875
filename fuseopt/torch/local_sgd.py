"""Periodic synchronization (local SGD): communicate every K steps, not every step.

Ranks step on their own gradients and average their *parameters* (and,
optionally, optimizer buffers such as momentum) every ``period`` steps. This
trades some statistical efficiency for far less communication.

The adaptive variant decides when to sync from how far the ranks' models
may have drifted. The decision is collective: each rank computes its local
drift, one tiny allreduce takes the maximum, and every rank acts on the same
number. A rule evaluated on local numbers alone could send ranks down
different paths and hang the job.
"""
import torch

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

    def __init__(self, optimizer, model, period=4, sync_optimizer_state=False, root_rank=0):
        if period < 1:
            raise ValueError("period must be >= 1")
        self.optimizer = optimizer
        self.model = model
        self.period = period
        self.sync_optimizer_state = sync_optimizer_state
        self.steps = 0
        self.syncs = 0
        broadcast_parameters(model.state_dict(), root_rank, prefix="local_sgd.init.")

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict):
        self.optimizer.load_state_dict(state_dict)

    def _should_sync(self):
        return self.steps % self.period == 0

    def step(self, closure=None):
        loss = self.optimizer.step(closure)
        self.steps += 1
        if self._should_sync():
            self.sync()
        return loss

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
        self.syncs += 1
        self._after_sync()

    def _after_sync(self):
        pass


class AdaptiveLocalSGD(LocalSGD):
    """Syncs when the models may have drifted apart, or at the latest every
    ``max_period`` steps.

    Drift of a rank: ||theta - theta_at_last_sync||^2 / ||theta_at_last_sync||^2.
    After each step the ranks take the maximum drift with one allreduce; all
    sync together when it exceeds ``threshold``.
    """

    def __init__(self, optimizer, model, threshold=1e-3, max_period=32, min_period=1,
                 sync_optimizer_state=False, root_rank=0):
        super().__init__(optimizer, model, max_period, sync_optimizer_state, root_rank)
        self.threshold = threshold
        self.min_period = min_period
        self._since_sync = 0
        self.last_drift = 0.0
        self._anchor = self._snapshot()

    def _snapshot(self):
        return [p.detach().clone() for p in self.model.parameters()]

    def _should_sync(self):
        self._since_sync += 1
        num = sum(float((p.detach() - a).pow(2).sum())
                  for p, a in zip(self.model.parameters(), self._anchor))
        den = sum(float(a.pow(2).sum()) for a in self._anchor) or 1.0
        drift = ops.allreduce(torch.tensor([num / den], dtype=torch.float64),
                              name="local_sgd.drift", op=ops.Max)
        self.last_drift = float(drift[0])
        if self._since_sync < self.min_period:
            return False
        return self.last_drift > self.threshold or self._since_sync >= self.period

    def _after_sync(self):
        self._since_sync = 0
        self._anchor = self._snapshot()
