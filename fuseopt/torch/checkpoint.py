"""Saving and resuming PyTorch training: one rank writes, every rank resumes.

    hvd.save_checkpoint("ckpt.pt", model, optimizer, step=step)
    ...
    ckpt = hvd.load_checkpoint("ckpt.pt", model, optimizer, missing_ok=True)
    start = ckpt.step + 1 if ckpt else 0

Both are collective. The file holds the model and optimizer state dicts, the
step, your ``extra`` object, the world size and every rank's RNG state
(torch, numpy, Python), so a resumed job continues exactly where it stopped.
It is read with ``torch.load(weights_only=True)``, which never runs code from
the file; so ``extra`` must be plain data (numbers, strings, lists, tuples,
dicts, tensors). See docs/reliability.md for resuming on a different number
of ranks. A sharded optimizer's state goes into one file per shard beside
``path`` (fuseopt/torch/sharded/checkpoint.py), never whole on one rank.
"""
from __future__ import annotations

from typing import Any
import io
import random

import numpy as np
import torch

from ..training import checkpoint as _ckpt
from ..training.compression import compression_state_of
from ..core import world
from .functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                        broadcast_parameters)
from .sharded import checkpoint as _shards

FORMAT = "fuseopt.torch.checkpoint/2"


def _rng_state():
    state = _ckpt.python_rng_state()
    state["torch"] = torch.get_rng_state()
    return state


def _set_rng_state(state):
    _ckpt.set_python_rng_state(state)
    torch.set_rng_state(state["torch"])


def _reseed(rank):
    seed = _ckpt.RESEED_BASE + rank
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def _inner(optimizer):
    return getattr(optimizer, "optimizer", optimizer)  # DistributedOptimizer wraps one


def save_checkpoint(path: str, model: Any, optimizer: Any = None, step: int = 0, extra: Any = None,
                    root_rank: int = 0) -> None:
    """Writes a checkpoint of ``model`` (and ``optimizer``) from root_rank,
    atomically: an interrupted save leaves the previous file intact, and the
    next successful save removes what it left. Collective (every rank's RNG
    state is gathered). ``extra`` must be plain data (see module docstring)."""
    rng = _ckpt.gather_rng_states(_rng_state())
    # A sharded optimizer's state goes shard by shard into files of its own.
    optimizer_state = (_shards.save(path, optimizer, root_rank) if _shards.is_sharded(optimizer)
                       else None)
    compression = compression_state_of(optimizer)
    if compression is not None:  # each rank's own error buffers
        compression = allgather_object(compression, name="checkpoint.compression")

    def write(f):
        _ckpt.check_plain(extra, "extra", (torch.Tensor,))
        try:
            torch.save({"format": FORMAT, "model": model.state_dict(),
                        "optimizer": optimizer_state if optimizer_state is not None
                        else _inner(optimizer).state_dict() if optimizer is not None
                        else None, "compression": compression,
                        "step": step, "extra": extra, "world_size": world.size(), "rng": rng}, f)
        except RuntimeError as e:
            # torch's writer reports a failed write (a full disk) as "unexpected
            # pos"; the file system's own error says what happened.
            if isinstance(e.__context__, OSError):
                raise e.__context__ from None
            raise

    _ckpt.save_on_root(path, root_rank, write)
    if world.rank() == root_rank:  # the file now names this save's shards, or none
        _shards.remove_stale(path, (optimizer_state or {}).get(_shards.MARKER, {}).get("token"))


def _read(path, model, optimizer):
    with open(path, "rb") as f:
        payload = torch.load(io.BytesIO(f.read()), map_location="cpu", weights_only=True)
    _ckpt.expect(isinstance(payload, dict) and payload.get("format") == FORMAT,
                 "%r is not a fuseopt.torch checkpoint (format %s)" % (path, FORMAT))
    _check_fits(path, model.state_dict(), payload["model"])
    compression = payload.get("compression")
    _ckpt.expect(compression is None or (isinstance(compression, list) and
                                         len(compression) == payload["world_size"]),
                 "checkpoint %r holds compressor state that is not one per rank" % path)
    # The optimizer checks its groups before it changes anything; the model
    # was checked above: so a file that does not fit changes neither.
    saved = payload["optimizer"]
    shards = saved.get(_shards.MARKER) if isinstance(saved, dict) else None
    if shards is not None:
        _shards.check_files(path, shards)
    if optimizer is not None and saved is not None and shards is None:
        # A sharded optimizer keeps the whole to hand each rank its shard.
        (optimizer if _shards.is_sharded(optimizer) else _inner(optimizer)).load_state_dict(saved)
    model.load_state_dict(payload["model"])
    meta = {k: payload.get(k) for k in ("step", "extra", "world_size", "rng", "compression")}
    return dict(meta, shards=shards)


def _check_fits(path, expected, saved):
    """Before anything is copied: the same tensors with the same shapes, so a
    mismatched file changes nothing (load_state_dict would copy the tensors
    that fit before raising about the rest)."""
    problems = ["%s missing from the file" % k for k in expected if k not in saved]
    problems += ["%s not in the model" % k for k in saved if k not in expected]
    problems += ["%s has shape %s in the file, %s in the model"
                 % (k, list(saved[k].shape), list(v.shape))
                 for k, v in expected.items()
                 if k in saved and tuple(getattr(saved[k], "shape", ())) != tuple(v.shape)]
    _ckpt.expect(not problems, "checkpoint %r was saved from a different model: %s"
                 % (path, "; ".join(problems[:8]) + ("; ..." if len(problems) > 8 else "")))


def load_checkpoint(path: str, model: Any, optimizer: Any = None, root_rank: int = 0,
                    missing_ok: bool = False) -> Any:
    """Restores ``model`` (and ``optimizer``) on every rank from root_rank's
    file and returns a :class:`fuseopt.training.checkpoint.Checkpoint` with ``step``,
    ``extra`` and ``world_size``. Collective. With ``missing_ok`` a missing
    file returns None on every rank (a fresh start); otherwise every rank
    raises FileNotFoundError. A truncated, corrupt, foreign or mismatched file
    raises :class:`fuseopt.training.checkpoint.CheckpointError` on every rank and
    leaves the model as it was."""
    found, meta = _ckpt.load_on_root(path, root_rank, missing_ok,
                                     lambda: _read(path, model, optimizer))
    if not found:
        return None
    broadcast_parameters(model.state_dict(), root_rank, prefix="checkpoint.model.")
    meta = broadcast_object(meta, root_rank, name="checkpoint.meta")
    if optimizer is not None and meta["shards"] is not None:
        _shards.load(path, optimizer, meta["shards"], root_rank)
    elif optimizer is not None:
        broadcast_optimizer_state(optimizer, root_rank)
    if meta["compression"] is not None and compression_state_of(optimizer) is not None:
        optimizer.load_compression_state(_ckpt.compression_state_for_this_rank(
            meta["compression"], meta["world_size"]))
    state = _ckpt.rng_state_for_this_rank(meta["rng"], meta["world_size"], _reseed)
    if state is not None:
        _set_rng_state(state)
    return _ckpt.Checkpoint(meta["step"], meta["extra"], meta["world_size"])
