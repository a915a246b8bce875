"""Uneven data per rank with join(): no deadlock, exact results."""
import pytest


@pytest.mark.parametrize("nranks", [2, 4])
def test_join_with_uneven_data(run_ranks, nranks):
    run_ranks(nranks, "join.py")


def test_join_without_cache(run_ranks):
    run_ranks(2, "join.py", env={"FUSEOPT_CACHE_CAPACITY": "0"})
