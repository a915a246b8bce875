"""Sharded optimizer state (ZeRO stages 1 and 2): which rank owns which
parameter, and the buckets the gradients travel in. Framework-free: the
bindings give sizes and get plans.

Parameters are never split: an optimizer that looks at a whole parameter
(LAMB's and LARS' per-layer norms, Adafactor's factored moments, a user's
subclass) steps it whole on its owner. The owners are chosen by bytes,
largest parameter first, each to the rank that holds the fewest bytes so
far (ties: the lower rank), so the plan is the same on every rank and any
rank's share is at most the mean plus the largest parameter.

A bucket is a run of parameters in the order their gradients become ready,
closed at the bucket cap (as the unsharded optimizer's buckets) or where the
dtype changes. Its fusion buffer lists the parameters by owner, so that
rank r's part is one slice: an alltoall sends each owner its slice of every
rank's gradients (the bytes of a reduce-scatter, none padded), the owner
sums what it got, and after the step an allgather of the owners' slices
rebuilds every parameter (the bytes of an all-gather)."""
from typing import List, NamedTuple, Sequence

from ..base.errors import InvalidArgumentError

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


class Bucket(NamedTuple):
    """Parameters (indices) in fusion-buffer order (by owner, then by
    readiness), and the number of elements of each rank's slice."""
    params: List[int]
    splits: List[int]


def buckets(ready_order: Sequence[int], numel: Sequence[int], itemsize: Sequence[int],
            kinds: Sequence[object], owner: Sequence[int], size: int,
            cap_bytes: float) -> List[Bucket]:
    """Buckets of parameters taken in ``ready_order``; ``kinds`` (a dtype,
    a device) must be equal within a bucket."""
    out = []
    run: List[int] = []
    held = 0

    def close():
        if run:
            ordered = sorted(run, key=lambda i: owner[i])  # stable: readiness within an owner
            splits = [0] * size
            for i in run:
                splits[owner[i]] += numel[i]
            out.append(Bucket(ordered, splits))
        run.clear()

    for i in ready_order:
        if run and kinds[i] != kinds[run[0]]:
            close()
            held = 0
        run.append(i)
        held += numel[i] * itemsize[i]
        if held >= cap_bytes:
            close()
            held = 0
    close()
    return out


def shares(nbytes: Sequence[int], owner: Sequence[int], size: int) -> List[int]:
    """Bytes each rank owns."""
    out = [0] * size
    for n, r in zip(nbytes, owner):
        out[r] += n
    return out
