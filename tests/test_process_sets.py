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
