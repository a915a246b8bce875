"""What happens when a rank is lost: every survivor stops within a bounded time
with an error naming what went wrong, and fuseoptrun says which rank failed."""
import re
import time

SURVIVOR_EXIT = 3  # tests/workers/lost_rank.py


def survivors_reported(output, ranks):
    for r in ranks:
        assert "[rank %d] survivor ok" % r in output, output
        assert "[rank %d] init again refused" % r in output, output


def test_killed_rank_is_named_on_every_survivor(run_ranks):
    started = time.time()
    r = run_ranks(3, "lost_rank.py", "kill", expect_ok=False, timeout=90)
    elapsed = time.time() - started
    assert r.code != 0, r
    survivors_reported(r.output, [0, 2])
    for rank in (0, 2):
        line = re.search(r"\[rank %d\] caught RankFailedError after ([\d.]+) s: (.*)" % rank, r.output)
        assert line, r.output
        assert float(line.group(1)) < 10, line.group(0)  # the watcher polls every 0.2 s
        assert "rank 1 (host" in line.group(2) and "SIGKILL" in line.group(2), line.group(0)
    assert "rank 1 on" in r.output and "failed first (signal SIGKILL" in r.output, r.output
    assert elapsed < 60, elapsed


def test_frozen_rank_times_out_on_the_survivor(run_ranks):
    r = run_ranks(2, "lost_rank.py", "freeze", expect_ok=False, timeout=90,
                  env={"FUSEOPT_PEER_TIMEOUT_S": "2"})
    assert r.code != 0, r
    survivors_reported(r.output, [0])
    line = re.search(r"\[rank 0\] caught RankFailedError after ([\d.]+) s: (.*)", r.output)
    assert line, r.output
    assert 1.5 < float(line.group(1)) < 20, line.group(0)
    assert "FUSEOPT_PEER_TIMEOUT_S=2" in line.group(2), line.group(0)
    assert "stopped first, reporting a lost peer" in r.output, r.output
    assert "rank 1: stopped by mpiexec (it had not exited" in r.output, r.output
