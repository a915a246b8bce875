"""Horovod's process-set names, and the check that keeps ``process_set=``
from being a silent no-op.

fuseopt runs every collective over all ranks so far: per-set communicators,
negotiation and response caches are not in the core yet. So the global set
(``global_process_set``, or a ``ProcessSet`` of every rank) is accepted
everywhere, and any other set raises UnsupportedError at once, on the rank
that passed it, instead of being reduced over the wrong ranks.
"""
from . import runtime
from .errors import InvalidArgumentError, UnsupportedError

_NOT_YET = ("fuseopt runs collectives over all ranks only (process sets other than the global "
            "one are not implemented yet); split the job into separate fuseoptrun jobs, or use "
            "hvd.global_process_set")


class ProcessSet:
    """A set of ranks, as in Horovod. ``ranks=None`` means every rank."""

    def __init__(self, ranks_or_comm=None):
        if ranks_or_comm is not None and not isinstance(ranks_or_comm, (list, tuple, range, set)):
            raise UnsupportedError("ProcessSet(%r): only a list of ranks is supported (an mpi4py "
                                   "communicator is not)" % (ranks_or_comm,))
        self.ranks = None if ranks_or_comm is None else sorted({int(r) for r in ranks_or_comm})
        self.process_set_id = 0 if ranks_or_comm is None else None

    def _all_ranks(self):
        return list(range(runtime.size()))

    def covers_everyone(self):
        return self.ranks is None or self.ranks == self._all_ranks()

    def included(self):
        return self.ranks is None or runtime.rank() in self.ranks

    def rank(self):
        if not self.included():
            raise InvalidArgumentError("rank %d is not part of %r" % (runtime.rank(), self))
        return runtime.rank() if self.ranks is None else self.ranks.index(runtime.rank())

    def size(self):
        return runtime.size() if self.ranks is None else len(self.ranks)

    def __eq__(self, other):  # the global set is its own (ranks None), as Horovod's id 0
        return isinstance(other, ProcessSet) and self.ranks == other.ranks

    def __hash__(self):
        return hash(tuple(self.ranks or ()))

    def __repr__(self):
        return "ProcessSet(%s)" % ("global" if self.ranks is None else self.ranks)


global_process_set = ProcessSet()


def require_global(process_set):
    """Every binding calls this with its ``process_set=`` argument."""
    if process_set is None or process_set is global_process_set:
        return
    if not isinstance(process_set, ProcessSet):
        raise InvalidArgumentError("process_set must be a hvd.ProcessSet, not %s"
                                   % type(process_set).__name__)
    if not process_set.covers_everyone():
        raise UnsupportedError("%r: %s" % (process_set, _NOT_YET))


def add_process_set(process_set):
    """Horovod's dynamic process sets: only the set of every rank is accepted."""
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    require_global(ps)
    return ps


def remove_process_set(process_set):
    require_global(process_set)
    raise UnsupportedError("the global process set cannot be removed")


def init(comm=None, process_sets=None, **settings):
    """Horovod's ``init(comm=None, process_sets=None)`` plus fuseopt's knobs
    (see :func:`fuseopt.init`). ``comm`` (an mpi4py communicator or a list of
    ranks) is not supported: fuseopt runs on MPI_COMM_WORLD; ``process_sets``
    may only name the global set."""
    if comm is not None:
        raise UnsupportedError("init(comm=...): fuseopt runs on all ranks of the job "
                               "(MPI_COMM_WORLD); start a separate job for a subset")
    if process_sets == "dynamic":
        raise UnsupportedError("init(process_sets='dynamic'): " + _NOT_YET)
    runtime.init(**settings)
    for ps in process_sets or ():
        require_global(ps if isinstance(ps, ProcessSet) else ProcessSet(ps))
