"""Agreed reductions: a small sum that every rank repeats, run on the caller's
thread.

A SyncBatchNorm layer's statistics, a metric averaged every step, a count of
finished ranks: the same name and size each time, waited for at once. An
:class:`AgreedReduction` is negotiated once, on its first call, like any
allreduce (ranks that disagree about its name, size or process set fail
there); every later call is one MPI collective on the calling thread, with no
negotiation round and no hand-off to the background thread, about as fast as
MPI itself. The ranks still check in each call's payload that they all called
the same reduction: a mismatch raises :class:`fuseopt.MismatchError` on every
rank. Design: docs/design.md, "Agreed reductions".
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..base._native import ffi, lib
from ..base.errors import check
from ..core import process_sets as _ps
from ..core import world

Sum = lib.FUSEOPT_SUM
Average = lib.FUSEOPT_AVERAGE


class AgreedReduction:
    """``count`` float64 values summed (``op=Sum``) or averaged (``op=Average``)
    over the ranks of ``process_set`` (default: every rank) at each call.

    Every member must call it, as often and in the same order relative to
    other agreed reductions; other collectives may run meanwhile. The values
    live in a buffer of its own, :attr:`values`, which each call reduces in
    place and returns (so a call allocates nothing)::

        loss_sum = fuseopt.AgreedReduction("epoch_loss", 2)
        total, seen = loss_sum([loss * n, n])

    Integers are exact up to 2**53. Host memory only."""

    def __init__(self, name: str, count: int, op: int = Sum,
                 process_set: Optional[Any] = None) -> None:
        out = ffi.new("fuseopt_agreed_t**")
        check(lib.fuseopt_agreed_create(world.context(), name.encode(), int(count),
                                        _ps.id_of(process_set), op, out))
        self._agreed = ffi.gc(out[0], lib.fuseopt_agreed_free)
        self.name = name
        self.values = np.zeros(int(count))
        self._buffer = ffi.cast("double*", self.values.ctypes.data)

    @property
    def handle(self):
        """The native object, for kernels that reduce through it."""
        return self._agreed

    def __call__(self, values: Any = None) -> np.ndarray:
        """Reduces ``values`` (or, if omitted, whatever :attr:`values` holds)
        and returns :attr:`values`, which holds the result until the next call."""
        if values is not None:
            self.values[...] = values
        check(lib.fuseopt_agreed_allreduce(self._agreed, self._buffer))
        return self.values

    def __repr__(self) -> str:
        return "AgreedReduction(%r, %d)" % (self.name, self.values.size)
