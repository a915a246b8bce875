"""Which failed rank fuseoptrun blames first (launcher/failure_summary.py,
Note [Deaths too close to order])."""
import signal

from fuseopt.launcher.failure_summary import CLOSE_S, first_failures_first


def record(rank, end_time, sig=None, code=None):
    return {"rank": rank, "end_time": end_time, "signal": sig, "exit_code": code}


def order(*records):
    return [r["rank"] for r in first_failures_first(records)]


def test_failures_are_ordered_by_end_time():
    assert order(record(2, 10.5, code=1), record(0, 10.0, code=1), record(1, 12.0, code=3)) == \
        [0, 2, 1]


def test_an_external_sigkill_just_after_a_crash_is_the_cause():
    # The flake this rule fixes: rank 3 killed with SIGKILL, its partner's MPI
    # crashes on the broken connection and its wrapper is scheduled first.
    crashed = record(1, 100.0, sig=signal.SIGSEGV)
    killed = record(3, 100.0 + CLOSE_S / 2, sig=signal.SIGKILL)
    assert order(crashed, killed) == [3, 1]


def test_a_sigkill_long_after_the_first_failure_is_not_the_cause():
    crashed = record(1, 100.0, sig=signal.SIGSEGV)
    killed = record(3, 100.0 + 2 * CLOSE_S, sig=signal.SIGKILL)
    assert order(crashed, killed) == [1, 3]


def test_exit_codes_close_together_keep_their_order():
    assert order(record(1, 5.0, code=1), record(0, 5.1, code=2)) == [1, 0]


def test_the_first_of_several_close_sigkills_is_the_cause():
    assert order(record(0, 1.0, code=1), record(2, 1.3, sig=signal.SIGKILL),
                 record(1, 1.2, sig=signal.SIGKILL)) == [1, 0, 2]


def test_no_failures():
    assert order() == []
