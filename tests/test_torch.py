"""PyTorch binding at 1, 2 and 4 ranks: ops (tests/workers/torch_ops.py) and
training equivalence, accumulation, compression, unused parameters, LR
schedulers, GradScaler, broadcast of state, local SGD, torch.compile and join
(tests/workers/torch_training.py)."""
import pytest




@pytest.mark.parametrize("nranks", [1, 2, 4])
def test_torch_ops(run_ranks, nranks):
    run_ranks(nranks, "torch_ops.py", timeout=180)


@pytest.mark.parametrize("nranks", [2, 4])
def test_torch_training(run_ranks, nranks):
    run_ranks(nranks, "torch_training.py", timeout=400)


@pytest.mark.parametrize("nranks", [1, 2, 4])
def test_torch_sync_batch_norm(run_ranks, nranks):
    run_ranks(nranks, "torch_syncbn.py", timeout=180)
