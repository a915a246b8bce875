"""Framework-neutral enqueue: describe a buffer, get a Handle.

Bindings (numpy here, torch, TensorFlow) turn their tensors into raw pointers,
a dtype name and a shape, and call :func:`enqueue`; they never talk to the
network. The core copies the metadata at once and uses the buffers until the
handle's wait returns, so the Handle keeps the tensors alive until then.
"""
import threading

from ..base._native import ffi, lib
from . import handles, world
from ..base.dtypes import code_for
from ..base.c_boundary import INT32, INT64, c_name_bytes, checked_int, checked_real
from ..base.errors import check
from .handles import WAIT_SLICE_MS, GroupHandle, Handle, check_delivered, deliver_failure

ALLREDUCE = lib.FUSEOPT_ALLREDUCE
ALLGATHER = lib.FUSEOPT_ALLGATHER
BROADCAST = lib.FUSEOPT_BROADCAST
ALLTOALL = lib.FUSEOPT_ALLTOALL
REDUCESCATTER = lib.FUSEOPT_REDUCESCATTER
REDUCE = lib.FUSEOPT_REDUCE
BARRIER = lib.FUSEOPT_BARRIER
JOIN = lib.FUSEOPT_JOIN
PROCESS_SET_ADD = lib.FUSEOPT_PROCESS_SET_ADD
PROCESS_SET_REMOVE = lib.FUSEOPT_PROCESS_SET_REMOVE
# How a float32 allreduce travels (fuseopt_request_t::wire).
WIRE_AS_IS = lib.FUSEOPT_WIRE_AS_IS
WIRE_FLOAT16 = lib.FUSEOPT_WIRE_FLOAT16
WIRE_BFLOAT16 = lib.FUSEOPT_WIRE_BFLOAT16

_NULL = ffi.NULL
_OK, _TIMEOUT = lib.FUSEOPT_OK, lib.FUSEOPT_TIMEOUT

class _Submitting(threading.local):
    """Whether this thread's submissions are about to be waited on (run_now).
    A class default, so that reading it on a thread that never set it does
    not go through AttributeError (getattr with a default did, per tensor)."""
    waited = False


_submitting = _Submitting()


def run_now(submit, *args, **kwargs):
    """``submit(*args, **kwargs).wait()`` for a blocking collective: what it
    enqueues goes to the core without waking its loop thread, and the wait
    runs the negotiation round and the collective on this thread
    (fuseopt_enqueue_for_wait; Note [Turns] in native/src/loop/loop_turns.cc).
    A small blocking allreduce skips two thread wake-ups per rank."""
    before = _submitting.waited
    _submitting.waited = True
    try:
        handle = submit(*args, **kwargs)
    finally:
        _submitting.waited = before
    return handle.wait()


def native_enqueue(ctx, reqs, n, ids):
    """The native enqueue of n requests: for_wait inside run_now."""
    if _submitting.waited:
        return lib.fuseopt_enqueue_for_wait(ctx, reqs, n, ids)
    return lib.fuseopt_enqueue_many(ctx, reqs, n, ids)


# Request arrays of grouped operations by signature, filled in once; a call
# only sets its buffers. Taken out of the cache while in use, so two threads
# submitting the same group never share one.
_group_templates = {}


