"""Collectives on numpy arrays.

Every operation has an ``_async`` form returning a Handle and a blocking form
returning the result. Results are new arrays unless the in-place form
(trailing underscore) is used. Names are the negotiation key: pass the same
name on every rank, or none (then the n-th unnamed call of each kind matches
the n-th on every other rank).
"""
from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, ParamSpec, Sequence
import numpy as np

from ..base._native import lib
from ..core import output_pool
from ..core import process_sets as _ps
from ..core import numpy_in_place as _in_place
from ..core import requests as _rq
from ..base.errors import InvalidArgumentError
from ..core.handles import Then

if TYPE_CHECKING:  # names used only in annotations
    from ..core.process_sets import ProcessSet
    from ..core.handles import Handle

_P = ParamSpec("_P")
Sum = lib.FUSEOPT_SUM
Average = lib.FUSEOPT_AVERAGE
Min = lib.FUSEOPT_MIN
Max = lib.FUSEOPT_MAX
Product = lib.FUSEOPT_PRODUCT
Adasum = lib.FUSEOPT_ADASUM  # allreduce of float tensors on a power-of-two number of ranks


_dtype_names: Dict[Any, str] = {}  # np.dtype -> name; dtype.name is slow enough to matter per tensor


def _dtype_name(array):
    dtype = array.dtype
    name = _dtype_names.get(dtype)
    if name is None:
        if not dtype.isnative:  # '>f4' is named float32 too: its bytes would be misread
            raise InvalidArgumentError(
                "array of dtype %s is not in this machine's byte order; in-place operations "
                "need it converted first: a.astype(a.dtype.newbyteorder('='))" % dtype.str)
        name = _dtype_names[dtype] = dtype.name  # ml_dtypes.bfloat16 is "bfloat16" too
    return name


def _ptr(array):
    # from_buffer is several times cheaper than array.ctypes.data
    return _rq.ffi.from_buffer(array) if array.size else _rq.ffi.NULL


def _contiguous(array):
    # Not np.ascontiguousarray: it turns 0-d arrays into 1-d ones. An array of
    # the other byte order is converted: the core reads native values.
    array = np.asarray(array)
    if not array.dtype.isnative:
        return array.astype(array.dtype.newbyteorder("="), order="C")
    return array if array.flags.c_contiguous else array.copy(order="C")


def _writable(array, what):
    if not isinstance(array, np.ndarray):
        raise InvalidArgumentError("%s must be a numpy array to be updated in place" % what)
    flags = array.flags  # a new object per read
    if not flags.writeable:
        raise InvalidArgumentError("%s is read-only and cannot be updated in place" % what)
    if not flags.c_contiguous:
        raise InvalidArgumentError("%s is not C-contiguous; in-place operations need a "
                                   "contiguous array (use the out-of-place form)" % what)
    return array


def _allreduce_buffers(array, name, in_place, process_set):
    """(input, output, their pointers) of one allreduce."""
    if in_place:
        src = out = _writable(array, "allreduce_ input")
        ptr = _ptr(src)
        return src, out, ptr, ptr
    src = _contiguous(array)
    out = _new_result(src, name, process_set)
    return src, out, _ptr(src), _ptr(out)


def _allreduce(array, name, op, prescale_factor, postscale_factor, in_place, process_set):
    """Enqueues one allreduce, in place or into a new array. Horovod-style
    code calls this once per gradient, every step: keep it lean."""
    src, out, src_ptr, out_ptr = _allreduce_buffers(array, name, in_place, process_set)
    return _rq.enqueue(_rq.ALLREDUCE, name, _dtype_name(src), src.shape, src_ptr, out_ptr,
                       reduce_op=op, prescale=prescale_factor, postscale=postscale_factor,
                       keepalive=(src, out), finish=lambda _: out,
                       process_set=_ps.id_of(process_set))


def _allreduce_now(array, name, op, prescale_factor, postscale_factor, in_place, process_set):
    """The blocking allreduce: _allreduce's submission and its wait in one
    native call (requests.run_host_now), for the small blocking reductions
    (metrics, statistics) whose Python costs as much as their collective."""
    src, out, src_ptr, out_ptr = _allreduce_buffers(array, name, in_place, process_set)
    return _rq.run_host_now(_rq.ALLREDUCE, name, _dtype_name(src), src.shape, src_ptr, out_ptr,
                            reduce_op=op, prescale=prescale_factor, postscale=postscale_factor,
                            process_set=_ps.id_of(process_set), keepalive=(src, out), result=out)


def _new_result(src, name, process_set, shape=None):
    """An array to receive src's reduction (of src's shape, or ``shape``):
    a kept one of an earlier call of this name when the caller has let it
    go (output_pool)."""
    shape = src.shape if shape is None else tuple(shape)
    make = lambda: np.empty(shape, dtype=src.dtype)  # noqa: E731
    if name is None:  # unnamed calls match by count: no stable key
        return make()
    return output_pool.take((name, src.dtype, shape, process_set),
                            int(np.prod(shape)) * src.itemsize, make)


