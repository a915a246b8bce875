"""What every framework's checkpointing shares: atomic files, per-rank RNG
state, one outcome on every rank, and the rules for resuming on a different
number of ranks.

A checkpoint is written by one rank (the root) and read by it; the other
ranks receive its contents through fuseopt broadcasts, so only the root needs
the file system (a node-local disk is enough).

Loading never runs code from the file: the PyTorch format is read with
``torch.load(weights_only=True)`` and the Keras format is an ``.npz`` archive
read with ``allow_pickle=False`` plus a JSON header. So everything saved,
``extra`` included, must be plain data (:func:`check_plain`)."""
import json
import os
import random

import numpy as np

from ..api import objects
from ..core import world
from ..base.atomic_file import write_atomically
from ..base.errors import FuseoptError, InvalidArgumentError
from .compression import shared_part


class CheckpointError(FuseoptError, ValueError):
    """A checkpoint file that cannot be used: truncated, corrupt, of another
    format, or saved from a different model. Raised on every rank alike."""
    status = "INVALID_ARG"


def check_plain(value, what, leaf_types=()):
    """Raises InvalidArgumentError unless ``value`` is plain data: None, bool,
    int, float, str, lists and tuples of plain data, dicts with str or int
    keys, and ``leaf_types`` (e.g. torch.Tensor). Only plain data can be
    loaded back without running code from the file."""
    def walk(v, where):
        if v is None or isinstance(v, (bool, int, float, str) + tuple(leaf_types)):
            return
        if isinstance(v, (list, tuple)):
            for i, item in enumerate(v):
                walk(item, "%s[%d]" % (where, i))
            return
        if isinstance(v, dict):
            for k, item in v.items():
                if not isinstance(k, (str, int)) or isinstance(k, bool):
                    raise InvalidArgumentError("%s has a key of type %s; checkpoints keep "
                                               "str and int keys only" % (where, type(k).__name__))
                walk(item, "%s[%r]" % (where, k))
            return
        raise InvalidArgumentError(
            "%s is a %s.%s; a checkpoint keeps plain data only (None, bool, int, float, str, "
            "lists, tuples, dicts%s), so that loading it never runs code from the file"
            % (where, type(v).__module__, type(v).__name__,
               "".join(", " + t.__name__ for t in leaf_types)))
    walk(value, what)


def python_rng_state():
    """Python's and NumPy's global RNG state as plain data (lists and ints)."""
    version, words, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {"python": [version, list(words), gauss],
            "numpy": [name, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)]}


