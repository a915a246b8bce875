"""op=Adasum: the collective and DistributedOptimizer(op=Adasum) against a
direct numpy implementation of the paper's formula (tests/workers/adasum.py)."""
import pytest


# 8 ranks: three levels of the recursion (4 would add only a subset of them).
@pytest.mark.parametrize("nranks", [1, 2, 8])
def test_adasum_matches_the_formula(run_ranks, nranks):
    r = run_ranks(nranks, "adasum.py", timeout=180)
    assert r.output.count("5 checks, 0 failed") == nranks, r


def test_adasum_on_three_ranks_is_refused_on_every_rank(run_ranks):
    r = run_ranks(3, "adasum.py", "odd", timeout=120)
    assert r.output.count("1 checks, 0 failed") == 3, r
