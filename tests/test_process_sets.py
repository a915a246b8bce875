"""Process sets (Horovod >= 0.23) at 2 and 4 ranks: the numpy level
(tests/workers/process_sets.py), PyTorch (torch_process_sets.py) and
TensorFlow and Keras (tf_process_sets.py). Rank-free checks of ProcessSet itself are in
tests/unit/test_process_set_values.py."""
import pytest


@pytest.mark.parametrize("nranks", [2, 4])
def test_numpy_level(run_ranks, nranks):
    r = run_ranks(nranks, "process_sets.py", timeout=240)
    assert r.output.count("5 checks, 0 failed") == nranks, r


@pytest.mark.parametrize("nranks", [2, 4])
def test_torch(run_ranks, nranks):
    r = run_ranks(nranks, "torch_process_sets.py", timeout=300)
    assert r.output.count("3 checks, 0 failed") == nranks, r


@pytest.mark.parametrize("nranks", [2, 4])
def test_tensorflow(run_ranks, nranks):
    r = run_ranks(nranks, "tf_process_sets.py", timeout=400)
    assert r.output.count("3 checks, 0 failed") == nranks, r
