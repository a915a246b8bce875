"""A blocking call's wait runs the rounds on its own thread, shares them with
the loop thread and other threads, and hands a round the other ranks are late
for back to the loop thread (Note [Turns]). The checks are in
tests/workers/turns.py."""


def test_rounds_run_by_waiting_threads(run_ranks):
    out = run_ranks(2, "turns.py", timeout=180).output
    assert out.count("5 checks, 0 failed") == 2, out