def set_python_rng_state(state):
    version, words, gauss = state["python"]
    random.setstate((version, tuple(words), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


def gather_rng_states(local_state):
    """Every rank's RNG state, in rank order (collective)."""
    return objects.allgather_object(local_state, name="checkpoint.rng")


def rng_state_for_this_rank(states, saved_world_size, reseed):
    """This rank's saved RNG state when the world size is unchanged. After a
    resize no saved state belongs to this rank: ``reseed(rank)`` is called
    instead, so every rank gets a distinct, reproducible stream."""
    if saved_world_size == world.size() and states:
        return states[world.rank()]
    reseed(world.rank())
    return None


# Added to the rank to seed every RNG after a resize (see rng_state_for_this_rank).
RESEED_BASE = 0x5EED


def encode_header(header):
    """A JSON header as bytes (the Keras format's own metadata)."""
    try:
        return json.dumps(header, allow_nan=True).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError("checkpoint metadata is not plain JSON data: %s" % e) from None


def compression_state_for_this_rank(states, saved_world_size):
    """This rank's saved compressor state (``states``: every rank's, in rank
    order); after a resize only the shared part (compression.shared_part),
    since the error buffers belonged to ranks that held other data."""
    if saved_world_size == world.size():
        return states[world.rank()]
    return shared_part(states[0])


def compression_to_arrays(prefix, state, arrays):
    """Puts a compressor's state (fuseopt.training.powersgd's state_dict
    layout: ``errors`` and ``qs`` map names to arrays, ``steps`` to ints)
    into ``arrays`` under ``prefix``; returns what a JSON header keeps of it
    (the names, in order, and the step counts), for archives read without
    pickle."""
    kept = {"steps": {k: int(v) for k, v in state.get("steps", {}).items()}}
    for field in ("errors", "qs"):
        names = list(state.get(field) or {})
        for i, name in enumerate(names):
            arrays["%s/%s/%d" % (prefix, field, i)] = np.asarray(state[field][name])
        kept[field] = names
    return kept


def compression_from_arrays(prefix, kept, archive):
    """The state compression_to_arrays stored (``archive``: its arrays)."""
    return dict(steps=kept["steps"], **{
        field: {name: archive["%s/%s/%d" % (prefix, field, i)]
                for i, name in enumerate(kept.get(field, []))} for field in ("errors", "qs")})


def lr_scale(saved_world_size, world_size=None, keep="global_batch"):
    """Factor for the learning rate after resuming on a different number of
    ranks.

    ``keep="global_batch"`` (recommended): each rank's batch becomes
    ``global_batch / world_size``, so the optimisation is unchanged and the
    factor is 1. ``keep="per_rank_batch"``: the global batch changes by
    ``world_size / saved_world_size``, and so does the learning rate (the
    linear scaling rule of Goyal et al., 2017)."""
    world_size = world.size() if world_size is None else world_size
    if keep == "global_batch":
        return 1.0
    if keep == "per_rank_batch":
        return world_size / float(saved_world_size)
    raise ValueError("keep must be 'global_batch' or 'per_rank_batch', not %r" % (keep,))


def shard(global_start, global_batch, rank=None, size=None):
    """This rank's ``(start, stop)`` of the global batch that begins at sample
    ``global_start``: contiguous, equal-sized slices when ``size`` divides the
    batch (which keeps the averaged gradient identical for any size)."""
    rank = world.rank() if rank is None else rank
    size = world.size() if size is None else size
    if global_batch % size:
        raise ValueError("global batch %d does not split evenly over %d ranks"
                         % (global_batch, size))
    per_rank = global_batch // size
    start = global_start + rank * per_rank
    return start, start + per_rank


class Checkpoint:
    """What ``load_checkpoint`` returns besides the restored model:
    ``step``, ``extra`` (what was passed to save) and ``world_size`` (the
    number of ranks that saved it; see :func:`lr_scale`)."""

    def __init__(self, step, extra, world_size):
        self.step = step
        self.extra = extra
        self.world_size = world_size

    def lr_scale(self, keep="global_batch"):
        return lr_scale(self.world_size, keep=keep)

    def __repr__(self):
        return "Checkpoint(step=%r, world_size=%r, extra=%r)" % (self.step, self.world_size,
                                                                 self.extra)


def save_on_root(path, root_rank, write):
    """Collective: the root calls ``write(file)`` through
    :func:`write_atomically`; whatever it raises there (OSError for the file
    system, InvalidArgumentError for what cannot be saved, anything a
    framework's writer raises) is raised on every rank alike, the previous
    file stays as it was, and no rank returns before the file is complete."""
    objects.on_root(lambda: write_atomically(path, write), root_rank, "checkpoint.saved",
                    "could not write checkpoint %r" % path)


def load_on_root(path, root_rank, missing_ok, read):
    """Collective. On the root, ``read()`` opens and checks the file and
    returns what it restored. Any failure there (truncated, corrupt, foreign
    or mismatched file) is raised as the same CheckpointError on every rank,
    naming the file, so a ``try``/``except`` around the load followed by a
    fresh start works on every rank alike. Returns ``(found, read() on the
    root / None elsewhere)``; a missing file is ``(False, None)`` with
    ``missing_ok``, FileNotFoundError on every rank otherwise."""
    def work():
        if not os.path.exists(path):
            raise FileNotFoundError("no such file")
        try:
            return read()
        except Exception as e:  # whatever a hostile file makes the reader raise
            raise CheckpointError("%s: %s" % (type(e).__name__, e)) from None
    try:
        return True, objects.on_root(work, root_rank, "checkpoint.loaded",
                                     "cannot load checkpoint %r" % path)
    except FileNotFoundError:
        if missing_ok:
            return False, None
        raise


def expect(condition, message):
    """For readers: a file that is not what it should be."""
    if not condition:
        raise CheckpointError(message)
