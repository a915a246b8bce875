"""Work done by one rank whose failure must reach every rank: a checkpoint
written by the root, an object only the root (or one rank) serializes, an
elastic commit written by one rank per host. Whatever that rank raises,
every rank raises the same error (no rank waits forever), the previous
checkpoint stays intact and no temporary file is left.

Usage: root_failures.py DIR torch|keras [FULL_DIR]
FULL_DIR, when given, is a small file system (a tmpfs the parent mounted)
that the checkpoint of a larger model does not fit in."""
import contextlib
import io
import os
import sys
import threading

import rank_harness as harness

DIR, KIND = sys.argv[1], sys.argv[2]
FULL_DIR = sys.argv[3] if len(sys.argv) > 3 else None


@contextlib.contextmanager
def failing_on_rank(rank, module, attribute, error, when=lambda *args, **kwargs: True):
    """``module.attribute`` raises ``error`` on ``rank`` while the block runs
    (for the calls that ``when`` picks)."""
    import fuseopt
    original = getattr(module, attribute)

    def fail(*args, **kwargs):
        if when(*args, **kwargs):
            raise error
        return original(*args, **kwargs)

    if fuseopt.rank() == rank:
        setattr(module, attribute, fail)
    try:
        yield
    finally:
        setattr(module, attribute, original)


def no_temporary_file(directory):
    """Checked on the root, which writes."""
    import fuseopt
    if fuseopt.rank() == 0:
        assert not [f for f in os.listdir(directory) if f.endswith(".tmp")], os.listdir(directory)


def save_failures(save, load_step, writer, small, big, suffix):
    """The framework's save, failing on the root in two ways; after each the
    previous checkpoint still loads (its step) and nothing else is left.
    ``writer``: (module, attribute, which calls) of the function that writes
    the file, made to raise on the root."""
    def writer_raises_runtime_error():
        path = os.path.join(DIR, "injected" + suffix)
        save(path, small(), 1)
        module, attribute, when = writer
        with failing_on_rank(0, module, attribute, RuntimeError("injected writer failure"),
                             when):
            harness.expect_error(RuntimeError, lambda: save(path, small(), 2),
                                 "rank 0 could not write checkpoint", "injected writer failure")
        assert load_step(path, small()) == 1
        no_temporary_file(DIR)

    def full_file_system():
        path = os.path.join(FULL_DIR, "ckpt" + suffix)
        save(path, small(), 1)
        harness.expect_error(OSError, lambda: save(path, big(), 2),
                             "rank 0 could not write checkpoint", "No space left on device")
        assert load_step(path, small()) == 1
        no_temporary_file(FULL_DIR)

    return [full_file_system] if FULL_DIR else [writer_raises_runtime_error]


def object_failures():
    """Objects that cannot be pickled, on the root or on one rank."""
    import fuseopt

    def broadcast_of_an_unpicklable_object():
        harness.expect_error(TypeError, lambda: fuseopt.broadcast_object(
            threading.Lock() if fuseopt.rank() == 0 else None, 0),
            "rank 0 could not serialize", "cannot pickle")
        assert fuseopt.broadcast_object("after %d" % fuseopt.rank(), 0) == "after 0"

    def allgather_with_one_unpicklable_object():
        last = fuseopt.size() - 1
        harness.expect_error(TypeError, lambda: fuseopt.allgather_object(
            threading.Lock() if fuseopt.rank() == last else fuseopt.rank()),
            "rank %d could not serialize" % last, "cannot pickle")
        assert fuseopt.allgather_object(fuseopt.rank()) == list(range(fuseopt.size()))

    return [broadcast_of_an_unpicklable_object, allgather_with_one_unpicklable_object]


def torch_checks():
    import torch
    import fuseopt.torch as hvd
    from fuseopt.training import elastic_protocol
    from fuseopt.torch.elastic import TorchState

    def small():
        return torch.nn.Linear(2, 1)

    def big():  # 4 MB of weights: more than FULL_DIR holds
        return torch.nn.Linear(1000, 1000)

    def save(path, model, step):
        hvd.save_checkpoint(path, model, step=step)

    def load_step(path, model):
        return hvd.load_checkpoint(path, model).step

    def torch_broadcast_object_of_an_unpicklable_object():
        harness.expect_error(TypeError, lambda: hvd.broadcast_object(
            threading.Lock() if hvd.rank() == 0 else None, 0),
            "rank 0 could not serialize", "pickle")

    def elastic_commit_whose_writer_raises():
        os.environ[elastic_protocol.ELASTIC_DIR_ENV] = os.path.join(DIR, "commits")
        try:
            state = TorchState(small(), epoch=0)
            state.commit()
            with failing_on_rank(0, elastic_protocol, "write_commit",
                                 RuntimeError("injected commit failure")):
                harness.expect_error(OSError, state.commit, "rank 0 could not write",
                                     "injected commit failure")
            state.commit()
        finally:
            del os.environ[elastic_protocol.ELASTIC_DIR_ENV]

    # torch.save into a file (pickling a tensor also calls it, into memory)
    into_a_file = (torch, "save", lambda obj, f, *a, **k: not isinstance(f, io.BytesIO))
    saves = save_failures(save, load_step, into_a_file, small, big, ".pt")
    return saves if FULL_DIR else saves + object_failures() + [
        torch_broadcast_object_of_an_unpicklable_object, elastic_commit_whose_writer_raises]


def keras_checks():
    import numpy as np
    from tf_common import keras, hvd

    def model(units):
        # The same variable paths whatever the width (a checkpoint names them).
        m = keras.Sequential([keras.Input((1000,)), keras.layers.Dense(units, name="out")],
                             name="net")
        m.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse")
        return m

    def save(path, m, step):
        hvd.save_checkpoint(path, m, step=step)

    def load_step(path, m):
        return hvd.load_checkpoint(path, m).step

    return save_failures(save, load_step, (np, "savez", lambda *a, **k: True), lambda: model(1),
                         lambda: model(1000), ".fuseopt")


if __name__ == "__main__":
    harness.run(torch_checks() if KIND == "torch" else keras_checks())
