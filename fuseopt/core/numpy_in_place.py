"""The in-place allreduce of a numpy array, the per-tensor path's common
case (``allreduce_`` and ``allreduce_async_``), without the layers of the
general enqueue (:mod:`fuseopt.core.requests`): they cost as much as the
native call. The request is found by the array's own dtype and shape; an
array the general path must check first is left to it (None)."""
from ..base._native import ffi, lib
from .handles import WAIT_SLICE_MS, Handle, check_delivered
from .requests import ALLREDUCE, current_context, give_back, native_enqueue, new_ready, result_now


# Ready requests by signature (_on_ready_in_place).
_ready_in_place = {}


def _on_ready_in_place(array, name, op, prescale, postscale, process_set, call):
    """call(context, request, handle id pointer) on the ready request of an
    in-place allreduce of a numpy array, its buffers set; returns (context,
    status, handle id). The per-tensor path's enqueue and the blocking call
    without the layers of enqueue/_on_ready_request (they cost as much as the
    native call): the request is found by the array's own dtype and shape.
    None, having done nothing, for an array that the general path must check
    (read-only, not C-contiguous, empty, not in native byte order): its errors
    say why."""
    try:
        ptr = ffi.from_buffer(array, require_writable=True)
    except ValueError:
        return None
    if not len(ptr) or not array.dtype.isnative:
        return None
    ctx = current_context()
    key = (name, array.dtype, array.shape, op, prescale, postscale, process_set)
    ready = _ready_in_place.pop(key, None)
    if ready is None:
        ready = new_ready(ALLREDUCE, name, array.dtype.name, array.shape, op, 0, prescale,
                          postscale, process_set)
    req, _, handle = ready
    req.input = req.output = ptr
    try:
        return ctx, call(ctx, req, handle), handle[0]
    finally:
        give_back(_ready_in_place, key, ready)


def _enqueue_one(ctx, req, handle):
    return native_enqueue(ctx, req, 1, handle)


def _enqueue_and_wait_one(ctx, req, handle):
    return lib.fuseopt_enqueue_and_wait(ctx, req, WAIT_SLICE_MS, handle)


def allreduce_in_place(array, name, op, prescale, postscale, process_set):
    """enqueue() of an in-place allreduce of a numpy array: its Handle, whose
    wait returns the array; None as _on_ready_in_place."""
    got = _on_ready_in_place(array, name, op, prescale, postscale, process_set, _enqueue_one)
    if got is None:
        return None
    ctx, status, handle_id = got
    if status != lib.FUSEOPT_OK:
        check_delivered(status)
    return Handle(ctx, handle_id, (array,), lambda _: array, None)


def allreduce_in_place_now(array, name, op, prescale, postscale, process_set):
    """The blocking in-place allreduce of a numpy array (run_host_now's work);
    returns the array, or None as _on_ready_in_place."""
    got = _on_ready_in_place(array, name, op, prescale, postscale, process_set,
                             _enqueue_and_wait_one)
    if got is None:
        return None
    ctx, status, handle_id = got
    return result_now(ctx, status, handle_id, (array,), array)
