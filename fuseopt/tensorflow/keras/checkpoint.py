"""Saving and resuming Keras training: one rank writes, every rank resumes.

    ckpt = hvd.load_checkpoint("ckpt.fuseopt", model, missing_ok=True)
    model.fit(x, y, initial_epoch=ckpt.step + 1 if ckpt else 0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                         hvd.callbacks.CheckpointCallback("ckpt.fuseopt")])

Both functions are collective. The file holds the model's variables, the
optimizer's (slots and iteration count), the step, your ``extra`` object, the
world size and every rank's RNG state (Python, NumPy, and the model's own
seed generators, e.g. Dropout's), so a resumed job continues where it
stopped. See docs/reliability.md for resuming on a different number of ranks.
"""
import pickle
import random

import keras
import numpy as np

from ... import checkpoint as _ckpt
from ... import objects, runtime
from ..functions import broadcast_variables

FORMAT = "fuseopt.keras.checkpoint/1"


def _split(model):
    """(shared variables, per-rank seed-generator states, optimizer variables)."""
    optimizer = model.optimizer
    if optimizer is not None and not optimizer.built:
        optimizer.build(model.trainable_variables)
    seeds = [v for v in model.variables if v.path.endswith("seed_generator_state")]
    shared = [v for v in model.variables if not v.path.endswith("seed_generator_state")]
    return shared, seeds, list(optimizer.variables) if optimizer is not None else []


def _reseed(rank):
    seed = 0x5EED + rank
    random.seed(seed)
    np.random.seed(seed)
    keras.utils.set_random_seed(seed)


def save_checkpoint(path, model, step=0, extra=None, root_rank=0):
    """Writes a checkpoint of ``model`` and its optimizer from root_rank,
    atomically: an interrupted save leaves the previous file intact."""
    shared, seeds, opt_vars = _split(model)
    local_rng = dict(_ckpt.python_rng_state(), seeds=[np.asarray(v) for v in seeds])
    rng = _ckpt.gather_rng_states(local_rng)
    failure = None
    if runtime.rank() == root_rank:
        payload = {"format": FORMAT, "model": [np.asarray(v) for v in shared],
                   "model_paths": [v.path for v in shared],
                   "optimizer": [np.asarray(v) for v in opt_vars], "step": step, "extra": extra,
                   "world_size": runtime.size(), "rng": rng}
        try:
            _ckpt.write_atomically(path, lambda f: pickle.dump(payload, f, protocol=4))
        except OSError as e:
            failure = "rank %d could not write checkpoint %r: %s" % (root_rank, path, e)
    _ckpt.raise_on_every_rank(failure, root_rank)


def load_checkpoint(path, model, root_rank=0, missing_ok=False):
    """Restores ``model`` and its optimizer on every rank from root_rank's
    file; returns a :class:`fuseopt.checkpoint.Checkpoint` (``step``,
    ``extra``, ``world_size``), or None with ``missing_ok`` when there is no
    file. The model must be built and compiled the same way as when saved."""
    if not _ckpt.root_has_file(path, root_rank):
        if missing_ok:
            return None
        raise FileNotFoundError("no checkpoint at %r on rank %d" % (path, root_rank))
    shared, seeds, opt_vars = _split(model)
    meta = None
    failure = None
    if runtime.rank() == root_rank:
        with open(path, "rb") as f:
            payload = pickle.load(f)
        if payload.get("format") != FORMAT:
            failure = "%r is not a fuseopt Keras checkpoint" % path
        elif [v.path for v in shared] != payload["model_paths"] or \
                len(opt_vars) != len(payload["optimizer"]):
            failure = ("checkpoint %r was saved from a different model or optimizer "
                       "(variables differ)" % path)
        else:
            for v, value in zip(shared + opt_vars, payload["model"] + payload["optimizer"]):
                v.assign(value)
            meta = {k: payload[k] for k in ("step", "extra", "world_size", "rng")}
    _ckpt.raise_on_every_rank(failure, root_rank, ValueError)
    broadcast_variables(shared + opt_vars, root_rank)
    meta = objects.broadcast_object(meta, root_rank, name="checkpoint.meta")
    state = _ckpt.rng_state_for_this_rank(meta["rng"], meta["world_size"], _reseed)
    if state is not None:
        _ckpt.set_python_rng_state(state)
        for v, value in zip(seeds, state["seeds"]):
            v.assign(value)
    return _ckpt.Checkpoint(meta["step"], meta["extra"], meta["world_size"])