def allreduce_async(array: np.ndarray, name: Optional[str] = None, op: Optional[int] = Average,
                    prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                    process_set: Optional[ProcessSet] = None) -> Handle:
    """Reduces ``array`` across ranks into a new array (``op``: Average, Sum,
    Min, Max, Product, Adasum; Average divides the sum by the number of ranks).
    ``process_set``: an added :class:`fuseopt.ProcessSet` (default: every rank)."""
    return _allreduce(array, name, op, prescale_factor, postscale_factor, False, process_set)


def allreduce_async_(array: np.ndarray, name: Optional[str] = None, op: Optional[int] = Average,
                     prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                     process_set: Optional[ProcessSet] = None) -> Handle:
    """In-place allreduce: ``array`` holds the result when the handle completes."""
    if type(array) is np.ndarray:
        handle = _in_place.allreduce_in_place(array, name, op, prescale_factor,
                                              postscale_factor, _ps.id_of(process_set))
        if handle is not None:
            return handle
    return _allreduce(array, name, op, prescale_factor, postscale_factor, True, process_set)


def submit_grouped_allreduce(arrays, names, op, prescale_factor, postscale_factor, in_place,
                             outs=None, process_set=None, wire=_rq.WIRE_AS_IS):
    """The grouped allreduce the bindings submit (numpy buffers of their
    tensors): one native call to submit, one to wait; returns a GroupHandle whose
    wait() gives the list of results (``outs``, when given, receive them).
    ``wire``: float32 arrays travel as a 16-bit float (requests.enqueue)."""
    if in_place:
        srcs = outs = [_writable(a, "allreduce_ input") for a in arrays]
        src_ptrs = out_ptrs = [_ptr(a) for a in srcs]
    else:
        srcs = [_contiguous(a) for a in arrays]
        outs = outs or [np.empty_like(a) for a in srcs]
        src_ptrs, out_ptrs = [_ptr(a) for a in srcs], [_ptr(a) for a in outs]
    return _rq.submit_group(_rq.ALLREDUCE, names or [None] * len(srcs),
                            [_dtype_name(a) for a in srcs], [a.shape for a in srcs], src_ptrs,
                            out_ptrs, reduce_op=op, prescale=prescale_factor,
                            postscale=postscale_factor, keepalive=(srcs, outs),
                            finish=lambda _: list(outs), process_set=_ps.id_of(process_set),
                            wire=wire)


def grouped_allreduce_async(arrays: Sequence[np.ndarray], names: Optional[Sequence[str]] = None,
                            op: Optional[int] = Average, prescale_factor: float = 1.0,
                            postscale_factor: float = 1.0,
                            process_set: Optional[ProcessSet] = None) -> Handle:
    """Allreduces a list together: submitted in one call (all or none),
    negotiated in one round and fused."""
    return submit_grouped_allreduce(arrays, names, op, prescale_factor, postscale_factor,
                                    False, process_set=process_set)


def grouped_allreduce_async_(arrays: Sequence[np.ndarray], names: Optional[Sequence[str]] = None,
                             op: Optional[int] = Average, prescale_factor: float = 1.0,
                             postscale_factor: float = 1.0,
                             process_set: Optional[ProcessSet] = None) -> Handle:
    """In-place grouped allreduce."""
    return submit_grouped_allreduce(arrays, names, op, prescale_factor, postscale_factor,
                                    True, process_set=process_set)


def resolve_op(average, op):
    """Horovod's deprecated ``average`` flag and ``op`` (default Average)."""
    if average is not None and op is not None:
        raise InvalidArgumentError("pass either average= (deprecated) or op=, not both")
    if average is not None:
        return Average if average else Sum
    return Average if op is None else op


def allgather_async(array: np.ndarray, name: Optional[str] = None,
                    process_set: Optional[ProcessSet] = None) -> Handle:
    """Concatenates every rank's array along the first dimension (which may
    differ per rank; the other dimensions must match)."""
    src = _contiguous(array)
    if src.ndim == 0:
        raise InvalidArgumentError("allgather needs at least one dimension")

    def finish(raw):
        return np.frombuffer(raw.buffer, dtype=src.dtype).reshape((raw.first_dim,) + src.shape[1:])

    return _rq.enqueue(_rq.ALLGATHER, name, _dtype_name(src), src.shape, _ptr(src),
                       keepalive=(src,), finish=finish, process_set=_ps.id_of(process_set))


