"""Process sets, as in Horovod (>= 0.23): collectives among a subset of the
ranks.

A set is added on every rank (``add_process_set`` or ``init(process_sets=)``)
and then passed as ``process_set=`` to collectives, which only its members
may call. In the core each set has its own communicator, negotiation and
response cache, and its tensors are never fused with another set's
(docs/design.md). Ranks in arguments (``root_rank``) stay global ranks;
``ProcessSet.rank()`` is this rank's position in the set.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, Optional, Tuple
import numbers
import types

import numpy as np

from . import requests as _rq
from . import world
from ..base.errors import InvalidArgumentError, UnsupportedError

class ProcessSet:
    """A set of global ranks, from any iterable of ints (sorted, each rank
    once). Horovod's fields: ``ranks`` (ascending), ``process_set_id`` (None
    until added; 0 for the global set) and ``mpi_comm`` (always None: sets
    from mpi4py communicators raise UnsupportedError)."""

    mpi_comm = None

    def __init__(self, ranks_or_comm: Optional[Iterable[int]] = None) -> None:
        self._ctx = None  # the runtime it was added in (ids restart with init)
        self.ranks: Optional[list] = None  # the global set's: every rank, set by init
        self.process_set_id: Optional[int] = 0  # None until added
        if ranks_or_comm is None:  # the global set
            return
        if _is_mpi4py_communicator(ranks_or_comm):
            raise UnsupportedError(
                "ProcessSet(%r): pass the list of global ranks (an mpi4py communicator is not "
                "supported; its ranks are comm.group.Translate_ranks(range(comm.size), "
                "MPI.COMM_WORLD.group))" % (ranks_or_comm,))
        try:
            ranks = list(ranks_or_comm)
        except TypeError:
            raise InvalidArgumentError(
                "ProcessSet takes an iterable of global ranks, not %s (%r)"
                % (type(ranks_or_comm).__name__, ranks_or_comm)) from None
        for i, r in enumerate(ranks):
            if isinstance(r, (bool, np.bool_)) or not isinstance(r, (numbers.Integral, np.integer)):
                raise InvalidArgumentError("ProcessSet ranks must be ints: element %d is %r (%s)"
                                           % (i, r, type(r).__name__))
        # As Horovod: any order (a set is its members), each rank once.
        self.ranks = sorted(set(int(r) for r in ranks))
        self.process_set_id = None

    def _added(self):
        return self.process_set_id == 0 or (self.process_set_id is not None
                                            and self._ctx is world.context())

    def size(self):
        """Number of ranks in the set; None until it is added (as Horovod)."""
        if self.process_set_id == 0:
            return world.size()
        return len(self.ranks) if self._added() else None

    def rank(self):
        """This rank's position in the set (None until added); raises on a
        rank that is not a member."""
        if self.process_set_id == 0:
            return world.rank()
        if not self._added():
            return None
        if world.rank() not in self.ranks:
            raise InvalidArgumentError("rank %d is not a member of %r" % (world.rank(), self))
        return self.ranks.index(world.rank())

    def included(self):
        """Whether this rank is a member (None for a set without ranks)."""
        if self.process_set_id == 0:
            return True
        return None if self.ranks is None else world.rank() in self.ranks

    def __eq__(self, other):  # one set per list of ranks: duplicates are refused
        return isinstance(other, ProcessSet) and self.ranks == other.ranks

    def __hash__(self):
        return hash(tuple(self.ranks or ()))

    def __repr__(self):  # Horovod's __str__, which its tests compare
        return "ProcessSet(process_set_id=%s, ranks=%s, mpi_comm=%s)" % (
            self.process_set_id, self.ranks, self.mpi_comm)


def _is_mpi4py_communicator(value):
    """By type, without importing mpi4py (importing it may initialise MPI)."""
    return any(cls.__module__.split(".")[0] == "mpi4py" and cls.__name__ == "Comm"
               for cls in type(value).__mro__)


global_process_set = ProcessSet()


def id_of(process_set):
    """The core's id for a ``process_set=`` argument; raises for anything
    that is not an added ProcessSet. Every binding calls this."""
    if process_set is None or process_set is global_process_set:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise InvalidArgumentError("process_set must be a hvd.ProcessSet, not %s"
                                   % type(process_set).__name__)
    if process_set.process_set_id == 0:
        return 0
    if not process_set._added():
        raise InvalidArgumentError(
            "%r has not been added (or was removed, or added before the last init): call "
            "hvd.add_process_set on every rank, or pass it to hvd.init(process_sets=...)"
            % (process_set,))
    return process_set.process_set_id


def size_of(process_set):
    """Ranks in the set named by a ``process_set=`` argument."""
    return world.size() if id_of(process_set) == 0 else len(process_set.ranks)


def rank_in(process_set):
    """This rank's position in that set."""
    return world.rank() if id_of(process_set) == 0 else process_set.rank()


