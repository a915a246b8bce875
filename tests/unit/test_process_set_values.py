"""ProcessSet values and argument checks, without ranks."""
import numpy as np
import pytest

from fuseopt.base.errors import InvalidArgumentError, UnsupportedError
from fuseopt.core.process_sets import ProcessSet, global_process_set, id_of


def test_sets_compare_by_their_ranks():
    assert ProcessSet([1, 0]) == ProcessSet((0, 1))
    assert hash(ProcessSet([1, 0])) == hash(ProcessSet((0, 1)))
    assert ProcessSet([0]) != ProcessSet([0, 1]) and ProcessSet([0]) != global_process_set
    assert ProcessSet(np.array([2, 0])).ranks == [0, 2]
    assert repr(ProcessSet([2, 0])) == "ProcessSet(process_set_id=None, ranks=[0, 2], mpi_comm=None)"


class Comm:
    """Stands for mpi4py's communicator class (recognized by type)."""


Comm.__module__ = "mpi4py.MPI"


class Intracomm(Comm):
    pass


def test_any_iterable_of_ints_gives_a_set_sorted_once_each_as_horovod():
    for ranks in ([2, 0, 2], (2, 0), range(0, 3, 2), reversed(range(0, 3, 2)), {0, 2},
                  (r for r in (2, 0)), np.array([2, 0, 0]), np.arange(0, 3, 2, dtype=np.int16)):
        assert ProcessSet(ranks).ranks == [0, 2], ranks
    assert all(type(r) is int for r in ProcessSet(np.array([3, 1])).ranks)


def test_an_unadded_set_has_no_size_or_rank_as_in_horovod():
    ps = ProcessSet([0, 1])
    assert ps.process_set_id is None and ps.size() is None and ps.rank() is None


def test_bad_sets_and_arguments_raise():
    assert id_of(None) == 0 and id_of(global_process_set) == 0
    with pytest.raises(InvalidArgumentError, match="ProcessSet, not object"):
        id_of(object())
    with pytest.raises(InvalidArgumentError, match="has not been added"):
        id_of(ProcessSet([0]))
    with pytest.raises(UnsupportedError, match="mpi4py communicator"):
        ProcessSet(Intracomm())
    with pytest.raises(InvalidArgumentError, match="iterable of global ranks, not object"):
        ProcessSet(object())
    with pytest.raises(InvalidArgumentError, match="element 1 is 1.5"):
        ProcessSet([0, 1.5])
    with pytest.raises(InvalidArgumentError, match="element 0 is '0'"):
        ProcessSet("01")
    with pytest.raises(InvalidArgumentError, match="must be ints"):
        ProcessSet([True])
