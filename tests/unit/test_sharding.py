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


def _check_plan(numels, itemsizes, size, splittable):
    pieces = sharding.plan(numels, itemsizes, size, splittable)
    assert sharding.plan(list(numels), list(itemsizes), size, list(splittable)) == pieces
    for n, s, ok, ps in zip(numels, itemsizes, splittable, pieces):
        # Pieces cover the parameter in order, once; only splittable ones split,
        # and cuts inside a parameter fall on whole cache lines.
        assert ps[0].first == 0 and ps[-1].last == n, ps
        assert all(a.last == b.first for a, b in zip(ps, ps[1:])), ps
        assert all(0 <= p.rank < size for p in ps)
        assert len({p.rank for p in ps}) == len(ps), ps
        assert ok or len(ps) == 1, ps
        assert all(p.first * s % sharding.CUT_ALIGN == 0 for p in ps[1:]), ps
    return pieces


@pytest.mark.parametrize("size", [2, 3, 4, 7])
def test_plan_keeps_the_stated_bound_or_splits(size):
    rng = random.Random(100 + size)
    for _ in range(100):
        k = rng.randint(1, 20)
        numels = [rng.choice([0, 1, 10, 1000, 1 << 16, 3 << 18]) for _ in range(k)]
        itemsizes = [rng.choice([2, 4, 8]) for _ in range(k)]
        splittable = [rng.random() < 0.8 for _ in range(k)]
        pieces = _check_plan(numels, itemsizes, size, splittable)
        nbytes = [n * s for n, s in zip(numels, itemsizes)]
        shares = sharding.piece_shares(nbytes, pieces, size)
        total = sum(nbytes)
        assert sum(shares) == total
        split = any(len(ps) > 1 for ps in pieces)
        if not split:  # whole parameters: the greedy owners, which met the bound
            assert [ps[0].rank for ps in pieces] == sharding.owners(nbytes, size) or \
                max(shares) > total / size * (1 + sharding.BALANCE_BOUND)
        # Over the mean by at most the bound, one alignment step per cut, or an
        # unsplittable parameter's half (its cut moves to its nearer end).
        fixed = max([n for n, ok in zip(nbytes, splittable) if not ok] or [0])
        slack = max(total / size * sharding.BALANCE_BOUND, 2 * sharding.CUT_ALIGN + 8,
                    fixed / 2 + sharding.CUT_ALIGN + 8)
        if split:
            assert max(shares) <= total / size + slack * 2, (shares, nbytes, splittable)
            assert sum(len(ps) - 1 for ps in pieces) <= size - 1


def test_one_dominant_matrix_is_split_and_the_rest_stay_whole():
    # At 4 ranks, a matrix of half the model: whole owners would leave half
    # the state on one rank; the plan cuts it in two pieces instead.
    numels = [1 << 20, 1 << 18, 1 << 18, 1 << 18, 1 << 18]
    pieces = _check_plan(numels, [4] * 5, 4, [True] * 5)
    assert [len(ps) for ps in pieces] == [2, 1, 1, 1, 1], pieces
    assert sharding.piece_shares([n * 4 for n in numels], pieces, 4) == [2 << 20] * 4
    # The same, not splittable (an optimizer that needs whole parameters):
    # whole owners, loose as they are.
    pieces = _check_plan(numels, [4] * 5, 4, [False] * 5)
    assert all(len(ps) == 1 for ps in pieces)
    # Balanced within the bound already: whole parameters, the greedy owners.
    even = [1000, 1000, 1000, 1000]
    assert sharding.plan(even, [4] * 4, 2, [True] * 4) == \
        [[sharding.Piece(r, 0, 1000)] for r in sharding.owners([4000] * 4, 2)]


def test_assembly_joins_pieces_and_cuts_them_again():
    import torch
    from fuseopt.torch.sharded.state import Assembly, part_of

    whole = {"step": torch.tensor(3.0), "exp_avg": torch.arange(12.0).reshape(3, 4),
             "note": "kept as is"}
    left, right = part_of(whole, 0, 5, 12), part_of(whole, 5, 12, 12)
    assert left["exp_avg"].tolist() == [0, 1, 2, 3, 4] and right["exp_avg"].shape == (7,)
    assert left["step"] is whole["step"] and right["note"] == "kept as is"
    joined = Assembly(0, 12, (3, 4))
    joined.add(5, 12, right)
    joined.add(0, 5, left)
    out = joined.result("p")
    assert torch.equal(out["exp_avg"], whole["exp_avg"]) and out["step"] == 3.0
    # Another plan's piece, across the old cut.
    middle = Assembly(3, 9)
    middle.add(0, 5, left)
    middle.add(5, 12, right)
    assert middle.result("p")["exp_avg"].tolist() == [3, 4, 5, 6, 7, 8]
    # A piece missing, or state that is not one value per element: refused.
    partial = Assembly(0, 12, (3, 4))
    partial.add(0, 5, left)
    with pytest.raises(InvalidArgumentError, match="shards are missing"):
        partial.result("p")
    with pytest.raises(InvalidArgumentError, match="split_parameters=False"):
        Assembly(0, 6).add(0, 12, {"row_factor": torch.ones(3)})
    # The same elements whole pass through as they are, whatever they hold.
    same = Assembly(0, 12, (3, 4))
    same.add(0, 12, {"row_factor": torch.ones(3)})
    assert same.result("p")["row_factor"].shape == (3,)