def submit_group(collective, names, dtypes, shapes, inputs, outputs, *, reduce_op=lib.FUSEOPT_SUM,
                 prescale=1.0, postscale=1.0, keepalive=None, finish=None, key=None, phase=0,
                 process_set=0, wire=WIRE_AS_IS):
    """Enqueues a list of host-memory operations of one kind in one native
    call (all or none) and returns a GroupHandle. names, dtypes (names),
    shapes (tuples), inputs and outputs (cffi pointers) are parallel lists.
    ``key``: a hashable that stands for all arguments but the buffers, for
    callers that submit the same group every step (it must change whenever
    they do; hold an object of your own in it so that no other caller's
    key can equal it). ``phase``, ``process_set`` (an id), ``wire`` (a
    fuseopt_wire_t, for float32 allreduces): see fuseopt_request_t."""
    ctx = current_context()
    n = len(names)
    if key is None:
        key = (collective, tuple(names), tuple(dtypes), tuple(shapes), reduce_op, prescale,
               postscale, phase, process_set, wire)
    template = _group_templates.pop(key, None)
    if template is None:
        reqs = ffi.new("fuseopt_request_t[]", max(n, 1))
        keep = []  # the names and shapes the requests point at
        for i in range(n):
            one = _template(collective, names[i], dtypes[i], tuple(shapes[i]), reduce_op, 0,
                            prescale, postscale)
            reqs[i] = one[0][0]
            reqs[i].phase = phase
            reqs[i].process_set = process_set
            reqs[i].wire = wire
            keep.append(one)
        template = (reqs, keep)
    reqs = template[0]
    for i in range(n):
        r = reqs[i]
        r.input = inputs[i]
        r.output = outputs[i]
    ids = ffi.new("int64_t[]", max(n, 1))
    try:
        check_delivered(native_enqueue(ctx, reqs, n, ids))
    finally:
        give_back(_group_templates, key, template)
    return GroupHandle(ctx, ids, n, keepalive, finish)


# Filled-in requests by signature. Training submits the same tensors every
# step, and building a cffi struct field by field costs more than the native
# enqueue itself; a cached one is copied and given this call's buffers.
_templates = {}
_MAX_TEMPLATES = 8192


def give_back(cache, key, value):
    """Returns a request taken out of a cache while a native call used it
    (the call runs without the GIL); a cache that grew past _MAX_TEMPLATES
    signatures starts over."""
    if len(cache) >= _MAX_TEMPLATES:
        cache.clear()
    cache[key] = value


def _template(collective, name, dtype, shape, reduce_op, root, prescale, postscale):
    key = (collective, name, dtype, shape, reduce_op, root, prescale, postscale)
    found = _templates.get(key)
    if found is not None:
        return found
    req = ffi.new("fuseopt_request_t*")
    req.struct_size = ffi.sizeof("fuseopt_request_t")
    req.collective = collective
    c_name = ffi.new("char[]", c_name_bytes(name)) if name is not None else _NULL
    req.name = c_name
    what = "tensor %r" % (name or "(unnamed)")
    req.dtype = code_for(dtype, what)
    req.reduce_op = checked_int(reduce_op, "op of " + what, INT32)
    c_shape = ffi.new("int64_t[]", [checked_int(d, "shape of " + what, INT64) for d in shape])
    req.ndim = len(shape)
    req.shape = c_shape
    req.root = checked_int(root, "root_rank of " + what, INT32)
    req.prescale = checked_real(prescale, "prescale_factor of " + what)
    req.postscale = checked_real(postscale, "postscale_factor of " + what)
    if len(_templates) >= _MAX_TEMPLATES:
        _templates.clear()
    # The name and shape arrays live as long as the template that points at them.
    found = _templates[key] = (req, c_name, c_shape)
    return found


def enqueue(collective, name, dtype, shape, input_ptr=_NULL, output_ptr=_NULL, *,
            reduce_op=lib.FUSEOPT_SUM, root=0, prescale=1.0, postscale=1.0, splits=None,
            keepalive=None, finish=None, device=None, process_set=0, wire=WIRE_AS_IS):
    """Submits one operation on raw buffers and returns its Handle.

    dtype is a name ("float32"); shape a sequence of ints; pointers are cffi
    ``void*`` (or NULL). ``finish(raw)`` turns the completed operation into
    the handle's result; raw is a RuntimeOutput for allgather/alltoall.
    ``device`` (a :class:`fuseopt.base.devices.Device`) says the pointers are
    device memory; None means host memory. ``process_set``: the set's id
    (:func:`fuseopt.core.process_sets.id_of`). ``wire``: how a float32 allreduce
    travels (WIRE_FLOAT16, WIRE_BFLOAT16: rounded by the core on its copies).
    """
    ctx = current_context()
    if device is None and splits is None and wire == WIRE_AS_IS:
        handle_id = _enqueue_host(ctx, collective, name, dtype, shape, input_ptr, output_ptr,
                                  reduce_op, root, prescale, postscale, process_set)
    else:
        handle = ffi.new("int64_t*")
        req = ffi.new("fuseopt_request_t[1]")
        c_splits = _fill(req, 0, collective, name, dtype, shape, input_ptr, output_ptr,
                         reduce_op, root, prescale, postscale, splits, device,
                         process_set=process_set)
        req[0].wire = wire
        check_delivered(native_enqueue(ctx, req, 1, handle))
        del c_splits  # the core has copied them
        handle_id = handle[0]
    return Handle(ctx, handle_id, keepalive, finish,
                  _runtime_output(collective, device, process_set))


