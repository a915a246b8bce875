"""Sharded optimizer state (ZeRO stages 1 and 2): which rank owns which
parameter, and the buckets the gradients travel in. Framework-free: the
bindings give sizes and get plans.

Parameters are never split: an optimizer that looks at a whole parameter
(LAMB's and LARS' per-layer norms, Adafactor's factored moments, a user's
subclass) steps it whole on its owner. The owners are chosen by bytes,
largest parameter first, each to the rank that holds the fewest bytes so
far (ties: the lower rank), so the plan is the same on every rank and any
rank's share is at most the mean plus the largest parameter.

Each gradient then travels to its owner alone (a reduction to one rank) and
each parameter back from it (a broadcast): the bytes of a reduce-scatter and
an all-gather, none padded."""
from typing import List, Sequence

from ..base.errors import InvalidArgumentError, MismatchError

# The spellings of DistributedOptimizer(shard=...): ZeRO-1 and ZeRO-2.
OPTIMIZER = "optimizer"
GRADIENTS = "gradients"
STAGES = (OPTIMIZER, GRADIENTS)


def check_stage(shard):
    if shard not in STAGES:
        raise InvalidArgumentError("shard must be %r (optimizer state and step, ZeRO-1) or %r "
                                   "(also gradients, ZeRO-2), not %r"
                                   % (OPTIMIZER, GRADIENTS, shard))


def owners(nbytes: Sequence[int], size: int) -> List[int]:
    """The owning rank of each parameter (bytes each), balanced by bytes."""
    if size < 1:
        raise InvalidArgumentError("a plan needs at least one rank, not %d" % size)
    load = [0] * size
    out = [0] * len(nbytes)
    for i in sorted(range(len(nbytes)), key=lambda i: (-nbytes[i], i)):
        rank = min(range(size), key=lambda r: (load[r], r))
        out[i] = rank
        load[rank] += nbytes[i]
    return out


def shares(nbytes: Sequence[int], owner: Sequence[int], size: int) -> List[int]:
    """Bytes each rank owns."""
    out = [0] * size
    for n, r in zip(nbytes, owner):
        out[r] += n
    return out


def check_same_plan(mine: list, every: list, what: str) -> None:
    """``every`` is each rank's ``mine`` (allgathered): one (name, shape,
    dtype) per parameter. A rank whose list differs would reach owners that
    plan differently, so every rank raises MismatchError naming the first
    difference."""
    for rank, theirs in enumerate(every):
        if theirs != mine:
            differ = next(((a, b) for a, b in zip(mine, theirs) if a != b), None)
            raise MismatchError(
                "ranks disagree about the %s of a sharded optimizer: rank %d has %d "
                "(first difference: %s), this rank %d" % (
                    what, rank, len(theirs),
                    "%s against %s here" % (differ[1], differ[0]) if differ
                    else "a different count", len(mine)))
