"""A sharded optimizer's state: gathered whole for a checkpoint, loaded
whole from any number of ranks, and kept as this rank's shard.

The whole state is a plain optimizer's state_dict (``state`` keyed by each
parameter's position in ``param_groups``, and the groups), so it does not
depend on the world size: a job resumed on another number of ranks loads it
and each rank keeps what it owns under the new plan."""
from typing import List

from ...base.errors import InvalidArgumentError
from ..functions import allgather_object, broadcast_object

_SHARD = "fuseopt_shard"


def local_shard(opt) -> dict:
    """This rank's state (owned parameters only) and the groups, marked
    with the plan it was taken under."""
    local = opt._optimizer.state_dict()
    return dict(local, **{_SHARD: {"rank": opt.rank, "size": opt.size,
                                   "positions": sorted(local["state"])}})


def merge_shards(shards: List[dict]) -> dict:
    """The whole state from every rank's ``sharded_state_dict()``."""
    if not shards:
        raise InvalidArgumentError("merge_shards needs the shards of every rank")
    marks = [s.get(_SHARD) if isinstance(s, dict) else None for s in shards]
    plans = {(m["rank"], m["size"]) for m in marks if isinstance(m, dict)}
    if len(plans) != len(shards) or plans != {(r, len(shards)) for r in range(len(shards))}:
        raise InvalidArgumentError("merge_shards needs one sharded_state_dict() of each rank "
                                   "of one job (got %s)" % sorted(plans))
    whole = {"state": {}, "param_groups": shards[0]["param_groups"]}
    for s in shards:
        whole["state"].update(s["state"])
    return whole


def consolidate(opt, to):
    """Collective: the whole state on rank ``to``, None elsewhere."""
    shards = allgather_object(local_shard(opt), name="shard.state",
                              process_set=opt._process_set)
    return merge_shards(shards) if opt.rank == to else None


def load_whole(opt, state_dict):
    """Loads a whole state (or this rank's own shard) and drops what others own."""
    shard = state_dict.get(_SHARD)
    if shard is not None and (shard["rank"], shard["size"]) != (opt.rank, opt.size):
        raise InvalidArgumentError(
            "this is rank %d of %d's shard of the optimizer state, and this is rank %d of %d: "
            "load the whole state (merge_shards of every rank's shard) instead"
            % (shard["rank"], shard["size"], opt.rank, opt.size))
    plain = {k: v for k, v in state_dict.items() if k != _SHARD}
    opt._optimizer.load_state_dict(plain)
    for i, p in enumerate(opt._params):
        if i not in opt._owned:
            opt._optimizer.state.pop(p, None)
    opt._loaded = plain


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
