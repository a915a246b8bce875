"""Ordering, response cache renegotiation, mismatch errors on every rank."""
import pytest


@pytest.mark.parametrize("nranks", [1, 2, 4])
def test_negotiation(run_ranks, nranks):
    run_ranks(nranks, "negotiation.py", timeout=240)


def test_negotiation_without_response_cache(run_ranks):
    run_ranks(2, "negotiation.py", env={"FUSEOPT_CACHE_CAPACITY": "0"}, timeout=240)


def test_negotiation_with_tiny_cache_evicting_constantly(run_ranks):
    run_ranks(2, "negotiation.py", env={"FUSEOPT_CACHE_CAPACITY": "3"}, timeout=240)


@pytest.mark.parametrize("nranks", [1, 2])
def test_metrics_counters_add_up(run_ranks, nranks):
    run_ranks(nranks, "metrics.py")
