"""``DistributedOptimizer(optimizer, op=hvd.Adasum)``: Horovod's Adasum optimizer.

Adasum combines *updates*, not gradients: every rank steps its own optimizer
on its own gradients, and the ranks then combine the parameter changes with
Adasum (see native/src/transport/mpi/adasum.h), so that orthogonal updates
add and parallel ones are not over-counted. That is what Horovod's
``_DistributedAdasumOptimizer`` computes; here the changes of all parameters
go to the core in one grouped allreduce at ``step()``, where they fuse into
buckets (per-tensor coefficients are kept inside a bucket).
"""
import torch

from ..core import process_sets as _ps
from ..training.compression import NoneCompressor
from ..base.errors import UnsupportedError
from . import ops
from ._wrapper import OptimizerWrapper


class AdasumOptimizer(OptimizerWrapper):
    """Steps ``optimizer`` locally, then makes every rank's parameters the
    start of the step plus the Adasum of all ranks' changes. Needs a
    power-of-two number of ranks and float parameters on the CPU.
    Parameters are matched across ranks by their order in ``param_groups``
    (``named_parameters`` is accepted for Horovod's signature)."""

    def __init__(self, optimizer, named_parameters=None, compression=None,
                 backward_passes_per_step=1, process_set=None):
        self._process_set = process_set
        _ps.id_of(process_set)
        if compression is not None and not isinstance(compression, NoneCompressor):
            raise UnsupportedError("DistributedOptimizer(op=Adasum) does not take compression")
        if backward_passes_per_step != 1:
            raise UnsupportedError("DistributedOptimizer(op=Adasum) does not take "
                                   "backward_passes_per_step")
        self._optimizer = optimizer
        # Parameters in param_groups order, the same on every rank; the
        # changes travel under fixed names so the response cache knows them.
        self._params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
        self._starts = [p.detach().clone() for p in self._params]

    def zero_grad(self, set_to_none=True):
        self._optimizer.zero_grad(set_to_none=set_to_none)

    def synchronize(self):
        """Nothing to wait for: the combination happens in step()."""

    def step(self, closure=None):
        loss = self._optimizer.step(closure)
        with torch.no_grad():
            deltas = [p.detach() - s for p, s in zip(self._params, self._starts)]
            combined = ops.grouped_allreduce(deltas, name="adasum.delta", op=ops.Adasum,
                                             process_set=self._process_set) if deltas else []
            for p, s, d in zip(self._params, self._starts, combined):
                p.copy_(s + d)
                s.copy_(p)
        return loss

    def __repr__(self):
        return "AdasumOptimizer(%r, ranks=%d)" % (self._optimizer,
                                                   _ps.size_of(self._process_set))
