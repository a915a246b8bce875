"""Saving and resuming Keras training: one rank writes, every rank resumes.

    ckpt = hvd.load_checkpoint("ckpt.fuseopt", model, missing_ok=True)
    model.fit(x, y, initial_epoch=ckpt.step + 1 if ckpt else 0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                         hvd.callbacks.CheckpointCallback("ckpt.fuseopt")])

Both functions are collective. The file holds the model's variables, the
optimizer's (slots and iteration count), every rank's compressor state
(PowerSGD's, ef_sign's), the step, your ``extra`` object, the world size and
every rank's RNG state (Python, NumPy, and the model's own
seed generators, e.g. Dropout's), so a resumed job continues where it
stopped. It is an ``.npz`` archive of arrays with a JSON header, read with
``allow_pickle=False``: loading never runs code from the file, and ``extra``
must be JSON data. See docs/reliability.md for resuming on a different
number of ranks.
"""
from __future__ import annotations

from typing import Any
import json
import random

import keras
import numpy as np

from ...training import checkpoint as _ckpt
from ...training.compression import compression_state_of
from ...api import objects
from ...core import world
from ..functions import broadcast_variables
from ..model_variables import split_model_variables as _split

FORMAT = "fuseopt.keras.checkpoint/2"


def _reseed(rank):
    seed = _ckpt.RESEED_BASE + rank
    random.seed(seed)
    np.random.seed(seed)
    keras.utils.set_random_seed(seed)


def save_checkpoint(path: str, model: Any, step: int = 0, extra: Any = None,
                    root_rank: int = 0) -> None:
    """Writes a checkpoint of ``model`` and its optimizer from root_rank,
    atomically: an interrupted save leaves the previous file intact, and the
    next successful save removes what it left. ``extra`` must be JSON data."""
    shared, seeds, opt_vars = _split(model)
    rng = _ckpt.gather_rng_states(dict(_ckpt.python_rng_state(),
                                       seeds=[np.asarray(v) for v in seeds]))
    compression = compression_state_of(getattr(model, "optimizer", None))
    if compression is not None:  # each rank's own error buffers
        compression = objects.allgather_object(compression, name="checkpoint.compression")

    def write(f):
        arrays = {"model/%d" % i: np.asarray(v) for i, v in enumerate(shared)}
        arrays.update({"optimizer/%d" % i: np.asarray(v) for i, v in enumerate(opt_vars)})
        for r, state in enumerate(rng):
            arrays.update({"seeds/%d/%d" % (r, i): s for i, s in enumerate(state.pop("seeds"))})
        header = {"format": FORMAT, "model_paths": [v.path for v in shared],
                  "optimizer_count": len(opt_vars), "step": step, "extra": extra,
                  "world_size": world.size(), "rng": rng,
                  "compression": None if compression is None else [
                      _ckpt.compression_to_arrays("compression/%d" % r, state, arrays)
                      for r, state in enumerate(compression)]}
        raw = _ckpt.encode_header(header)
        np.savez(f, header=np.frombuffer(raw, dtype=np.uint8), **arrays)

    _ckpt.save_on_root(path, root_rank, write)


def _compression_from_archive(archive, header):
    if header.get("compression") is None:
        return None
    return [_ckpt.compression_from_arrays("compression/%d" % rank, kept, archive)
            for rank, kept in enumerate(header["compression"])]


def _read(path, shared, opt_vars):
    with np.load(path, allow_pickle=False) as archive:
        _ckpt.expect("header" in archive.files,
                     "%r is not a fuseopt Keras checkpoint (no header)" % path)
        header = json.loads(archive["header"].tobytes().decode("utf-8"))
        _ckpt.expect(isinstance(header, dict) and header.get("format") == FORMAT,
                     "%r is not a fuseopt Keras checkpoint (format %s)" % (path, FORMAT))
        _ckpt.expect([v.path for v in shared] == header["model_paths"] and
                     len(opt_vars) == header["optimizer_count"],
                     "checkpoint %r was saved from a different model or optimizer (variables "
                     "differ)" % path)
        values = [archive["model/%d" % i] for i in range(len(shared))] + \
            [archive["optimizer/%d" % i] for i in range(len(opt_vars))]
        wrong = ["%s: %s in the file, %s in the model" % (v.path, list(a.shape), list(v.shape))
                 for v, a in zip(shared + opt_vars, values) if tuple(a.shape) != tuple(v.shape)]
        _ckpt.expect(not wrong, "checkpoint %r was saved from a different model: %s"
                     % (path, "; ".join(wrong[:8])))
        for r, state in enumerate(header["rng"]):
            state["seeds"] = [archive[k] for k in sorted(
                (k for k in archive.files if k.startswith("seeds/%d/" % r)),
                key=lambda k: int(k.rsplit("/", 1)[1]))]
        compression = _compression_from_archive(archive, header)
        _ckpt.expect(compression is None or len(compression) == header["world_size"],
                     "checkpoint %r holds compressor state for %d ranks of %s"
                     % (path, len(compression or ()), header["world_size"]))
    for v, value in zip(shared + opt_vars, values):  # all checked: assign all
        v.assign(value)
    return dict({k: header[k] for k in ("step", "extra", "world_size", "rng")},
                compression=compression)


def load_checkpoint(path: str, model: Any, root_rank: int = 0, missing_ok: bool = False) -> Any:
    """Restores ``model`` and its optimizer on every rank from root_rank's
    file; returns a :class:`fuseopt.training.checkpoint.Checkpoint` (``step``,
    ``extra``, ``world_size``), or None with ``missing_ok`` when there is no
    file. The model must be built and compiled the same way as when saved.
    A truncated, corrupt, foreign or mismatched file raises
    :class:`fuseopt.training.checkpoint.CheckpointError` on every rank and leaves the
    model as it was."""
    shared, seeds, opt_vars = _split(model)
    found, meta = _ckpt.load_on_root(path, root_rank, missing_ok,
                                     lambda: _read(path, shared, opt_vars))
    if not found:
        return None
    broadcast_variables(shared + opt_vars, root_rank)
    meta = objects.broadcast_object(meta, root_rank, name="checkpoint.meta")
    if meta["compression"] is not None and \
            compression_state_of(getattr(model, "optimizer", None)) is not None:
        model.optimizer.load_compression_state(_ckpt.compression_state_for_this_rank(
            meta["compression"], meta["world_size"]))
    state = _ckpt.rng_state_for_this_rank(meta["rng"], meta["world_size"], _reseed)
    if state is not None:
        _ckpt.set_python_rng_state(state)
        for v, value in zip(seeds, state["seeds"]):
            v.assign(value)
    return _ckpt.Checkpoint(meta["step"], meta["extra"], meta["world_size"])