# Ready-to-send host requests by signature, for the per-tensor path
# (Horovod-style code enqueues each gradient on its own, every step): only
# the buffers change between calls. Taken out while in use, as group
# templates are, because the native call runs without the GIL.
_ready_requests = {}


def new_ready(collective, name, dtype, shape, reduce_op, root, prescale, postscale,
              process_set):
    """A ready request of this signature: (request, its template, handle id
    pointer). The template owns the name and shape arrays; the handle's id
    comes back in the third, allocated once per signature, not per call."""
    template = _template(collective, name, dtype, shape, reduce_op, root, prescale, postscale)
    req = ffi.new("fuseopt_request_t*", template[0][0])
    req.process_set = process_set
    return req, template, ffi.new("int64_t*")


def _on_ready_request(call, collective, name, dtype, shape, input_ptr, output_ptr, reduce_op,
                      root, prescale, postscale, process_set):
    """call(request, handle id pointer) on the ready request of this signature
    with these buffers; returns (its status, the handle id)."""
    if type(shape) is not tuple:
        shape = tuple(shape)
    key = (collective, name, dtype, shape, reduce_op, root, prescale, postscale, process_set)
    ready = _ready_requests.pop(key, None)
    if ready is None:
        ready = new_ready(collective, name, dtype, shape, reduce_op, root, prescale, postscale,
                          process_set)
    req, _, handle = ready
    req.input = input_ptr
    req.output = output_ptr
    try:
        return call(req, handle), handle[0]
    finally:
        give_back(_ready_requests, key, ready)


def _enqueue_host(ctx, *request):
    """The native enqueue of one host request (_on_ready_request's arguments
    after call); returns its handle id."""
    status, handle_id = _on_ready_request(lambda req, h: native_enqueue(ctx, req, 1, h), *request)
    check_delivered(status)
    return handle_id


def run_host_now(collective, name, dtype, shape, input_ptr, output_ptr, *, reduce_op, root=0,
                 prescale=1.0, postscale=1.0, process_set=0, keepalive, result):
    """``enqueue(...).wait()`` for a host request whose output the caller
    supplies, returning ``result``: one native call submits and waits
    (fuseopt_enqueue_and_wait), and a Handle is made only when the wait
    outlasts one slice (signal handlers run between slices)."""
    ctx = current_context()
    status, handle_id = _on_ready_request(
        lambda req, h: lib.fuseopt_enqueue_and_wait(ctx, req, WAIT_SLICE_MS, h), collective, name,
        dtype, shape, input_ptr, output_ptr, reduce_op, root, prescale, postscale, process_set)
    return result_now(ctx, status, handle_id, keepalive, result)


def result_now(ctx, status, handle_id, keepalive, result):
    """What a submit-and-wait call (fuseopt_enqueue_and_wait) returns: result,
    once the wait has outlasted its first slice too, or the failure raised."""
    if status == _OK:
        return result
    if status == _TIMEOUT:
        return Handle(ctx, handle_id, keepalive, lambda _: result, None).wait()
    deliver_failure(status, keepalive)


