"""fuseopt.run (Horovod's horovod.run) from a plain Python process, as a
user or a notebook calls it: results in rank order, a rank's exception raised
in the caller naming the rank, refused arguments, and a training loop that
gives the same weights, bit for bit, as the same loop in a fuseoptrun job.
The driver is tests/workers/run_driver.py."""
import re

from conftest import drive as conftest_drive, trained_by_fuseoptrun


def drive(case):
    return conftest_drive("run_driver.py", case)


def test_results_come_back_in_rank_order():
    cases, out = drive("results")
    assert cases["results"] == [(0, 2, 7.0), (1, 2, 7.0)], out
    assert cases["closure"] == [11, 11], out


def test_a_rank_error_is_raised_in_the_caller_naming_the_rank():
    cases, out = drive("errors")
    # The rank that failed first is blamed, not rank 0, which then lost its peer.
    assert cases["rank error"] == ("rank one gives up",
                                   "raised on rank 1 of 2 in fuseopt.run; the rank's traceback:")
    # Both ranks raise it; whichever came first is named, with its message
    # (the lock it holds cannot travel, its class name and text do).
    assert re.match(r"rank [01] of 2 raised builtins\.RuntimeError: holding a lock",
                    cases["unpicklable error"]), out
    assert "fuseoptrun exit code" in cases["silent death"], out
    assert cases["refused ['use_gloo']"] == "UnsupportedError", out
    assert cases["refused ['hostfile', 'hosts']"] == "ValueError", out
    assert cases["refused ['cooldown_range']"] == "UnsupportedError", out


def test_training_matches_a_fuseoptrun_job_bit_for_bit():
    cases, out = drive("training")
    through_run = cases["training"]
    through_job = trained_by_fuseoptrun()
    assert [r for r, _, _ in through_run] == [0, 1] and through_run == through_job, (out,
                                                                                     through_job)
    assert through_run[0][2] == through_run[1][2]  # data parallel: every rank the same weights
