"""Saving and resuming PyTorch training: one rank writes, every rank resumes.

    hvd.save_checkpoint("ckpt.pt", model, optimizer, step=step)
    ...
    ckpt = hvd.load_checkpoint("ckpt.pt", model, optimizer, missing_ok=True)
    start = ckpt.step + 1 if ckpt else 0

Both are collective. The file holds the model and optimizer state dicts, the
step, your ``extra`` object, the world size and every rank's RNG state
(torch, numpy, Python), so a resumed job continues exactly where it stopped.
See docs/reliability.md for resuming on a different number of ranks.
"""
import io
import random

import numpy as np
import torch

from .. import checkpoint as _ckpt
from .. import runtime
from .functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters

FORMAT = "fuseopt.torch.checkpoint/1"


def _rng_state():
    state = _ckpt.python_rng_state()
    state["torch"] = torch.get_rng_state()
    return state


def _set_rng_state(state):
    _ckpt.set_python_rng_state(state)
    torch.set_rng_state(state["torch"])


def _reseed(rank):
    seed = 0x5EED + rank
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def _inner(optimizer):
    return getattr(optimizer, "optimizer", optimizer)  # DistributedOptimizer wraps one


def save_checkpoint(path, model, optimizer=None, step=0, extra=None, root_rank=0):
    """Writes a checkpoint of ``model`` (and ``optimizer``) from root_rank,
    atomically: an interrupted save leaves the previous file intact.
    Collective (every rank's RNG state is gathered)."""
    rng = _ckpt.gather_rng_states(_rng_state())
    failure = None
    if runtime.rank() == root_rank:
        payload = {"format": FORMAT, "model": model.state_dict(),
                   "optimizer": _inner(optimizer).state_dict() if optimizer is not None else None,
                   "step": step, "extra": extra, "world_size": runtime.size(), "rng": rng}
        try:
            _ckpt.write_atomically(path, lambda f: torch.save(payload, f))
        except OSError as e:
            failure = "rank %d could not write checkpoint %r: %s" % (root_rank, path, e)
    # Nobody returns before the file is complete, and a failure is raised everywhere.
    _ckpt.raise_on_every_rank(failure, root_rank)


def load_checkpoint(path, model, optimizer=None, root_rank=0, missing_ok=False):
    """Restores ``model`` (and ``optimizer``) on every rank from root_rank's
    file and returns a :class:`fuseopt.checkpoint.Checkpoint` with ``step``,
    ``extra`` and ``world_size``. Collective. With ``missing_ok`` a missing
    file returns None on every rank (a fresh start); otherwise every rank
    raises FileNotFoundError."""
    if not _ckpt.root_has_file(path, root_rank):
        if missing_ok:
            return None
        raise FileNotFoundError("no checkpoint at %r on rank %d" % (path, root_rank))
    payload = None
    failure = None
    if runtime.rank() == root_rank:
        with open(path, "rb") as f:
            payload = torch.load(io.BytesIO(f.read()), map_location="cpu", weights_only=False)
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            failure = "%r is not a fuseopt.torch checkpoint" % path
        else:
            model.load_state_dict(payload["model"])
            if optimizer is not None and payload["optimizer"] is not None:
                _inner(optimizer).load_state_dict(payload["optimizer"])
    # A bad file fails on every rank, not only on the root (the others would
    # wait in the broadcasts below until the root's exit shut them down).
    _ckpt.raise_on_every_rank(failure, root_rank, ValueError)
    broadcast_parameters(model.state_dict(), root_rank, prefix="checkpoint.model.")
    if optimizer is not None:
        broadcast_optimizer_state(optimizer, root_rank)
    meta = broadcast_object(None if payload is None else
                            {k: payload[k] for k in ("step", "extra", "world_size", "rng")},
                            root_rank, name="checkpoint.meta")
    state = _ckpt.rng_state_for_this_rank(meta["rng"], meta["world_size"], _reseed)
    if state is not None:
        _set_rng_state(state)
    return _ckpt.Checkpoint(meta["step"], meta["extra"], meta["world_size"])