def add_process_set(process_set: Optional[ProcessSet]) -> ProcessSet:
    """Adds a set of ranks (a ProcessSet or a list of ranks) and returns it
    with its id. Collective: every rank calls it, with the same ranks (else
    every rank raises MismatchError). A set with the same ranks as an existing
    one (the global set included) raises ValueError, as in Horovod."""
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id == 0:
        raise InvalidArgumentError("the global process set exists from init() on")
    ranks = np.asarray(ps.ranks, dtype=np.int32)
    if ranks.size == 0:
        raise InvalidArgumentError("a process set needs at least one rank")
    new_id = np.full(1, -1, dtype=np.int32)
    _rq.run_now(_rq.enqueue, _rq.PROCESS_SET_ADD, None, "int32", ranks.shape,
                _rq.ffi.from_buffer(ranks), _rq.ffi.from_buffer(new_id),
                keepalive=(ranks, new_id))
    ps.process_set_id, ps._ctx = int(new_id[0]), world.context()
    _added_sets[tuple(ranks.tolist())] = (ps.process_set_id, ps._ctx)
    return ps


# ranks -> (id, runtime) of every set added since init, for init() called
# again with sets of the same ranks (Horovod gives them the existing ids).
_added_sets: Dict[Tuple[int, ...], Tuple[int, Any]] = {}


def existing_id(ranks):
    """The id of the added set of these ranks in this runtime, or None."""
    ident, ctx = _added_sets.get(tuple(ranks), (None, None))
    return ident if ctx is not None and ctx is world.context() else None


def ids_and_ranks():
    """{id: ranks} of the global set and every added set (Horovod's
    ``_get_process_set_ids_and_ranks``)."""
    out = {0: list(range(world.size()))}
    out.update({ident: list(ranks) for ranks, (ident, ctx) in _added_sets.items()
                if ctx is world.context()})
    return dict(sorted(out.items()))


# Horovod's ``mpi_ops._basics``, as far as its process-set tests reach in.
horovod_basics = types.SimpleNamespace(_get_process_set_ids_and_ranks=ids_and_ranks)


def remove_process_set(process_set: Optional[ProcessSet]) -> bool:
    """Removes an added set (collective, on every rank) and returns True;
    False for a set that is not added or is the global set, as in Horovod.
    Operations of the set still in flight fail."""
    if not isinstance(process_set, ProcessSet):
        raise InvalidArgumentError("remove_process_set takes a hvd.ProcessSet")
    if process_set.process_set_id == 0 or not process_set._added():
        return False
    ident = np.full(1, process_set.process_set_id, dtype=np.int32)
    _rq.run_now(_rq.enqueue, _rq.PROCESS_SET_REMOVE, None, "int32", ident.shape,
                _rq.ffi.from_buffer(ident), keepalive=(ident,))
    _added_sets.pop(tuple(process_set.ranks or ()), None)
    process_set.process_set_id, process_set._ctx = None, None  # only once it is gone
    return True

