"""PyTorch binding at 1, 2 and 4 ranks: ops (tests/workers/torch_ops.py) and
training equivalence, accumulation, compression, unused parameters, LR
schedulers, GradScaler, broadcast of state, local SGD, torch.compile and join
(tests/workers/torch_training.py); the sharded optimizer at 2 and 3 ranks
(tests/workers/torch_sharded.py)."""
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


@pytest.mark.parametrize("nranks", [2, 3])
def test_torch_sharded_optimizer(run_ranks, nranks):
    # ZeRO-1/2 against a one-process reference; uneven shards at 3 ranks.
    run_ranks(nranks, "torch_sharded.py", timeout=300)
