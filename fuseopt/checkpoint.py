"""What every framework's checkpointing shares: atomic files, per-rank RNG
state, and the rules for resuming on a different number of ranks.

A checkpoint is written by one rank (the root) and read by it; the other
ranks receive its contents through fuseopt broadcasts, so only the root needs
the file system (a node-local disk is enough)."""
import os
import random
import tempfile

import numpy as np

from . import objects, runtime


def write_atomically(path, write):
    """Calls ``write(file)`` on a temporary file beside ``path``, makes it
    durable, then renames it over ``path``. A crash or kill at any point
    leaves the previous checkpoint intact (at worst a stray temporary file)."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), suffix=".tmp",
                               dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself must survive a power cut
    finally:
        os.close(dir_fd)


def python_rng_state():
    return {"python": random.getstate(), "numpy": np.random.get_state()}


def set_python_rng_state(state):
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


def gather_rng_states(local_state):
    """Every rank's RNG state, in rank order (collective)."""
    return objects.allgather_object(local_state, name="checkpoint.rng")


def rng_state_for_this_rank(states, saved_world_size, reseed):
    """This rank's saved RNG state when the world size is unchanged. After a
    resize no saved state belongs to this rank: ``reseed(rank)`` is called
    instead, so every rank gets a distinct, reproducible stream."""
    if saved_world_size == runtime.size() and states:
        return states[runtime.rank()]
    reseed(runtime.rank())
    return None


def lr_scale(saved_world_size, world_size=None, keep="global_batch"):
    """Factor for the learning rate after resuming on a different number of
    ranks.

    ``keep="global_batch"`` (recommended): each rank's batch becomes
    ``global_batch / world_size``, so the optimisation is unchanged and the
    factor is 1. ``keep="per_rank_batch"``: the global batch changes by
    ``world_size / saved_world_size``, and so does the learning rate (the
    linear scaling rule of Goyal et al., 2017)."""
    world_size = runtime.size() if world_size is None else world_size
    if keep == "global_batch":
        return 1.0
    if keep == "per_rank_batch":
        return world_size / float(saved_world_size)
    raise ValueError("keep must be 'global_batch' or 'per_rank_batch', not %r" % (keep,))


def shard(global_start, global_batch, rank=None, size=None):
    """This rank's ``(start, stop)`` of the global batch that begins at sample
    ``global_start``: contiguous, equal-sized slices when ``size`` divides the
    batch (which keeps the averaged gradient identical for any size)."""
    rank = runtime.rank() if rank is None else rank
    size = runtime.size() if size is None else size
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


def raise_on_every_rank(failure, root_rank, error=OSError):
    """Collective: raises error(failure) on every rank, with the root's
    message, if the root had one."""
    failure = objects.broadcast_object(failure, root_rank, name="checkpoint.outcome")
    if failure:
        raise error(failure)


def root_has_file(path, root_rank):
    """Whether the root rank can see ``path``; the same answer on every rank."""
    return objects.broadcast_object(os.path.exists(path) if runtime.rank() == root_rank else None,
                                    root_rank, name="checkpoint.exists")
