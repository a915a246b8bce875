"""Device memory in requests: which kind, which device, which stream.

Framework bindings describe a CUDA or Ascend NPU tensor with a :class:`Device`
and pass it as ``device=`` to :func:`fuseopt.core.requests.enqueue`; the core then
reduces it with the device's backend (NCCL for CUDA, HCCL for NPU; see
docs/devices.md) on the device, after the work queued on ``stream`` (or up
to ``ready_event``, when given) has run. Pointers are raw device addresses.
"""
import importlib.util
import os
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


# The NVIDIA wheels put their libraries where the dynamic loader does not
# look. When one is installed and no path was given, point the core at it.
_WHEEL_LIBRARIES = (("FUSEOPT_NCCL_LIBRARY", "nvidia.nccl", "libnccl.so.2"),
                    ("FUSEOPT_CUDART_LIBRARY", "nvidia.cuda_runtime", "libcudart.so.12"))


def locate_wheel_libraries(environ=None):
    """Sets FUSEOPT_NCCL_LIBRARY / FUSEOPT_CUDART_LIBRARY from the
    nvidia-nccl-cu12 / nvidia-cuda-runtime-cu12 wheels when they are
    installed and the variables are unset. Returns what it set."""
    environ = os.environ if environ is None else environ
    found = {}
    for var, package, soname in _WHEEL_LIBRARIES:
        if environ.get(var):
            continue
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        for root in (spec.submodule_search_locations or []) if spec else []:
            path = os.path.join(root, "lib", soname)
            if os.path.exists(path):
                environ[var] = found[var] = path
                break
    return found
