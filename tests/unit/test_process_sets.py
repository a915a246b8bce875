"""ProcessSet values, without ranks: equality by ranks, and the check that
keeps process_set= from being ignored."""
import pytest

from fuseopt.errors import InvalidArgumentError, UnsupportedError
from fuseopt.process_sets import ProcessSet, global_process_set, require_global


def test_sets_compare_by_their_ranks():
    assert ProcessSet([1, 0, 1]) == ProcessSet([0, 1])
    assert hash(ProcessSet([1, 0])) == hash(ProcessSet((0, 1)))
    assert ProcessSet([0]) != ProcessSet([0, 1]) and ProcessSet([0]) != global_process_set
    assert repr(ProcessSet([2, 0])) == "ProcessSet([0, 2])"


def test_only_the_global_set_passes_without_a_runtime():
    require_global(None)
    require_global(global_process_set)
    with pytest.raises(InvalidArgumentError, match="ProcessSet, not object"):
        require_global(object())
    with pytest.raises(UnsupportedError, match="mpi4py communicator"):
        ProcessSet(object())
