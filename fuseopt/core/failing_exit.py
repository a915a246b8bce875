"""A rank that ends with an uncaught exception leaves at once.

MPI_Finalize waits for every rank. When fuseopt started MPI, the core's own
exit handler skips it for a process exiting non-zero. When another library
started it (``import mpi4py.MPI`` does), that library finalizes it as the
interpreter ends, after Python's atexit handlers and before the core's: a rank
that failed would wait there for peers blocked in a collective it never
joins, say an mpi4py ``bcast``, and the job would hang instead of failing.
So for an MPI someone else started, a program ending in an uncaught
exception flushes its output and leaves with status 1, skipping the other
library's finalize; the launcher then stops the other ranks.
``sys.exit(n)`` cannot be told apart here (Python keeps no record of it for
atexit handlers): such a rank still finalizes.
"""
import atexit
import logging
import os
import sys

_armed = False


def mpi_started_elsewhere() -> bool:
    """Whether a library in this process initialised MPI already (call it
    before fuseopt starts its context)."""
    mpi = sys.modules.get("mpi4py.MPI")
    try:
        return bool(mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized())
    except Exception:  # an mpi4py that cannot tell
        return False


def failing() -> bool:
    """Whether the interpreter is ending because of an uncaught exception:
    Python records it in sys.last_exc (3.12) or sys.last_value (which an
    interactive session also sets for errors it has shown and gone on from)."""
    if hasattr(sys, "ps1"):
        return False
    return getattr(sys, "last_exc", None) is not None or \
        getattr(sys, "last_value", None) is not None


def _leave_if_failing():
    if not failing():
        return
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(1)


def arm() -> None:
    """Registers the check; registered after the other library's import, so
    it runs before that library's finalize."""
    global _armed
    if not _armed:
        _armed = True
        atexit.register(_leave_if_failing)
