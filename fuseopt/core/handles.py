"""Handles: what an enqueue returns, and waiting on it.

A handle keeps the operation's buffers alive until its wait returns (the core
uses them until then), turns the core's status into fuseopt's exceptions,
and takes the results the core allocated itself (allgather, alltoall).
"""
import time
from typing import Any, Dict, List, Tuple

from ..base._native import ffi, lib
from ..base import launch_notes
from . import world
from ..base.errors import FuseoptError, RankFailedError, ShutDownError, TimeoutError, check


def check_delivered(status):
    """errors.check for a failure that reaches the training script (a wait,
    a poll, an enqueue). The first one saying that the job is going down (shut
    down by another rank, a peer failed) is noted in the launch directory, so
    that fuseoptrun's summary can tell the rank that failed first from those
    that stopped because of it (fuseopt/base/launch_notes.py)."""
    try:
        check(status)
    except (ShutDownError, RankFailedError) as e:
        launch_notes.record(e.status, str(e))
        raise


def deliver_failure(status, keepalive):
    """Raises a failed wait's error (check_delivered), keeping the operation's
    buffers as a failed Handle does (_park_after)."""
    try:
        check_delivered(status)
    except FuseoptError as e:
        _park_after(e, keepalive)
        raise


def _park_after(error, keepalive):
    """Keeps a failed operation's buffers for good after a rank failure
    (_parked_after_failure says why)."""
    if isinstance(error, RankFailedError):
        _parked_after_failure.append(keepalive)


class RuntimeOutput:
    """A result whose size the other ranks decided (allgather, alltoall).

    ``buffer`` is a writable bytes-like object that owns the native memory;
    ``first_dim`` rows arrived in all, ``recv_splits[r]`` of them from rank r.
    For a device request the result is device memory: ``buffer`` is None and
    ``device_pointer`` (an int, ``nbytes`` long) stays valid while this
    object lives; it is then freed with ``fuseopt_free_device``.
    """

    __slots__ = ("buffer", "first_dim", "recv_splits", "device_pointer", "nbytes", "_owner")

    def __init__(self, out, device_kind=0, ranks=None):
        self.nbytes = int(out.nbytes)
        self.device_pointer = None
        self._owner = None
        if device_kind:
            if out.data:
                self._owner = ffi.gc(ffi.cast("char*", out.data),
                                     lambda p: lib.fuseopt_free_device(device_kind, p))
                self.device_pointer = int(ffi.cast("uintptr_t", self._owner))
            ptr = None
            self.buffer = None
        else:
            ptr = ffi.gc(ffi.cast("char*", out.data), lib.fuseopt_free) if out.data else None
            self.buffer = ffi.buffer(ptr, out.nbytes) if ptr is not None else bytearray(0)
        self.first_dim = int(out.first_dim)
        n = world.size() if ranks is None else ranks
        self.recv_splits = ([int(out.recv_splits[i]) for i in range(n)]
                            if out.recv_splits else [0] * n)
        lib.fuseopt_free(out.recv_splits)


# Handles dropped before anyone waited on them. The core may still be reading
# or writing their buffers, so the buffers are parked here, not freed, until
# the operation completes; reap_orphans() then releases handle and buffers.
_orphans: Dict[Any, Tuple[Any, Any]] = {}  # handle -> (ctx, buffers)


def reap_orphans():
    if not _orphans:
        return
    done = ffi.new("int*")
    for key, (ctx, keepalive) in list(_orphans.items()):
        if lib.fuseopt_poll(ctx, key, done) != lib.FUSEOPT_OK or done[0]:
            if lib.fuseopt_wait(ctx, key, 0) == lib.FUSEOPT_RANK_FAILED:
                _parked_after_failure.append(keepalive)
            del _orphans[key]


# Buffers of operations that failed with RankFailedError. After a lost rank
# the loop thread may still be blocked inside MPI with their addresses (and
# write into them if the peer comes back), so they are never freed.
_parked_after_failure: List[Any] = []


def forget_orphans():
    """After shutdown every handle is complete and the context is gone."""
    _orphans.clear()


