"""A user's script calling fuseopt.run (not a rank: tests/test_run.py runs it
with plain python). Functions defined here live in __main__, as in a
notebook, so cloudpickle sends them by value. Prints one ``CASE name: value``
line per case for the test to check."""
import sys
import threading

import numpy as np

import fuseopt
from script_cases import report



def collectives(scale, offset=0):
    fuseopt.init()
    r, n = fuseopt.rank(), fuseopt.size()
    total = fuseopt.allreduce(np.array([r + 1.0]) * scale, name="run.sum", op=fuseopt.Sum)
    return r, n, float(total[0]) + offset


class DriverError(Exception):
    """Defined in __main__: it travels back by value."""


def fails_on_rank_one():
    fuseopt.init()
    if fuseopt.rank() == 1:
        raise DriverError("rank one gives up")
    fuseopt.allreduce(np.ones(2), name="run.never")  # rank 0 waits here and loses its peer


def raises_what_cannot_be_pickled():
    error = RuntimeError("holding a lock")
    error.lock = threading.Lock()
    raise error


def dies_without_a_word():
    import os
    os._exit(3)


def case_results():
    report("results", fuseopt.run(collectives, args=(2.0,), kwargs={"offset": 1}, num_proc=2))
    captured = 10
    report("closure", fuseopt.run(lambda: captured + 1, np=2))


def case_errors():
    try:
        fuseopt.run(fails_on_rank_one, num_proc=2)
    except DriverError as e:
        report("rank error", (str(e), e.__notes__[0].splitlines()[0]))
    try:
        fuseopt.run(raises_what_cannot_be_pickled, num_proc=2)
    except RuntimeError as e:
        report("unpicklable error", str(e).splitlines()[0])
    try:
        fuseopt.run(dies_without_a_word, num_proc=2)
    except RuntimeError as e:
        report("silent death", str(e).splitlines()[0])
    for kwargs in ({"use_gloo": True}, {"hosts": "localhost:2", "hostfile": "h"},
                   {"cooldown_range": (1, 2)}):
        try:
            fuseopt.run(collectives, args=(1.0,), num_proc=2, **kwargs)
        except (ValueError, fuseopt.UnsupportedError) as e:
            report("refused %s" % sorted(kwargs), type(e).__name__)


def case_training():
    import run_train
    report("training", fuseopt.run(run_train.train, num_proc=2))


if __name__ == "__main__":
    {"results": case_results, "errors": case_errors, "training": case_training}[sys.argv[1]]()
