"""An idle job costs next to no CPU (the loop sleeps instead of spinning)."""


def test_idle_loop_thread_does_not_spin(run_ranks):
    r = run_ranks(2, "idle.py", 0.05)
    assert r.output.count("idle CPU") == 2
