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
    """Collective: every rank takes what it owns of each shard in turn."""
    token, size = marker["token"], marker["world_size"]
    keep = _owned_positions(optimizer) if is_sharded(optimizer) else None
    state, groups = {}, None
    for r in range(size):
        shard = objects.on_root(lambda: _read_shard(path, token, r, size), root_rank,
                                "checkpoint.shard.loaded",
                                "cannot load optimizer shard %d of checkpoint %r" % (r, path))
        shard = broadcast_object(shard, root_rank, name="checkpoint.shard.%d" % r)
        groups = shard["param_groups"] if groups is None else groups
        state.update({k: v for k, v in shard["state"].items() if keep is None or k in keep})
    whole = {"state": state, "param_groups": groups}
    target = optimizer if is_sharded(optimizer) else getattr(optimizer, "optimizer", optimizer)
    target.load_state_dict(whole)
    if is_sharded(optimizer):
        optimizer._loaded = None  # every rank holds its shard: nothing to broadcast


def _owned_positions(optimizer):
    """Positions (state_dict keys) of the parameters this rank owns."""
    owned = {id(p) for p in optimizer.owned_parameters()}
    positions, k = set(), 0
    for group in optimizer.param_groups:
        for p in group["params"]:
            if id(p) in owned:
                positions.add(k)
            k += 1
    return positions
