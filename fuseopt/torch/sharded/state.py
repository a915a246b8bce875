"""A sharded optimizer's state: gathered whole for a checkpoint, loaded
whole from any number of ranks, and kept as this rank's shard.

The whole state is a plain optimizer's state_dict (``state`` keyed by each
parameter's position in ``param_groups``, and the groups), so it does not
depend on the world size: a job resumed on another number of ranks loads it
and each rank keeps what it owns under the new plan.

A shard's entry for a piece of a split parameter holds flat state tensors of
the piece's elements; the shard's mark records which elements and the
parameter's shape, so pieces from any plan join (Assembly) into the whole
entry, or into another plan's pieces."""
from typing import Dict, List, Optional, Sequence

import torch

from ...base.errors import InvalidArgumentError
from ..functions import allgather_object, broadcast_object

MARK = "fuseopt_shard"  # what a shard carries about its plan


def _elementwise(value) -> bool:
    """A state tensor with one value per element of the parameter (moments,
    momentum); a 0-d tensor (Adam's step) or a number is per parameter."""
    return torch.is_tensor(value) and value.dim() > 0


class Assembly:
    """One state entry for the elements [first, last) of a parameter, from
    entries of pieces (or of the whole) that cover them, in any order."""

    def __init__(self, first: int, last: int, shape: Optional[Sequence[int]] = None):
        self.first, self.last, self.shape = first, last, shape
        self.entry: Dict = {}
        self.filled = 0

    def add(self, first: int, last: int, entry: dict) -> None:
        if (first, last) == (self.first, self.last) and not self.filled:
            # The same elements (a whole parameter, unsplit): as they are,
            # whatever the optimizer keeps per parameter.
            self.entry, self.filled, self.shape = dict(entry), last - first, None
            return
        a, b = max(first, self.first), min(last, self.last)
        if a > b or (a == b and self.first != self.last):
            return
        for key, value in entry.items():
            if not _elementwise(value):
                self.entry.setdefault(key, value)
                continue
            if value.numel() != last - first:
                raise InvalidArgumentError(
                    "optimizer state %r holds %d values for %d elements of its parameter: "
                    "not one per element, so its parameter cannot be split (pass "
                    "split_parameters=False)" % (key, value.numel(), last - first))
            out = self.entry.get(key)
            if out is None:
                out = self.entry[key] = value.new_empty(self.last - self.first)
            out[a - self.first:b - self.first] = value.reshape(-1)[a - first:b - first]
        self.filled += b - a

    def result(self, what: str) -> dict:
        if self.filled != self.last - self.first:
            raise InvalidArgumentError("the optimizer state of %s covers %d of its elements "
                                       "%d..%d: shards are missing"
                                       % (what, self.filled, self.first, self.last))
        if self.shape is not None:
            return {k: v.reshape(self.shape) if _elementwise(v) else v
                    for k, v in self.entry.items()}
        return self.entry


def part_of(entry: dict, first: int, last: int, numel: int) -> dict:
    """A whole parameter's state entry, cut to its elements [first, last)."""
    assembly = Assembly(first, last)
    assembly.add(0, numel, entry)
    return assembly.result("a parameter")


def wanted(opt) -> Dict[int, tuple]:
    """What this rank keeps, by position: (first, last, shape or None for a
    flat piece) for each parameter it owns whole or in part."""
    out = {}
    for i, k in opt._position.items():
        p = opt._params[i]
        if i in opt._owned:
            out[k] = (0, p.numel(), tuple(p.shape))
        elif i in opt._views:
            first, last, _ = opt._views[i]
            out[k] = (first, last, None)
    return out


def pieces_of(shard: dict) -> dict:
    """The pieces a shard's mark records: position -> [first, last, shape]."""
    mark = shard.get(MARK)
    return (mark.get("pieces") if isinstance(mark, dict) else None) or {}