def grouped_allgather_async(arrays: Sequence[np.ndarray],
                            names: Optional[Sequence[Optional[str]]] = None,
                            process_set: Optional[ProcessSet] = None) -> Then:
    """Allgathers a list of arrays submitted in one native call, so negotiated
    in one round; ``wait()`` gives the list of results."""
    set_id = _ps.id_of(process_set)
    batch = _rq.Batch()
    for array, name in zip(arrays, names or [None] * len(arrays)):
        src = _contiguous(array)
        if src.ndim == 0:
            raise InvalidArgumentError("allgather needs at least one dimension")

        def finish(raw, src=src):
            return np.frombuffer(raw.buffer, dtype=src.dtype).reshape(
                (raw.first_dim,) + src.shape[1:])
        batch.add(_rq.ALLGATHER, name, _dtype_name(src), src.shape, _ptr(src), keepalive=(src,),
                  finish=finish, process_set=set_id)
    return Then(batch.submit(), list)


def grouped_reducescatter_async(arrays: Sequence[np.ndarray],
                                names: Optional[Sequence[Optional[str]]] = None,
                                op: Optional[int] = Average, prescale_factor: float = 1.0,
                                postscale_factor: float = 1.0,
                                process_set: Optional[ProcessSet] = None) -> Then:
    """Reducescatters a list of arrays in one native call (one round, fused);
    ``wait()`` gives this rank's slice of each."""
    set_id = _ps.id_of(process_set)
    rank, size = _ps.rank_in(process_set), _ps.size_of(process_set)
    batch = _rq.Batch()
    outs = []
    for array, name in zip(arrays, names or [None] * len(arrays)):
        src = _contiguous(array)
        if src.ndim == 0:
            raise InvalidArgumentError("reducescatter needs at least one dimension")
        out = _new_result(src, name, process_set,
                          (reducescatter_rows(src.shape[0], rank, size),) + src.shape[1:])
        batch.add(_rq.REDUCESCATTER, name, _dtype_name(src), src.shape, _ptr(src), _ptr(out),
                  reduce_op=op, prescale=prescale_factor, postscale=postscale_factor,
                  keepalive=(src, out), process_set=set_id)
        outs.append(out)
    return Then(batch.submit_group(), lambda _: outs)


def grouped_reduce_async_(arrays: Sequence[np.ndarray], roots: Sequence[int],
                          names: Optional[Sequence[Optional[str]]] = None,
                          op: Optional[int] = Average, prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0,
                          process_set: Optional[ProcessSet] = None) -> Then:
    """In-place reductions of each array to its own root (a global rank), in
    one native call, fused like an allreduce with a reduce-scatter's bytes:
    on its root an array holds the result when ``wait()`` returns the list;
    elsewhere its values are unspecified."""
    set_id = _ps.id_of(process_set)
    batch = _rq.Batch()
    bufs = [_writable(a, "reduce_ input") for a in arrays]
    for buf, root, name in zip(bufs, roots, names or [None] * len(bufs)):
        batch.add(_rq.REDUCE, name, _dtype_name(buf), buf.shape, _ptr(buf), _ptr(buf),
                  root=root, reduce_op=resolve_op(None, op), prescale=prescale_factor,
                  postscale=postscale_factor, keepalive=(buf,), process_set=set_id)
    return Then(batch.submit_group(), lambda _: bufs)


def broadcast_async(array: np.ndarray, root_rank: int, name: Optional[str] = None,
                    process_set: Optional[ProcessSet] = None) -> Handle:
    """Every rank receives ``root_rank``'s array (as a new array).
    ``root_rank`` is a global rank, also with a ``process_set``."""
    src = _contiguous(array)
    out = np.empty_like(src)
    return _rq.enqueue(_rq.BROADCAST, name, _dtype_name(src), src.shape, _ptr(src), _ptr(out),
                       root=root_rank, keepalive=(src, out), finish=lambda _: out,
                       process_set=_ps.id_of(process_set))


def broadcast_async_(array: np.ndarray, root_rank: int, name: Optional[str] = None,
                     process_set: Optional[ProcessSet] = None) -> Handle:
    """In-place broadcast into ``array``."""
    buf = _writable(array, "broadcast_ input")
    return _rq.enqueue(_rq.BROADCAST, name, _dtype_name(buf), buf.shape, _ptr(buf), _ptr(buf),
                       root=root_rank, keepalive=(buf,), finish=lambda _: buf,
                       process_set=_ps.id_of(process_set))


