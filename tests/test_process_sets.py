"""Process sets (Horovod >= 0.23): the numpy level at 2 and 4 ranks
(tests/workers/process_sets.py); PyTorch (torch_process_sets.py) and
TensorFlow and Keras (tf_process_sets.py) at 3 ranks, where the sets of even
and odd ranks are a pair and a single rank, the two shapes the 2- and 4-rank
runs each had one of (one run instead of two: 25 s less for TensorFlow).
Rank-free checks of ProcessSet itself are in tests/unit/test_process_set_values.py."""
import pytest


@pytest.mark.parametrize("nranks", [2, 4])
def test_numpy_level(run_ranks, nranks):
    r = run_ranks(nranks, "process_sets.py", timeout=240)
    assert r.output.count("5 checks, 0 failed") == nranks, r


def test_torch(run_ranks):
    r = run_ranks(3, "torch_process_sets.py", timeout=300)
    assert r.output.count("3 checks, 0 failed") == 3, r


def test_tensorflow(run_ranks):
    r = run_ranks(3, "tf_process_sets.py", timeout=400)
    assert r.output.count("3 checks, 0 failed") == 3, r


def test_a_rank_failing_to_build_its_sets_ends_init_on_the_others(run_ranks):
    """Issue 49: Horovod's test_static left the other rank in init() until
    its timeout when one rank raised building its sets. The init timeout is
    set far beyond this test's: only the launcher's news can end rank 0's wait."""
    r = run_ranks(2, "process_set_error.py", timeout=90, expect_ok=False,
                  env={"FUSEOPT_INIT_TIMEOUT_S": "3600"})
    assert "ProcessSet takes an iterable of global ranks, not int (5)" in r.output, r
    assert "rank 0 got: rank 1 " in r.output and "was lost" in r.output, r
