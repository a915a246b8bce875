"""Who runs the rounds (Note [Turns], native/src/loop/loop_turns.cc): a
blocking call's wait runs the negotiation round and the collective on the
calling thread, hands a round the other ranks are late for over to the loop
thread at its wait's deadline, and shares the rounds with the loop thread and
other threads. Every check asserts exact values, and the hand-over checks
assert the order of events, not durations: the other rank reports when it
submitted, and the waiting rank's signal handler or timeout must come first.

Usage: turns.py (2 ranks)"""
import os
import signal
import subprocess
import threading
import time

import numpy as np

import fuseopt
import rank_harness as harness
from fuseopt.core import requests as rq

LATE_S = 1.5  # how long rank 1 keeps rank 0 waiting in the hand-over checks


def freeze(seconds):
    """Stops this whole process, loop thread included, for a while: a round
    that rank 0 posts cannot end before (an idle rank's loop thread would
    answer it at once, and rank 0's thread would hand it back anyway)."""
    subprocess.Popen(["sh", "-c", "sleep %s; kill -CONT %d" % (seconds, os.getpid())])
    os.kill(os.getpid(), signal.SIGSTOP)


def exchange_times(mine):
    """Every rank's float, after the fact (both ranks take part)."""
    return [float(t) for t in fuseopt.allgather(np.array([mine], np.float64), name="times")]


def check_blocking_calls_from_threads_beside_async_work():
    # Three threads make blocking calls while a fourth keeps async work in
    # flight: rounds pass between the loop thread and whichever thread waits.
    r, n = fuseopt.rank(), fuseopt.size()
    errors = []

    def blocking(t):
        try:
            for i in range(150):
                out = fuseopt.allreduce(np.full(5, r + i + t, np.float64), name="b.%d.%d" % (t, i),
                                        op=fuseopt.Sum)
                assert np.array_equal(out, np.full(5, sum(q + i + t for q in range(n)))), out
        except Exception as e:  # reported by the main thread
            errors.append(e)

    def in_flight():
        try:
            handles = [fuseopt.allreduce_async(np.full(3, i, np.int64), name="a.%d" % i,
                                               op=fuseopt.Sum) for i in range(300)]
            for i, h in enumerate(handles):
                assert np.array_equal(h.wait(), np.full(3, n * i)), i
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=blocking, args=(t,)) for t in range(3)]
    threads.append(threading.Thread(target=in_flight))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def check_signal_handlers_run_while_a_peer_is_late():
    # The Python binding waits in 100 ms slices so that signal handlers run.
    # A thread running a round itself would sit in it until rank 1 came;
    # at its slice's deadline it leaves the round to the loop thread instead.
    r = fuseopt.rank()
    fired = []
    submitted = time.time()
    if r == 0:
        signal.signal(signal.SIGALRM, lambda *_: fired.append(time.time()))
        signal.setitimer(signal.ITIMER_REAL, 0.3)
    else:
        freeze(LATE_S)
        submitted = time.time()
    out = fuseopt.allreduce(np.array([r + 1.0]), name="late", op=fuseopt.Sum)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    times = exchange_times(fired[0] if fired else float("inf"))
    late = exchange_times(submitted)[1]
    assert out[0] == 3.0, out
    assert times[0] < late, "rank 0's handler ran at %.3f, after rank 1 submitted at %.3f" % (
        times[0], late)


def check_timed_wait_ends_on_time_and_can_wait_again():
    r = fuseopt.rank()
    if r == 1:
        freeze(LATE_S)
    submitted = time.time()
    handle = fuseopt.allreduce_async(np.array([r + 1.0]), name="timed", op=fuseopt.Sum)
    timed_out = float("inf")
    if r == 0:
        try:
            handle.wait(timeout=0.2)
        except fuseopt.TimeoutError:
            timed_out = time.time()
    value = handle.wait()[0]  # every collective before any assert
    late = exchange_times(submitted)[1]
    timed_out = exchange_times(timed_out)[0]
    assert value == 3.0, value
    assert timed_out < late, "rank 0's wait timed out at %.3f, rank 1 submitted at %.3f" % (
        timed_out, late)


def check_op_submitted_for_a_wait_completes_when_polled_instead():
    # fuseopt_enqueue_for_wait does not wake the loop thread; a caller that
    # polls instead of waiting still gets its result (the loop's next round).
    r = fuseopt.rank()
    rq._submitting.waited = True
    try:
        handle = fuseopt.allreduce_async(np.array([r + 1.0]), name="polled", op=fuseopt.Sum)
    finally:
        rq._submitting.waited = False
    while not handle.poll():
        time.sleep(0.001)
    assert handle.wait()[0] == 3.0


def check_shutdown_ends_a_blocking_call_waiting_in_another_thread():
    # Rank 0's thread waits (running rounds itself) for a name rank 1 never
    # submits; shutdown from the main thread must end it with ShutDownError.
    r = fuseopt.rank()
    caught = []
    if r == 0:
        def orphan():
            try:
                fuseopt.allreduce(np.ones(2), name="never.on.rank.1")
            except fuseopt.ShutDownError as e:
                caught.append(e)
        t = threading.Thread(target=orphan)
        t.start()
        time.sleep(0.3)
    fuseopt.shutdown()
    if r == 0:
        t.join(30)
        assert not t.is_alive() and caught, caught
    fuseopt.init()


if __name__ == "__main__":
    harness.run([check_blocking_calls_from_threads_beside_async_work,
                 check_signal_handlers_run_while_a_peer_is_late,
                 check_timed_wait_ends_on_time_and_can_wait_again,
                 check_op_submitted_for_a_wait_completes_when_polled_instead,
                 check_shutdown_ends_a_blocking_call_waiting_in_another_thread])
