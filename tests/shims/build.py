"""Builds the fake device libraries (the test shims) with g++ at test time.

``build(outdir)`` compiles ``fake_cuda_nccl.cc`` into ``libfakecuda.so`` and
``fake_acl_hccl.cc`` into ``libfakeascend.so``, against the MPI that fuseopt
itself was built with (the shims run their collectives over it), and returns
the environment that points fuseopt's NCCL and HCCL backends at them.
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

SHIMS = {"libfakecuda.so": "fake_cuda_nccl.cc", "libfakeascend.so": "fake_acl_hccl.cc"}


def _mpi_flags():
    sys.path.insert(0, os.path.join(ROOT, "fuseopt"))
    try:
        from _build import find_mpi  # the same MPI as the native core
    finally:
        sys.path.pop(0)
    mpi = find_mpi()
    return ([f"-I{d}" for d in mpi["include_dirs"]] + [f"-L{d}" for d in mpi["library_dirs"]]
            + [f"-Wl,-rpath,{d}" for d in mpi["rpath"]] + [f"-l{l}" for l in mpi["libraries"]])


def build(outdir):
    os.makedirs(outdir, exist_ok=True)
    flags = _mpi_flags()
    for lib, source in SHIMS.items():
        cmd = ["g++", "-std=c++17", "-O1", "-g0", "-shared", "-fPIC", "-fvisibility=hidden",
               "-Wall", "-o", os.path.join(outdir, lib), os.path.join(HERE, source), *flags]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    cuda = os.path.join(outdir, "libfakecuda.so")
    ascend = os.path.join(outdir, "libfakeascend.so")
    return {"FUSEOPT_NCCL_LIBRARY": cuda, "FUSEOPT_CUDART_LIBRARY": cuda,
            "FUSEOPT_HCCL_LIBRARY": ascend, "FUSEOPT_ACL_LIBRARY": ascend}


if __name__ == "__main__":
    print(build(sys.argv[1] if len(sys.argv) > 1 else "/tmp/fuseopt-shims"))
