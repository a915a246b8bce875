"""Torch tensors as fuseopt buffers: dtype names, pointers, device checks.

The only module of the binding that knows how a torch tensor maps onto the
core's (pointer, dtype, shape) descriptor."""
import math

import torch

from ..base import devices as _devices
from ..core import output_pool as _output_pool
from ..core import requests as _rq
from ..base.errors import InvalidArgumentError, UnsupportedError

# Before any CUDA tensor reaches the core (which reads these at first use).
_devices.locate_wheel_libraries()

_DTYPE_NAMES = {
    torch.uint8: "uint8", torch.int8: "int8", torch.int16: "int16", torch.uint16: "uint16",
    torch.int32: "int32", torch.int64: "int64",
    torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32",
    torch.float64: "float64",
}


def dtype_name(tensor):
    try:
        return _DTYPE_NAMES[tensor.dtype]
    except KeyError:
        raise InvalidArgumentError(
            "tensor of dtype %s cannot be reduced; supported: %s"
            % (tensor.dtype, ", ".join(str(d) for d in _DTYPE_NAMES))) from None


def check_device(tensor):
    """Host tensors go to the MPI backend, CUDA tensors to NCCL, Ascend NPU
    tensors (torch_npu) to HCCL; anything else is refused here. Whether the
    device's library loads is found out by the core, on every rank alike."""
    if tensor.is_cpu or tensor.device.type in _devices.KINDS:
        return
    raise UnsupportedError(
        "fuseopt reduces CPU, CUDA and Ascend NPU tensors; got a %s tensor. Move it to the "
        "CPU first." % tensor.device)


def device_of(tensor):
    """``(Device or None, keepalive)`` for a tensor about to be enqueued: where
    it lives and after what the core may read it. CUDA: an event recorded now
    on the current stream (so kernels queued later do not delay the
    reduction). NPU: the current stream; the core records the event."""
    if tensor.is_cpu:
        return None, None
    kind = _devices.KINDS[tensor.device.type]
    index = tensor.device.index or 0
    if kind == _devices.CUDA:
        stream = torch.cuda.current_stream(tensor.device)
        event = torch.cuda.Event()
        event.record(stream)
        return _devices.Device(kind, index, stream.cuda_stream, event.cuda_event), event
    stream = torch.npu.current_stream(tensor.device)  # torch_npu's API
    return _devices.Device(kind, index, stream.npu_stream, 0), stream


def ptr(tensor):
    return _rq.ffi.cast("void*", tensor.data_ptr())


def contiguous(tensor):
    check_device(tensor)
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def _storage_unshared(tensor):
    # The temporary storage object counts once, the tensor once: a detached
    # copy, .data or a kept storage object would make it more.
    return _storage_use_count(tensor.untyped_storage()._cdata) <= 2


_storage_use_count = getattr(torch._C, "_storage_Use_Count", None)


def new_result(src, name, process_set, shape=None):
    """A host tensor to receive src's reduction (of src's shape, or
    ``shape``): a kept one of an earlier call of this name when nothing
    refers to it any more (output_pool). Without torch's storage use count
    (a private API) nothing is kept."""
    shape = tuple(src.shape) if shape is None else tuple(shape)
    make = lambda: torch.empty(shape, dtype=src.dtype, device=src.device)  # noqa: E731
    if name is None or _storage_use_count is None or not src.is_cpu:
        return make()
    return _output_pool.take((name, src.dtype, shape, process_set),
                             math.prod(shape) * src.element_size(), make, _storage_unshared)


def writable(tensor, what):
    """A tensor that the core may write into, in place."""
    check_device(tensor)
    if not tensor.is_contiguous():
        raise InvalidArgumentError("%s is not contiguous; in-place operations need a "
                                   "contiguous tensor (use the out-of-place form)" % what)
    return tensor


# CUDA array interface type strings; bfloat16 has none, so it travels as int16.
_TYPESTR = {torch.uint8: "|u1", torch.int8: "|i1", torch.int16: "<i2", torch.uint16: "<u2",
            torch.int32: "<i4", torch.int64: "<i8",
            torch.float16: "<f2", torch.bfloat16: "<i2", torch.float32: "<f4",
            torch.float64: "<f8"}


class _CudaResult:
    """A runtime-allocated CUDA result, seen by torch through the CUDA array
    interface; the tensor keeps this object (and so the memory) alive."""

    def __init__(self, raw, dtype, shape):
        self._raw = raw
        self.__cuda_array_interface__ = {"shape": shape, "typestr": _TYPESTR[dtype],
                                         "data": (raw.device_pointer, False), "version": 2,
                                         "strides": None}


def from_runtime_output(raw, like):
    """The tensor view of a runtime-allocated result (allgather, alltoall)."""
    shape = (raw.first_dim,) + tuple(like.shape[1:])
    if raw.buffer is None:  # device memory
        if like.device.type != "cuda":
            raise UnsupportedError("allgather/alltoall results on %s cannot be handed to torch "
                                   "yet; gather CPU tensors instead" % like.device.type)
        if not raw.device_pointer:
            return torch.empty(shape, dtype=like.dtype, device=like.device)
        out = torch.as_tensor(_CudaResult(raw, like.dtype, shape), device=like.device)
        return out.view(torch.bfloat16) if like.dtype == torch.bfloat16 else out
    if len(raw.buffer) == 0:
        return torch.empty(shape, dtype=like.dtype)
    return torch.frombuffer(raw.buffer, dtype=like.dtype).reshape(shape)
