"""Agreed reductions and SyncBatchNorm on them across ranks (tests/workers/agreed.py);
a rank lost inside a SyncBatchNorm step is in test_reliability.py, the kernel
against its reference in tests/unit/test_batch_norm_kernel.py."""
import pytest


# 2: one exchange; 3: a rank beyond a power of two folds in first. The
# schedule at every size to 70 is simulated in native/tests/policy_test.cc.
@pytest.mark.parametrize("nranks", [2, 3])
def test_agreed_reductions(run_ranks, nranks):
    run_ranks(nranks, "agreed.py", timeout=120)
