"""What happens when a rank is lost: every survivor stops within a bounded time
with an error naming what went wrong, and fuseoptrun says which rank failed."""
import os
import re
import subprocess
import sys
import time

import pytest


def survivors_reported(output, ranks):
    for r in ranks:
        assert "[rank %d] survivor ok" % r in output, output
        assert "[rank %d] init again refused" % r in output, output


def survivor_caught(output, rank):
    """(seconds, message) of what a survivor caught."""
    line = re.search(r"\[rank %d\] caught RankFailedError after ([\d.]+) s: (.*)" % rank, output)
    assert line, output
    return float(line.group(1)), line.group(2)


# syncbn-*: the rank is lost between two SyncBatchNorm layers, so the others
# wait in an agreed reduction (no negotiation round, no loop thread).
@pytest.mark.parametrize("mode", ["kill", "syncbn-kill"])
def test_killed_rank_is_named_on_every_survivor(run_ranks, mode):
    started = time.time()
    r = run_ranks(3, "lost_rank.py", mode, expect_ok=False, timeout=90)
    elapsed = time.time() - started
    assert r.code != 0, r
    survivors_reported(r.output, [0, 2])
    for rank in (0, 2):
        waited, message = survivor_caught(r.output, rank)
        assert waited < 10, message  # the watcher polls every 0.2 s
        assert "rank 1 (host" in message and "SIGKILL" in message, message
    assert "rank 1 on" in r.output and "failed first (signal SIGKILL" in r.output, r.output
    assert elapsed < 60, elapsed


@pytest.mark.parametrize("mode, waiting_in", [("freeze", "negotiating"),
                                              ("syncbn-freeze", "in an agreed reduction")])
def test_frozen_rank_times_out_on_the_survivor(run_ranks, mode, waiting_in):
    r = run_ranks(2, "lost_rank.py", mode, expect_ok=False, timeout=90,
                  env={"FUSEOPT_PEER_TIMEOUT_S": "2"})
    assert r.code != 0, r
    survivors_reported(r.output, [0])
    waited, message = survivor_caught(r.output, 0)
    assert 1.5 < waited < 20, message
    assert "FUSEOPT_PEER_TIMEOUT_S=2" in message and waiting_in in message, message
    assert "stopped first, reporting a failed or stalled peer" in r.output, r.output
    assert "rank 1: stopped by mpiexec (it had not exited" in r.output, r.output


def test_c_abi_validation_property(tmp_path):
    # One plain process (a world of size 1): hypothesis drives fuseopt_enqueue
    # and the other entry points with arguments in and out of range.
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.path.join(here, "workers"),
               HYPOTHESIS_STORAGE_DIRECTORY=str(tmp_path))
    env.pop("FUSEOPT_LAUNCH_DIR", None)
    proc = subprocess.run([sys.executable, os.path.join(here, "workers", "abi_fuzz.py")],
                          capture_output=True, text=True, timeout=300, env=env, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("ok check_") == 3, proc.stdout


def test_random_operation_sequences_and_threads_on_two_ranks(run_ranks):
    run_ranks(2, "fuzz_sequences.py", 0, 40, timeout=180)


def test_random_operation_sequences_and_threads_on_three_ranks(run_ranks):
    run_ranks(3, "fuzz_sequences.py", 1000, 10, timeout=180)


def test_soak_keeps_memory_and_handles_flat(run_ranks):
    r = run_ranks(2, "soak.py", "--steps", 3000, "--warmup", 500, "--check", "--max-growth-mb", 4,
                  timeout=180)
    assert "handles left: 0" in r.output, r


def test_stall_warns_then_stops_every_rank(run_ranks):
    # Rank 1 is alive but never submits the tensor rank 0 waits for.
    r = run_ranks(2, "stall.py", expect_ok=False, timeout=90,
                  env={"FUSEOPT_STALL_CHECK_S": "1", "FUSEOPT_STALL_SHUTDOWN_S": "3"})
    assert "tensor 'stalled.tensor' has waited 1 s: ranks 1 have not submitted it" in r.output, r
    for rank in (0, 1):
        line = re.search(r"\[rank %d\] RankFailedError after ([\d.]+) s: (.*)" % rank, r.output)
        assert line, r.output
        assert "'stalled.tensor' stalled for 3 s: rank(s) 1 never submitted it" in line.group(2)
    # Rank 0 was waiting: it fails at the limit, not at rank 1's next call.
    assert float(re.search(r"\[rank 0\] RankFailedError after ([\d.]+)", r.output).group(1)) < 10
