"""Sharded optimizer state (ZeRO stages 1 and 2): which rank owns which
parameter, or which piece of it. Framework-free: the bindings give sizes and
get plans.

Whole parameters first: an optimizer that looks at a whole parameter
(LAMB's and LARS' per-layer norms, Adafactor's factored moments, a user's
subclass) must step it whole on its owner. The owners are chosen by bytes,
largest parameter first, each to the rank that holds the fewest bytes so
far (ties: the lower rank), so the plan is the same on every rank and any
rank's share is at most the mean plus the largest parameter.

That bound is loose when one parameter is a large part of the model (an
embedding, a wide output layer): at 4 ranks a matrix of half the model
leaves half the state on one rank. So when the largest share would exceed
the mean by more than BALANCE_BOUND, and the optimizer updates each element
on its own (the binding says which parameters may be split), the model is
cut into equal contiguous byte ranges instead, in parameter order: rank r
owns range r, a parameter that straddles a cut is split into pieces of whole
elements, and a cut that falls inside a parameter that may not be split
moves to its nearer end. Every rank's share is then within one parameter
piece's alignment of the mean, and at most size - 1 parameters are split.

Each gradient (or piece) then travels to its owner alone (a reduction to one
rank) and each parameter (or piece) back from it (a broadcast): the bytes of a
reduce-scatter and an all-gather, none padded."""
from typing import List, NamedTuple, Sequence

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


# Whole parameters unless the largest share would exceed the mean by more.
BALANCE_BOUND = 0.05
# Cuts inside a parameter fall on multiples of this many bytes (a cache line),
# so that every piece starts aligned for the vector kernels.
CUT_ALIGN = 64


class Piece(NamedTuple):
    """Elements [first, last) of a parameter, owned by rank."""
    rank: int
    first: int
    last: int


def plan(numels: Sequence[int], itemsizes: Sequence[int], size: int,
         splittable: Sequence[bool]) -> List[List[Piece]]:
    """Each parameter's pieces in element order: one covering it whole, or
    several when the whole-parameter owners would leave a rank more than
    BALANCE_BOUND over the mean (see the module's docstring)."""
    nbytes = [n * s for n, s in zip(numels, itemsizes)]
    owner = owners(nbytes, size)
    whole = [[Piece(r, 0, n)] for r, n in zip(owner, numels)]
    total = sum(nbytes)
    if size == 1 or not any(splittable) or \
            max(shares(nbytes, owner, size)) <= total / size * (1 + BALANCE_BOUND):
        return whole
    return _contiguous(numels, itemsizes, size, splittable, total)


def _contiguous(numels, itemsizes, size, splittable, total):
    """Rank r owns bytes [r * total / size, (r + 1) * total / size) of the
    parameters laid end to end, cuts adjusted as the module says."""
    cuts = []  # the byte offset where each rank r > 0 starts
    start = 0
    bounds = []  # each parameter's [start, end) in bytes
    for n, s in zip(numels, itemsizes):
        bounds.append((start, start + n * s))
        start += n * s
    i = 0
    for r in range(1, size):
        cut = total * r // size
        while i < len(bounds) and bounds[i][1] <= cut:
            i += 1
        if i < len(bounds) and bounds[i][0] < cut:
            lo, hi = bounds[i]
            step = itemsizes[i] * max(1, CUT_ALIGN // itemsizes[i])
            if splittable[i]:
                cut = lo + (cut - lo) // step * step
            else:
                cut = lo if cut - lo <= hi - cut else hi
        cuts.append(max(cut, cuts[-1] if cuts else 0))
    edges = [0] + cuts + [total]
    out = []
    for (lo, hi), s in zip(bounds, itemsizes):
        pieces = []
        for r in range(size):
            a, b = max(lo, edges[r]), min(hi, edges[r + 1])
            if a < b:
                pieces.append(Piece(r, (a - lo) // s, (b - lo) // s))
        if not pieces:  # an empty parameter: whoever's range it sits at
            pieces.append(Piece(max(r for r in range(size) if edges[r] <= lo), 0, 0))
        out.append(pieces)
    return out


def piece_shares(nbytes: Sequence[int], pieces: Sequence[Sequence[Piece]],
                 size: int) -> List[int]:
    """Bytes each rank owns under a plan."""
    out = [0] * size
    for n, ps in zip(nbytes, pieces):
        numel = ps[-1].last
        for p in ps:
            out[p.rank] += (n // numel if numel else 0) * (p.last - p.first)
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
