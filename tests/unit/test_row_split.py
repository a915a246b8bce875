"""The reducescatter row split, one function in the core (policy/row_split.cc)
that both executors and fuseopt.api.ops.reducescatter_rows use, without ranks."""
import pytest

from fuseopt.api.ops import reducescatter_rows


@pytest.mark.parametrize("rows,size", [(0, 1), (1, 2), (7, 3), (8, 4), (5, 8), (1000003, 7)])
def test_every_row_lands_once_and_the_first_ranks_take_the_remainder(rows, size):
    split = [reducescatter_rows(rows, r, size) for r in range(size)]
    assert sum(split) == rows
    assert max(split) - min(split) <= 1
    assert split == sorted(split, reverse=True)  # the extra rows go to the first ranks