def spans(shard: dict, k: int, numel: int):
    """(first, last) of the elements shard's entry k holds: a piece's, as its
    mark records, or else all of its parameter's."""
    piece = pieces_of(shard).get(k)
    return (piece[0], piece[1]) if piece is not None else (0, numel)


def local_shard(opt) -> dict:
    """This rank's state (owned parameters and pieces only) and the groups,
    marked with the plan it was taken under."""
    local = opt._optimizer.state_dict()
    pieces = {opt._position[i]: [first, last, list(opt._params[i].shape)]
              for i, (first, last, _) in opt._views.items()}
    return dict(local, **{MARK: {"rank": opt.rank, "size": opt.size,
                                   "positions": sorted(local["state"]), "pieces": pieces}})


def merge_shards(shards: List[dict]) -> dict:
    """The whole state from every rank's ``sharded_state_dict()``."""
    if not shards:
        raise InvalidArgumentError("merge_shards needs the shards of every rank")
    marks = [s.get(MARK) if isinstance(s, dict) else None for s in shards]
    plans = {(m["rank"], m["size"]) for m in marks if isinstance(m, dict)}
    if len(plans) != len(shards) or plans != {(r, len(shards)) for r in range(len(shards))}:
        raise InvalidArgumentError("merge_shards needs one sharded_state_dict() of each rank "
                                   "of one job (got %s)" % sorted(plans))
    whole = {"state": {}, "param_groups": shards[0]["param_groups"]}
    split = {}  # position -> Assembly of the parameter's pieces
    for s in shards:
        pieces = pieces_of(s)
        for k, entry in s["state"].items():
            piece = pieces.get(k)
            if piece is None:
                whole["state"][k] = entry
                continue
            numel = int(torch.Size(piece[2]).numel())
            split.setdefault(k, Assembly(0, numel, piece[2])).add(piece[0], piece[1], entry)
    for k, assembly in split.items():
        whole["state"][k] = assembly.result("parameter %d" % k)
    return whole


def consolidate(opt, to):
    """Collective: the whole state on rank ``to``, None elsewhere."""
    shards = allgather_object(local_shard(opt), name="shard.state",
                              process_set=opt._process_set)
    return merge_shards(shards) if opt.rank == to else None


def load_whole(opt, state_dict):
    """Loads a whole state (or this rank's own shard) and drops what others own."""
    shard = state_dict.get(MARK)
    if shard is not None and (shard["rank"], shard["size"]) != (opt.rank, opt.size):
        raise InvalidArgumentError(
            "this is rank %d of %d's shard of the optimizer state, and this is rank %d of %d: "
            "load the whole state (merge_shards of every rank's shard) instead"
            % (shard["rank"], shard["size"], opt.rank, opt.size))
    plain = {k: v for k, v in state_dict.items() if k != MARK}
    if shard is None:  # a whole state: cut the entries of this rank's pieces out
        plain = dict(plain, state=dict(plain["state"]))
        for i, (first, last, _) in opt._views.items():
            k = opt._position[i]
            if k in plain["state"]:
                plain["state"][k] = part_of(plain["state"][k], first, last,
                                            opt._params[i].numel())
    opt._optimizer.load_state_dict(plain)
    for i, p in enumerate(opt._params):
        if i not in opt._owned and i not in opt._views:
            opt._optimizer.state.pop(p, None)
    opt._loaded = {k: v for k, v in state_dict.items() if k != MARK}


def broadcast(opt, root):
    """Every rank's shard of root's state: the whole state root loaded last,
    if it has not stepped since, or else the state as the ranks hold it."""
    loaded = broadcast_object(opt._loaded is not None if opt.rank == root else None, root,
                              name="shard.state.loaded", process_set=opt._process_set)
    whole = opt._loaded if loaded else consolidate(opt, root)
    whole = broadcast_object(whole if opt.rank == root else None, root,
                             name="shard.state.whole", process_set=opt._process_set)
    load_whole(opt, whole)
    opt._loaded = None
