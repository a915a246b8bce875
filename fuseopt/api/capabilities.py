"""Horovod's build and capability queries, answered truthfully for this build.

fuseopt always runs MPI (the ``mpich`` wheel, or a site MPI chosen at build
time) and never Gloo, oneCCL or DDL. NCCL and HCCL are not built in: the core
loads them at run time (see docs/devices.md), so ``nccl_built()`` looks for
the library the core would load.
"""
from __future__ import annotations

import ctypes
import os

from ..core import world
from ..base._native import ffi, lib
from ..base.errors import check
from ..base.devices import locate_wheel_libraries


def mpi_built() -> bool:
    """True: MPI is the host-memory engine and the control plane."""
    return True


def mpi_enabled() -> bool:
    """True: fuseopt always runs over MPI."""
    return True


def gloo_built() -> bool:
    """False: there is no Gloo controller (MPI does its job)."""
    return False


def gloo_enabled() -> bool:
    """False: there is no Gloo controller (MPI does its job)."""
    return False


def ccl_built() -> bool:
    """False: oneCCL is not supported."""
    return False


def ddl_built() -> bool:
    """False: IBM DDL is not supported."""
    return False


def rocm_built() -> bool:
    """False: ROCm (RCCL) is not supported."""
    return False


def mpi_threads_supported() -> bool:
    """Whether other threads of this process may call MPI while fuseopt runs
    (Horovod: MPI runs at MPI_THREAD_MULTIPLE). By default False: fuseopt
    asks for MPI_THREAD_SERIALIZED (one of its threads at a time calls MPI),
    which measured 2-5x faster here. True with ``FUSEOPT_MPI_THREAD_MULTIPLE=1``
    (``init(mpi_thread_multiple=True)``), or when the script initialised MPI
    at THREAD_MULTIPLE itself (mpi4py's default). Requires init(), as in
    Horovod."""
    supported = ffi.new("int*")
    check(lib.fuseopt_mpi_threads_supported(world.context(), supported))
    return bool(supported[0])


def nccl_built() -> int:
    """NCCL's version code (e.g. 21903 for 2.19.3) when the library the core
    would load for CUDA tensors is there (``FUSEOPT_NCCL_LIBRARY``, else
    ``libnccl.so.2`` on the loader's path or from the nvidia-nccl-cu12
    wheel), else 0."""
    locate_wheel_libraries()
    path = os.environ.get("FUSEOPT_NCCL_LIBRARY") or "libnccl.so.2"
    try:
        nccl = ctypes.CDLL(path)
        version = ctypes.c_int(0)
        if nccl.ncclGetVersion(ctypes.byref(version)) != 0:
            return 0
    except (OSError, AttributeError):
        return 0
    return int(version.value)


def hccl_built() -> bool:
    """Whether the HCCL library the core would load for Ascend tensors is
    there (``FUSEOPT_HCCL_LIBRARY``, else ``libhccl.so`` on the loader's
    path, which CANN's set_env.sh sets)."""
    try:
        ctypes.CDLL(os.environ.get("FUSEOPT_HCCL_LIBRARY") or "libhccl.so")
    except OSError:
        return False
    return True


def cuda_built() -> bool:
    """Whether CUDA tensors can be reduced: NCCL can be loaded (see nccl_built)."""
    return nccl_built() != 0


def is_homogeneous() -> bool:
    """Whether every node runs the same number of ranks."""
    world.context()
    return world.homogeneous()
