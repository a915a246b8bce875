"""The sharded optimizer's plan (fuseopt/training/sharding.py): owners
balanced by bytes within the stated bound, the same for the same sizes."""
import random

import pytest

from fuseopt.base.errors import InvalidArgumentError
from fuseopt.training import sharding


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7])
def test_owners_balance_within_mean_plus_largest(size):
    rng = random.Random(size)
    for _ in range(50):
        nbytes = [rng.choice([4, 64, 4096, 1 << 20, 3 << 20]) for _ in range(rng.randint(1, 40))]
        owner = sharding.owners(nbytes, size)
        assert all(0 <= r < size for r in owner)
        shares = sharding.shares(nbytes, owner, size)
        assert sum(shares) == sum(nbytes)
        assert max(shares) <= sum(nbytes) / size + max(nbytes), (shares, nbytes)
        assert sharding.owners(list(nbytes), size) == owner  # deterministic


def test_equal_sizes_go_round_robin_and_ties_to_the_lower_rank():
    assert sharding.owners([8, 8, 8, 8, 8], 2) == [0, 1, 0, 1, 0]
    # Largest first: the 100 goes to rank 0, then the rest fill rank 1 up.
    assert sharding.owners([10, 100, 30, 50], 2) == [1, 0, 1, 1]
    with pytest.raises(InvalidArgumentError):
        sharding.owners([4], 0)


def test_another_world_size_gives_another_plan():
    nbytes = [400, 300, 200, 100, 100]
    assert sharding.owners(nbytes, 2) != sharding.owners(nbytes, 3)
    assert sorted(set(sharding.owners(nbytes, 3))) == [0, 1, 2]


def test_stage_names():
    for stage in ("optimizer", "gradients"):
        sharding.check_stage(stage)
    with pytest.raises(InvalidArgumentError, match="ZeRO-1"):
        sharding.check_stage("zero3")


def test_merge_shards_needs_one_shard_of_each_rank():
    from fuseopt.torch.sharded import merge_shards

    def shard(rank, size, state):
        return {"state": state, "param_groups": [{"params": [0, 1]}],
                "fuseopt_shard": {"rank": rank, "size": size}}
    whole = merge_shards([shard(1, 2, {1: {"m": 2}}), shard(0, 2, {0: {"m": 1}})])
    assert whole == {"state": {0: {"m": 1}, 1: {"m": 2}}, "param_groups": [{"params": [0, 1]}]}
    for bad in ([shard(0, 2, {})], [shard(0, 2, {}), shard(0, 2, {})],
                [shard(0, 2, {}), {"state": {}}], [shard(0, 3, {}), shard(1, 3, {})], []):
        with pytest.raises(InvalidArgumentError, match="merge_shards needs"):
            merge_shards(bad)
