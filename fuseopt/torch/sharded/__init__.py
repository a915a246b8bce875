"""The sharded optimizer (ZeRO stages 1 and 2): ``DistributedOptimizer(opt,
shard="optimizer" | "gradients")`` and ``ZeroRedundancyOptimizer``."""
from .optimizer import ShardedOptimizer
from .zero_redundancy import ZeroRedundancyOptimizer
from .state import merge_shards

__all__ = ["ShardedOptimizer", "ZeroRedundancyOptimizer", "merge_shards"]
