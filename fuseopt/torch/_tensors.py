"""Torch tensors as fuseopt buffers: dtype names, pointers, device checks.

The only module of the binding that knows how a torch tensor maps onto the
core's (pointer, dtype, shape) descriptor."""
import torch

from .. import requests as _rq
from ..errors import InvalidArgumentError, UnsupportedError

_DTYPE_NAMES = {
    torch.uint8: "uint8", torch.int8: "int8", torch.int32: "int32", torch.int64: "int64",
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
    """Host tensors go to the MPI backend. Device tensors need a device backend
    (NCCL for CUDA, HCCL for Ascend NPU), which this build does not have yet."""
    if tensor.is_cpu:  # cheaper than building tensor.device
        return
    library = {"cuda": "NCCL (libnccl.so.2, pip install nvidia-nccl-cu12)",
               "npu": "HCCL (libhccl.so from Ascend CANN)"}.get(tensor.device.type)
    raise UnsupportedError(
        "fuseopt received a %s tensor, but this build reduces host (CPU) tensors only; "
        "the %s backend is not available. Move the tensor to the CPU first."
        % (tensor.device, library or "matching device"))


def ptr(tensor):
    return _rq.ffi.cast("void*", tensor.data_ptr())


def contiguous(tensor):
    check_device(tensor)
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def writable(tensor, what):
    """A tensor that the core may write into, in place."""
    check_device(tensor)
    if not tensor.is_contiguous():
        raise InvalidArgumentError("%s is not contiguous; in-place operations need a "
                                   "contiguous tensor (use the out-of-place form)" % what)
    return tensor


def from_runtime_output(raw, like):
    """The tensor view of a runtime-allocated result (allgather, alltoall)."""
    shape = (raw.first_dim,) + tuple(like.shape[1:])
    if len(raw.buffer) == 0:
        return torch.empty(shape, dtype=like.dtype)
    return torch.frombuffer(raw.buffer, dtype=like.dtype).reshape(shape)
