"""Which rank ``fuseopt.spark.run`` blames when ranks die (spark/runner.py's
_results): the outcomes arrive in the order the listener's threads hand them
over, not the order the ranks died in."""
import pickle

import pytest

from fuseopt.base.errors import RankFailedError
from fuseopt.spark.runner import _SparkJob


def error(rank, kind):
    return ("error", rank, pickle.dumps({"type": "fuseopt.base.errors." + kind, "size": 2,
                                         "time": 1.0, "traceback": "", "exception": None}))


def blamed(*messages):
    job = _SparkJob(context=None, size=2, timeout=1.0, printer=None)
    job.messages = list(messages)
    with pytest.raises(RankFailedError) as raised:
        job._results([], None)
    return str(raised.value).split(" (")[0]


def test_a_killed_rank_is_blamed_even_when_its_partner_exits_first():
    # The CI flake: rank 1 killed, rank 0 raised ShutDownError for it and its
    # exit reached the driver first.
    assert blamed(error(0, "ShutDownError"), ("exit", 0, 1, "vm"),
                  ("exit", 1, -9, "vm")) == "fuseopt.spark.run: rank 1 of 2"


def test_without_errors_the_first_exit_is_blamed():
    assert blamed(("exit", 0, -9, "vm"), ("exit", 1, 1, "vm")) == "fuseopt.spark.run: rank 0 of 2"


def test_when_every_dead_rank_lost_another_the_first_is_blamed():
    assert blamed(error(0, "RankFailedError"), error(1, "ShutDownError"), ("exit", 1, 1, "vm"),
                  ("exit", 0, 1, "vm")) == "fuseopt.spark.run: rank 1 of 2"


def test_a_rank_the_driver_stopped_is_not_blamed_though_its_exit_comes_first():
    # The next CI flake: the PMI server saw rank 1 go and the driver stopped
    # rank 0 (killed: -9, no error) before rank 1's own exit reached it.
    assert blamed(("exit", 0, -9, "vm", True), ("exit", 1, -9, "vm", False)) == \
        "fuseopt.spark.run: rank 1 of 2"