class _Pending:
    """What Handle and GroupHandle share: wait once, remember the outcome,
    and keep the tensors alive until the core is done with them. ``_ids``
    are the native handles; a subclass's ``_wait_once(timeout_ms)`` waits in
    the core once and returns its status and what ``finish`` takes."""

    __slots__ = ("_ctx", "_ids", "_keepalive", "_finish", "_done", "_result", "_error")

    def __init__(self, ctx, ids, keepalive, finish):
        self._ctx = ctx
        self._ids = ids
        self._keepalive = keepalive
        self._finish = finish
        self._done = False
        self._result = None
        self._error = None

    def __del__(self):
        if not self._done and self._keepalive is not None and _orphans is not None:
            for i in self._ids:
                _orphans[i] = (self._ctx, self._keepalive)

    def poll(self):
        """Whether the operation has finished (wait() then returns at once)."""
        if self._done:
            return True
        done = ffi.new("int*")
        for i in self._ids:
            check_delivered(lib.fuseopt_poll(self._ctx, i, done))
            if not done[0]:
                return False
        return True

    def wait(self, timeout=None):
        """Blocks until done (or ``timeout`` seconds: TimeoutError, and the
        handle may be waited on again). Raises the operation's error, if any.
        Signal handlers (Ctrl-C) run while it waits."""
        if self._done:
            if self._error is not None:
                raise self._error[0](self._error[1])
            return self._result
        try:
            raw = self._wait_in_slices(timeout)
        except TimeoutError:
            raise  # still in flight: may be waited on again (no `as`: no cycle via self)
        except FuseoptError as e:
            self._failed(e)
            raise
        return self._completed(raw)

    def _completed(self, raw):
        self._done = True
        self._keepalive = None
        self._result = self._finish(raw) if self._finish else None
        return self._result

    def _failed(self, e):
        # The native handles are released: remember the outcome for later
        # waits (not the exception itself: its traceback refers back here).
        self._done, self._error = True, (type(e), str(e))
        _park_after(e, self._keepalive)
        self._keepalive = None

    def _wait_in_slices(self, timeout):
        """Native waits of at most WAIT_SLICE_MS each: a thread blocked in
        native code runs no Python signal handler, so Ctrl-C (or a test's
        timeout signal) would do nothing while a collective hangs. Between
        slices the thread is back in Python, where handlers run. A wait that
        ends within a slice costs exactly what one native wait does."""
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while True:
            left_ms = WAIT_SLICE_MS if deadline is None else \
                int(max(0.0, deadline - time.monotonic()) * 1000)
            status, raw = self._wait_once(min(WAIT_SLICE_MS, left_ms))
            if status == _OK:
                return raw
            if status == _TIMEOUT:
                if deadline is None or left_ms > WAIT_SLICE_MS:
                    continue
                raise TimeoutError("operation not complete after %g s; wait again for it"
                                   % timeout)
            check_delivered(status)
            return raw


# Longest native wait between returns to Python (signal handlers).
WAIT_SLICE_MS = 100
_OK, _TIMEOUT = lib.FUSEOPT_OK, lib.FUSEOPT_TIMEOUT


class Handle(_Pending):
    """An operation in flight. ``wait()`` returns its result; ``poll()`` says
    whether it is done. Wait exactly once: that releases the native handle.
    A handle dropped without a wait keeps its tensors alive until the
    operation has finished, so the core never touches freed memory."""

    __slots__ = ("_id", "_runtime_output")

    # runtime_output: see _runtime_output. _Pending's fields are set here,
    # not through super(): one Handle per tensor per step.
    def __init__(self, ctx, handle_id, keepalive, finish, runtime_output):
        self._ctx = ctx
        self._ids = (handle_id,)
        self._keepalive = keepalive
        self._finish = finish
        self._done = False
        self._result = None
        self._error = None
        self._id = handle_id
        self._runtime_output = runtime_output

    def wait(self, timeout=None):
        """Blocks until done (or ``timeout`` seconds: TimeoutError, and the
        handle may be waited on again); returns the result, or raises the
        operation's error. Signal handlers (Ctrl-C) run while it waits."""
        # The per-tensor path's common case in one native call: no timeout, no
        # runtime output, done within the first slice (a quarter of the time
        # of a wait through _wait_in_slices; Horovod-style code waits on one
        # handle per gradient every step).
        if timeout is None and not self._done and not self._runtime_output:
            status = lib.fuseopt_wait(self._ctx, self._id, WAIT_SLICE_MS)
            if status == _OK:
                return self._completed(None)
            if status != _TIMEOUT:
                try:
                    check_delivered(status)
                except FuseoptError as e:
                    self._failed(e)
                    raise
        return _Pending.wait(self, timeout)

    def _wait_once(self, timeout_ms):
        if not self._runtime_output:
            return lib.fuseopt_wait(self._ctx, self._id, timeout_ms), None
        out = ffi.new("fuseopt_output_t*")
        status = lib.fuseopt_wait_output(self._ctx, self._id, timeout_ms, out)
        if status != lib.FUSEOPT_OK:
            return status, None
        return status, RuntimeOutput(out, *self._runtime_output)


class GroupHandle(_Pending):
    """Operations submitted in one native call and waited on in one: ``wait()``
    returns the list of their results (``finish(None)``) and raises the first
    failed operation's error. With many small tensors a Handle per tensor
    costs more in per-call overhead than the tensors take to reduce."""

    __slots__ = ("_array",)

    def __init__(self, ctx, ids, count, keepalive, finish):
        super().__init__(ctx, ffi.unpack(ids, count), keepalive, finish)
        self._array = ids  # int64_t[count], as the core takes them

    def _wait_once(self, timeout_ms):
        return lib.fuseopt_wait_all(self._ctx, self._array, len(self._ids), timeout_ms), None


class Then:
    """A handle for a result made from other handles' results: ``wait()``
    waits for ``inner`` (a handle, or a list of them) and returns
    ``fn(result)`` (a list of results for a list)."""

    __slots__ = ("_inner", "_fn")

    def __init__(self, inner, fn):
        self._inner, self._fn = inner, fn

    def poll(self):
        inner = self._inner if isinstance(self._inner, list) else [self._inner]
        return all(h.poll() for h in inner)

    def wait(self, timeout=None):
        if isinstance(self._inner, list):
            return self._fn([h.wait(timeout) for h in self._inner])
        return self._fn(self._inner.wait(timeout))
