"""Agreed reductions and SyncBatchNorm on them across ranks (tests/workers/agreed.py);
a rank lost inside a SyncBatchNorm step is in test_reliability.py, the kernel
against its reference in tests/unit/test_batch_norm_kernel.py."""
import pytest


# 2: one exchange; 3 and 6: ranks beyond a power of two fold in first (one
# pair, two pairs) around one and two doubling steps.
@pytest.mark.parametrize("nranks", [2, 3, 6])
def test_agreed_reductions(run_ranks, nranks):
    run_ranks(nranks, "agreed.py", timeout=120)
