"""Device memory in requests: which kind, which device, which stream.

Framework bindings describe a CUDA or Ascend NPU tensor with a :class:`Device`
and pass it as ``device=`` to :func:`fuseopt.requests.enqueue`; the core then
reduces it with the device's backend (NCCL for CUDA, HCCL for NPU; see
docs/devices.md) on the device, after the work queued on ``stream`` (or up
to ``ready_event``, when given) has run. Pointers are raw device addresses.
"""
from typing import NamedTuple

from ._native import lib

HOST = lib.FUSEOPT_DEVICE_HOST
CUDA = lib.FUSEOPT_DEVICE_CUDA
NPU = lib.FUSEOPT_DEVICE_NPU

#: device type names as frameworks spell them ("cuda", "npu") -> kind
KINDS = {"cpu": HOST, "cuda": CUDA, "npu": NPU}


class Device(NamedTuple):
    """Where a request's buffers live. ``stream`` and ``ready_event`` are raw
    handles (ints; 0 is NULL): the stream that produces the input
    (cudaStream_t / aclrtStream; 0 is the default stream), and an event
    recorded on it after the input was produced (0: the runtime records one
    on ``stream`` when it runs the operation, which also waits for anything
    queued later)."""

    kind: int
    index: int = 0
    stream: int = 0
    ready_event: int = 0
