"""ZeroRedundancyOptimizer: torch.distributed.optim's signature over the
sharded optimizer, for gradients that arrive averaged already."""
from ...base.errors import UnsupportedError
from ...core import process_sets as _ps
from ...training import sharding
from .optimizer import ShardedOptimizer


class ZeroRedundancyOptimizer(ShardedOptimizer):
    """torch.distributed.optim.ZeroRedundancyOptimizer's signature over
    fuseopt: the state and step of ``optimizer_class(params, **defaults)``
    sharded across ranks, for gradients that arrive averaged already (DDP,
    or your own allreduce). For fuseopt's own overlapped gradient reduction
    use ``DistributedOptimizer(opt, shard="gradients")``."""

    def __init__(self, params, optimizer_class, process_group=None,
                 parameters_as_bucket_view=False, overlap_with_ddp=False, **defaults):
        if process_group is not None and not isinstance(process_group, _ps.ProcessSet):
            raise UnsupportedError("ZeroRedundancyOptimizer takes a fuseopt ProcessSet as "
                                   "process_group, or None for every rank")
        if overlap_with_ddp:
            raise UnsupportedError("overlap_with_ddp needs DDP's communication hook; use "
                                   "DistributedOptimizer(opt, shard=...) for overlap")
        super().__init__(optimizer_class(params, **defaults), shard=sharding.OPTIMIZER,
                         process_set=process_group, reduce_gradients=False)