def alltoall_async(array: np.ndarray, splits: Any = None, name: Optional[str] = None,
                   process_set: Optional[ProcessSet] = None) -> Handle:
    """Sends ``splits[r]`` consecutive rows to rank r (an even split when
    None). The result is ``(received_rows, received_splits)``."""
    src = _contiguous(array)
    if src.ndim == 0:
        raise InvalidArgumentError("alltoall needs at least one dimension")
    if splits is not None:
        splits = [int(s) for s in np.asarray(splits).reshape(-1)]

    def finish(raw):
        out = np.frombuffer(raw.buffer, dtype=src.dtype).reshape((raw.first_dim,) + src.shape[1:])
        return out, np.asarray(raw.recv_splits, dtype=np.int64)

    return _rq.enqueue(_rq.ALLTOALL, name, _dtype_name(src), src.shape, _ptr(src),
                       splits=splits, keepalive=(src,), finish=finish,
                       process_set=_ps.id_of(process_set))


def reducescatter_rows(rows, rank, size):
    """Rows of a reducescatter result on ``rank``: the first rows % size ranks
    get one extra."""
    return lib.fuseopt_reducescatter_rows(rows, rank, size)


def reducescatter_async(array: np.ndarray, name: Optional[str] = None, op: Optional[int] = Average,
                        prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                        process_set: Optional[ProcessSet] = None) -> Handle:
    """Reduces across ranks and returns this rank's slice of the first
    dimension (see :func:`reducescatter_rows`; with a process set, by
    position in the set)."""
    set_id = _ps.id_of(process_set)
    src = _contiguous(array)
    if src.ndim == 0:
        raise InvalidArgumentError("reducescatter needs at least one dimension")
    rows = reducescatter_rows(src.shape[0], _ps.rank_in(process_set), _ps.size_of(process_set))
    out = _new_result(src, name, process_set, (rows,) + src.shape[1:])
    return _rq.enqueue(_rq.REDUCESCATTER, name, _dtype_name(src), src.shape, _ptr(src),
                       _ptr(out), reduce_op=op, prescale=prescale_factor,
                       postscale=postscale_factor, keepalive=(src, out), finish=lambda _: out,
                       process_set=set_id)


def _blocking(async_fn: Callable[_P, Handle]) -> Callable[_P, Any]:
    def run(*args: _P.args, **kwargs: _P.kwargs) -> Any:
        return _rq.run_now(async_fn, *args, **kwargs)
    run.__name__ = async_fn.__name__.replace("_async", "")
    run.__doc__ = "Blocking form of :func:`%s`." % async_fn.__name__
    # help() and inspect show the real parameters, not (*args, **kwargs).
    run.__signature__ = inspect.signature(async_fn).replace(  # type: ignore[attr-defined]
        return_annotation="Any")
    return run


def allreduce(array: np.ndarray, name: Optional[str] = None, op: Optional[int] = Average,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              process_set: Optional[ProcessSet] = None) -> Any:
    """Blocking form of :func:`allreduce_async`."""
    return _allreduce_now(array, name, op, prescale_factor, postscale_factor, False, process_set)


def allreduce_(array: np.ndarray, name: Optional[str] = None, op: Optional[int] = Average,
               prescale_factor: float = 1.0, postscale_factor: float = 1.0,
               process_set: Optional[ProcessSet] = None) -> Any:
    """Blocking form of :func:`allreduce_async_`."""
    if type(array) is np.ndarray:
        done = _in_place.allreduce_in_place_now(array, name, op, prescale_factor,
                                                postscale_factor, _ps.id_of(process_set))
        if done is not None:
            return done
    return _allreduce_now(array, name, op, prescale_factor, postscale_factor, True, process_set)


grouped_allreduce = _blocking(grouped_allreduce_async)
grouped_allreduce_ = _blocking(grouped_allreduce_async_)
allgather = _blocking(allgather_async)
broadcast = _blocking(broadcast_async)
broadcast_ = _blocking(broadcast_async_)
alltoall = _blocking(alltoall_async)
reducescatter = _blocking(reducescatter_async)


def barrier(process_set: Optional[ProcessSet] = None) -> None:
    """Returns once every rank (of ``process_set``) has called barrier()."""
    _rq.run_now(_rq.enqueue, _rq.BARRIER, None, "uint8", (),
                process_set=_ps.id_of(process_set))


def join() -> int:
    """Declares this rank out of data. Until every rank has joined, it keeps
    taking part in the others' collectives with neutral values (zeros for
    sums, so averages still divide by size()). Returns, once all have joined,
    the rank that joined last (of several joining in the same negotiation
    round, the highest), as Horovod's join does."""
    last = np.full(1, -1, dtype=np.int32)
    _rq.run_now(_rq.enqueue, _rq.JOIN, "join", "uint8", (), output_ptr=_rq.ffi.from_buffer(last),
                keepalive=(last,))
    return int(last[0])


def poll(handle: Handle) -> bool:
    """Whether the operation behind ``handle`` has finished (never blocks)."""
    return handle.poll()


def synchronize(handle: Handle, timeout: Optional[float] = None) -> Any:
    """Waits for a handle and returns its result (Horovod's name for wait)."""
    return handle.wait(timeout)
