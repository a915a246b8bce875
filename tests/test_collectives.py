"""Every collective x dtype x op, zero-element tensors, tensors above the
fusion threshold and a tiny threshold forcing many buckets, at 1, 2, 4 ranks."""
import pytest


@pytest.mark.parametrize("nranks", [1, 2, 4])
def test_collectives_default_threshold(run_ranks, nranks):
    run_ranks(nranks, "collectives.py", timeout=240)


@pytest.mark.parametrize("nranks", [2, 4])
def test_collectives_tiny_threshold_forces_many_buckets(run_ranks, nranks):
    # 1 KiB: most tensors of check_fused_many_and_large exceed it and the rest
    # are split across many buckets.
    run_ranks(nranks, "collectives.py", 1024, timeout=240)


def test_collectives_fusion_disabled(run_ranks):
    run_ranks(2, "collectives.py", 0, timeout=240)
