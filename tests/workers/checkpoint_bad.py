"""Files that cannot be used fail the same way on every rank, naming the file,
run no code from the file, change nothing, and leave the job able to go on
(a try/except around the load followed by a fresh start).

Usage: checkpoint_bad.py DIR torch|keras"""
import os
import sys

import numpy as np

import rank_harness as harness

DIR, KIND = sys.argv[1], sys.argv[2]
MARKER = os.path.join(DIR, "payload-ran")


class Payload:
    """What a hostile file holds: unpickling it would create MARKER."""

    def __reduce__(self):
        return (open, (MARKER, "w"))


def shared_file(name, write):
    """The root writes DIR/name; every rank gets its path once it exists."""
    import fuseopt
    path = os.path.join(DIR, name)
    if fuseopt.rank() == 0:
        write(path)
    fuseopt.barrier()
    return path


def truncate(path):
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:len(data) // 2])


def refused_everywhere(load, *contains):
    """load() raises CheckpointError naming the file on every rank; then a
    fresh start (a broadcast from root) still completes."""
    import fuseopt
    harness.expect_error(fuseopt.CheckpointError, load, *contains)
    assert not os.path.exists(MARKER), "the file's payload ran"
    assert fuseopt.broadcast_object("fresh start %d" % fuseopt.rank(), 0) == "fresh start 0"


def torch_checks():
    import torch
    import fuseopt.torch as hvd
    from fuseopt.torch.checkpoint import FORMAT

    def model(n_in=2):
        torch.manual_seed(7 + hvd.rank())
        return torch.nn.Linear(n_in, 1)

    def foreign_file():
        path = shared_file("foreign.pt", lambda p: torch.save({"weights": torch.ones(2)}, p))
        refused_everywhere(lambda: hvd.load_checkpoint(path, model()), "foreign.pt",
                           "is not a fuseopt.torch checkpoint")
        harness.expect_error(FileNotFoundError,
                             lambda: hvd.load_checkpoint(path + ".missing", model()), "rank 0")

    def hostile_payload_never_runs():
        path = shared_file("hostile.pt", lambda p: torch.save(
            {"format": FORMAT, "model": Payload()}, p))
        refused_everywhere(lambda: hvd.load_checkpoint(path, model()), "hostile.pt")

    def truncated_and_mismatched():
        m, opt = model(), torch.optim.SGD(model().parameters(), lr=0.1)
        path = os.path.join(DIR, "good.pt")
        hvd.save_checkpoint(path, m, step=3, extra={"epoch": 1, "best": torch.ones(2)})
        other = model(3)
        before = [p.detach().clone() for p in other.parameters()]
        refused_everywhere(lambda: hvd.load_checkpoint(path, other), "good.pt",
                           "different model", "weight has shape [1, 2] in the file, [1, 3]")
        assert all(torch.equal(a, b) for a, b in zip(before, other.parameters())), \
            "a mismatched file changed the model"
        ckpt = hvd.load_checkpoint(path, m)
        assert ckpt.step == 3 and torch.equal(ckpt.extra["best"], torch.ones(2)), ckpt
        if hvd.rank() == 0:
            truncate(path)
        hvd.barrier()
        refused_everywhere(lambda: hvd.load_checkpoint(path, m), "good.pt")
        del opt

    def unsafe_extra_is_refused_at_save():
        harness.expect_error(fuseopt_errors().InvalidArgumentError,
                             lambda: hvd.save_checkpoint(os.path.join(DIR, "x.pt"), model(),
                                                         extra={"sampler": Payload()}),
                             "extra['sampler']", "plain data")

    return [foreign_file, hostile_payload_never_runs, truncated_and_mismatched,
            unsafe_extra_is_refused_at_save]


def keras_checks():
    import pickle
    from tf_common import keras, hvd

    def model(units=3):
        m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(units)])
        m.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01)), loss="mse")
        return m

    def pickled_file_is_never_unpickled():
        def write(p):
            with open(p, "wb") as f:
                pickle.dump({"format": "fuseopt.keras.checkpoint/1", "model": Payload()}, f)
        path = shared_file("old.fuseopt", write)
        refused_everywhere(lambda: hvd.load_checkpoint(path, model()), "old.fuseopt")

    def truncated_and_mismatched():
        m = model()
        path = os.path.join(DIR, "good.fuseopt")
        hvd.save_checkpoint(path, m, step=2, extra={"epoch": 2})
        other = model(units=5)
        before = [np.array(w) for w in other.get_weights()]
        refused_everywhere(lambda: hvd.load_checkpoint(path, other), "good.fuseopt",
                           "different model")
        assert all(np.array_equal(a, b) for a, b in zip(before, other.get_weights()))
        assert hvd.load_checkpoint(path, m).extra == {"epoch": 2}
        if hvd.rank() == 0:
            truncate(path)
        hvd.barrier()
        refused_everywhere(lambda: hvd.load_checkpoint(path, m), "good.fuseopt")

    def unsafe_extra_is_refused_at_save():
        harness.expect_error(fuseopt_errors().InvalidArgumentError,
                             lambda: hvd.save_checkpoint(os.path.join(DIR, "x.fuseopt"), model(),
                                                         extra={"when": object()}),
                             "not plain JSON data")

    return [pickled_file_is_never_unpickled, truncated_and_mismatched,
            unsafe_extra_is_refused_at_save]


def fuseopt_errors():
    import fuseopt
    return fuseopt


if __name__ == "__main__":
    harness.run(torch_checks() if KIND == "torch" else keras_checks())
