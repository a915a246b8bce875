"""fuseopt.torch.save_checkpoint / load_checkpoint for a sharded optimizer:
the state travels one shard at a time, so no rank ever holds it whole.

Saving, each rank's shard (its ``sharded_state_dict()``) goes to the root in
turn, which writes it atomically to ``<path>.optimizer-<token>-<r>-of-<n>``;
the main file, written last, names the token, so a save interrupted before
it leaves the previous checkpoint whole (its shards have another token and
are removed only after the next main file is in place). Loading, the root
reads the shards one by one and sends each to every rank, which keeps the
entries of the parameters it owns under its own plan: the same file resumes
on any number of ranks, into a sharded or a plain optimizer. Only the root
touches the files, as for the rest of a checkpoint."""
import glob
import io
import os
import secrets

import torch

from ...api import objects
from ...base.atomic_file import write_atomically
from ...base.errors import UnsupportedError
from ...training import checkpoint as _ckpt
from ..functions import broadcast_object
from . import state as _state

MARKER = "fuseopt_sharded_optimizer"


def is_sharded(optimizer):
    return hasattr(optimizer, "sharded_state_dict")


def _shard_path(path, token, rank, size):
    return "%s.optimizer-%s-%d-of-%d" % (path, token, rank, size)


def save(path, optimizer, root_rank):
    """Collective: writes every rank's shard from the root; returns what the
    main file records in place of the optimizer's state."""
    if optimizer._process_set is not None:
        raise UnsupportedError("save_checkpoint of an optimizer sharded over a process set: "
                               "save each rank's sharded_state_dict() yourself")
    token = broadcast_object(secrets.token_hex(4), root_rank, name="checkpoint.shard.token")
    size = optimizer.size
    for r in range(size):
        shard = broadcast_object(optimizer.sharded_state_dict() if optimizer.rank == r else None,
                                 r, name="checkpoint.shard.%d" % r)
        objects.on_root(lambda: write_atomically(_shard_path(path, token, r, size),
                                                 lambda f: torch.save(shard, f)),
                        root_rank, "checkpoint.shard.saved",
                        "could not write optimizer shard %d of checkpoint %r" % (r, path))
        del shard
    return {MARKER: {"token": token, "world_size": size}}


def remove_stale(path, keep_token=None):
    """On the root, after the main file is written: shards of earlier saves."""
    for name in glob.glob(glob.escape(path) + ".optimizer-*-of-*"):
        if keep_token is None or not os.path.basename(name).startswith(
                os.path.basename(path) + ".optimizer-%s-" % keep_token):
            try:
                os.unlink(name)
            except OSError:
                pass


def _read_shard(path, token, r, size):
    with open(_shard_path(path, token, r, size), "rb") as f:
        shard = torch.load(io.BytesIO(f.read()), map_location="cpu", weights_only=True)
    _ckpt.expect(isinstance(shard, dict) and isinstance(shard.get("state"), dict)
                 and isinstance(shard.get("param_groups"), list),
                 "optimizer shard %d of checkpoint %r is not an optimizer state" % (r, path))
    mark = shard.get(_state.MARK)
    pieces = _state.pieces_of(shard)
    _ckpt.expect((mark is None or isinstance(mark, dict)) and isinstance(pieces, dict) and all(
        isinstance(k, int) and isinstance(v, list) and len(v) == 3 and
        all(isinstance(x, int) for x in v[:2]) and 0 <= v[0] <= v[1] and
        isinstance(v[2], list) and all(isinstance(d, int) and d >= 0 for d in v[2])
        for k, v in pieces.items()),
        "optimizer shard %d of checkpoint %r names its pieces wrongly" % (r, path))
    return shard


def check_files(path, marker):
    """On the root, before anything is loaded: every shard reads back as an
    optimizer state (one at a time), so a damaged one changes nothing."""
    _ckpt.expect(isinstance(marker, dict) and isinstance(marker.get("token"), str)
                 and isinstance(marker.get("world_size"), int) and marker["world_size"] > 0,
                 "checkpoint %r names its optimizer shards wrongly" % path)
    for r in range(marker["world_size"]):
        try:
            _read_shard(path, marker["token"], r, marker["world_size"])
        except _ckpt.CheckpointError:
            raise
        except Exception as e:  # whatever a damaged file makes the reader raise
            raise _ckpt.CheckpointError("optimizer shard %d of checkpoint %r: %s: %s"
                                        % (r, path, type(e).__name__, e)) from None


def load(path, optimizer, marker, root_rank):
    """Collective: every rank takes what it owns of each shard in turn (the
    pieces of a split parameter join, or are cut, to this rank's plan)."""
    token, size = marker["token"], marker["world_size"]
    sharded = is_sharded(optimizer)
    target = optimizer if sharded else getattr(optimizer, "optimizer", optimizer)
    numels = _numels(optimizer if sharded else target)
    keep = _state.wanted(optimizer) if sharded else \
        {k: (0, n, shape) for k, (n, shape) in numels.items()}
    assemblies, groups = {}, None
    for r in range(size):
        shard = objects.on_root(lambda: _read_shard(path, token, r, size), root_rank,
                                "checkpoint.shard.loaded",
                                "cannot load optimizer shard %d of checkpoint %r" % (r, path))
        shard = broadcast_object(shard, root_rank, name="checkpoint.shard.%d" % r)
        groups = shard["param_groups"] if groups is None else groups
        for k, entry in shard["state"].items():
            if k in keep and k in numels:
                first, last = _state.spans(shard, k, numels[k][0])
                assemblies.setdefault(k, _state.Assembly(*keep[k])).add(first, last, entry)
    state = {k: a.result("parameter %d of checkpoint %r" % (k, path))
             for k, a in assemblies.items()}
    if sharded:  # this rank's entries, already cut to its plan
        optimizer._optimizer.load_state_dict({"state": state, "param_groups": groups})
        optimizer._loaded = None  # every rank holds its shard: nothing to broadcast
    else:
        target.load_state_dict({"state": state, "param_groups": groups})


def _numels(optimizer):
    """(elements, shape) of the parameter at each position of the groups."""
    if is_sharded(optimizer):
        return {k: (optimizer._params[i].numel(), tuple(optimizer._params[i].shape))
                for i, k in optimizer._position.items()}
    params = [p for g in optimizer.param_groups for p in g["params"]]
    return {k: (p.numel(), tuple(p.shape)) for k, p in enumerate(params)}