class Batch:
    """Operations submitted in one native call, all or none: they reach the
    loop thread together, so they are negotiated in one round and fused.
    ``add`` takes :func:`enqueue`'s arguments; ``submit`` returns the Handles
    in order."""

    def __init__(self):
        self._ops = []

    def add(self, collective, name, dtype, shape, input_ptr=_NULL, output_ptr=_NULL, *,
            reduce_op=lib.FUSEOPT_SUM, root=0, prescale=1.0, postscale=1.0, splits=None,
            keepalive=None, finish=None, device=None, phase=0, process_set=0):
        self._ops.append((collective, name, dtype, shape, input_ptr, output_ptr, reduce_op, root,
                          prescale, postscale, splits, device, keepalive, finish, phase,
                          process_set))

    def submit(self):
        ctx, handles, ops = self._enqueue()
        return [Handle(ctx, handles[i], op[12], op[13], _runtime_output(op[0], op[11], op[15]))
                for i, op in enumerate(ops)]

    def submit_group(self):
        """As submit, but one GroupHandle for all (operations that write into
        caller-supplied outputs only)."""
        if any(_runtime_output(op[0], op[11]) for op in self._ops):
            raise ValueError("submit_group: allgather and alltoall need their own handles")
        ctx, handles, ops = self._enqueue()
        finishes = [op[13] for op in ops]
        return GroupHandle(ctx, handles, len(ops), [op[12] for op in ops],
                           lambda _: [f(None) if f else None for f in finishes])

    def _enqueue(self):
        ctx = current_context()
        n = len(self._ops)
        reqs = ffi.new("fuseopt_request_t[]", max(n, 1))
        c_splits = [_fill(reqs, i, *op[:12], phase=op[14], process_set=op[15])
                    for i, op in enumerate(self._ops)]
        handles = ffi.new("int64_t[]", max(n, 1))
        check_delivered(native_enqueue(ctx, reqs, n, handles))
        del c_splits
        ops, self._ops = self._ops, []
        return ctx, handles, ops


def current_context():
    """The running context (raises before init); reaps dropped handles first."""
    ctx = world.context()
    handles.reap_orphans()
    return ctx


def _fill(reqs, i, collective, name, dtype, shape, input_ptr, output_ptr, reduce_op, root,
          prescale, postscale, splits, device=None, phase=0, process_set=0):
    """Fills reqs[i]; returns what must stay alive until enqueued."""
    if type(shape) is not tuple:
        shape = tuple(shape)
    reqs[i] = _template(collective, name, dtype, shape, reduce_op, root, prescale,
                        postscale)[0][0]
    req = reqs[i]
    req.input = input_ptr
    req.output = output_ptr
    req.phase = phase  # templates are phase 0, in the global set
    req.process_set = process_set
    if device is not None:  # templates are host requests
        req.device_type = device.kind
        req.device_id = device.index
        req.stream = ffi.cast("void*", device.stream or 0)
        req.ready_event = ffi.cast("void*", device.ready_event or 0)
    if splits is None:
        return None
    c_splits = ffi.new("int64_t[]", [checked_int(n, "splits of tensor %r" % (name,), INT64)
                                     for n in splits])
    req.splits = c_splits
    req.num_splits = len(splits)
    return c_splits


_RUNTIME_OUTPUT = (ALLGATHER, ALLTOALL)


def _runtime_output(collective, device, process_set=0):
    """None when the caller supplies the output, else (the result's device
    kind, the number of ranks it came from: the process set's size)."""
    if collective not in _RUNTIME_OUTPUT:
        return None
    kind = device.kind if device is not None else 0
    return kind, (world.size() if process_set == 0 else set_info(process_set)[1])


def set_info(process_set):
    """(this rank's position or -1, number of ranks) of the process set of
    this id, from the core's table; InvalidArgumentError for an unknown id."""
    rank, size = ffi.new("int32_t*"), ffi.new("int32_t*")
    check(lib.fuseopt_process_set_info(current_context(), process_set, rank, size))
    return rank[0], size[0]
