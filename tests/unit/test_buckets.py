"""Gradient buckets and Horovod's explicit groups (fuseopt/training/buckets.py),
without ranks: both bindings take their groups from here."""
import pytest

from fuseopt.training import buckets
from fuseopt.base.errors import InvalidArgumentError


class Param:  # unhashable, as TensorFlow variables are
    __hash__ = None

    def __init__(self, name):
        self.name = name


def test_split_closes_a_bucket_once_it_holds_the_cap():
    assert buckets.split([3, 3, 3, 10, 1], 6) == [[0, 1], [2, 3], [4]]
    assert buckets.split([1, 1], float("inf")) == [[0, 1]]
    assert buckets.split([5, 5], 0) == [[0], [1]]


def test_the_open_bucket_closes_as_gradients_arrive_with_the_same_rule_as_split():
    sizes = [3, 3, 3, 10, 1]
    bucket, closed = buckets.OpenBucket(6), []
    for i, n in enumerate(sizes):
        assert i not in bucket
        out = bucket.add(i, n)
        if out:
            closed.append(out)
            assert not bucket and i not in bucket  # empty again once closed
        else:
            assert i in bucket and bucket
    assert closed + [bucket.take()] == buckets.split(sizes, 6)
    assert bucket.take() == [] and not bucket
    bucket.add(7, 1)
    bucket.add(7, 1)  # a gradient counted again is held once
    assert bucket.take() == [7]
    zero = buckets.OpenBucket(0)  # bucket_cap_mb=0: every add closes a bucket
    zero.hold(3)  # ... but a held index waits for the caller's take
    assert 3 in zero and zero.take() == [3]


@pytest.mark.parametrize("n, k, want", [
    (10, 4, [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]),   # Horovod's split_list: the first n % k longer
    (4, 4, [0, 1, 2, 3]),
    (3, 5, [0, 1, 2]),                          # more groups than parameters
    (6, 1, [0] * 6)])
def test_an_integer_splits_in_order_as_horovod(n, k, want):
    items = [Param(str(i)) for i in range(n)]
    assert buckets.group_of(items, groups=k) == want
    assert buckets.group_of(items, num_groups=k) == want  # the older spelling


def test_lists_group_by_identity_and_leave_the_rest_ungrouped():
    a, b, c, d = (Param(x) for x in "abcd")
    assert buckets.group_of([a, b, c, d], groups=[[c, a], [d]]) == [0, None, 0, 1]
    assert buckets.group_of([a, b], groups=None) == [None, None]


@pytest.mark.parametrize("num_groups, groups, match", [
    (0, 0, "positive integer"), (0, -2, "positive integer"), (0, "two", "list of lists"),
    (0, [1, 2], "list of lists"), (-1, None, "non-negative"), (1.5, None, "non-negative"),
    (0, True, "list of lists")])
def test_bad_groups_are_refused_with_horovods_words(num_groups, groups, match):
    with pytest.raises(InvalidArgumentError, match=match):
        buckets.check_groups(num_groups, groups)


def test_a_grouped_parameter_the_optimizer_does_not_have_is_named():
    a, stranger = Param("a"), Param("dense/kernel")
    with pytest.raises(InvalidArgumentError, match="dense/kernel"):
        buckets.group_of([a], groups=[[a, stranger]])
