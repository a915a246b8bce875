"""cffi builder for the native core (out-of-line API mode).

setup.py names this file in ``cffi_modules``; ``pip install .`` then compiles
every ``.cc`` under ``native/src`` (one folder per layer; native/src is on the
include path, so includes name the folder: ``#include "base/log.h"``) together
with cffi's wrapper into ``fuseopt._fuseopt_cffi``, and once more against
fuseopt's own declaration of Open MPI's ABI (native/abi/openmpi) into
``fuseopt._fuseopt_cffi_openmpi``, linked to no libmpi: fuseopt/base/_native.py
loads the MPI the job runs on, then the core built for its ABI. MANIFEST.in
puts native/ into the sdist. The cdef is read from the public header between its cdef
markers, so the C declarations and constants exist in exactly one place.

Which MPI ``fuseopt._fuseopt_cffi`` is built against, first match wins:
  1. ``FUSEOPT_MPI_DIR=/prefix``   a site MPI installed under prefix/{include,lib}
  2. ``FUSEOPT_MPICXX=mpicxx``     a site MPI's compiler wrapper (name or path)
  3. the ``mpich`` wheel from PyPI (the default; a build dependency)
  4. ``mpicxx`` found on PATH
"""
import glob
import os
import shlex
import shutil
import subprocess

from cffi import FFI

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = os.path.join(ROOT, "native", "include", "fuseopt", "fuseopt.h")


def read_cdef(path=HEADER):
    text = open(path).read()
    begin = text.index("/* cdef-begin */") + len("/* cdef-begin */")
    return text[begin:text.index("/* cdef-end */")]


def _mpi_from_prefix(prefix):
    libdir = next((d for d in (os.path.join(prefix, "lib"), os.path.join(prefix, "lib64"))
                   if glob.glob(os.path.join(d, "libmpi.so*"))), os.path.join(prefix, "lib"))
    return {"include_dirs": [os.path.join(prefix, "include")], "library_dirs": [libdir],
            "libraries": ["mpi"], "rpath": [libdir]}


def _wrapper_command(wrapper):
    """The compiler command line an MPI wrapper stands for: ``-show`` for the
    MPICH family (MPICH, Intel MPI, MVAPICH), ``--showme`` for Open MPI."""
    for flag in ("-show", "--showme"):
        try:
            return subprocess.check_output([wrapper, flag], text=True, stderr=subprocess.DEVNULL)
        except subprocess.CalledProcessError:
            continue
    raise RuntimeError("fuseopt: %s accepts neither -show nor --showme" % wrapper)


def _mpi_from_wrapper(wrapper):
    words = shlex.split(_wrapper_command(wrapper))
    out = {"include_dirs": [], "library_dirs": [], "libraries": [], "rpath": []}
    for w in words[1:]:
        if w.startswith("-I"):
            out["include_dirs"].append(w[2:])
        elif w.startswith("-L"):
            out["library_dirs"].append(w[2:])
            out["rpath"].append(w[2:])
        elif w.startswith("-l"):
            out["libraries"].append(w[2:])
    if "mpi" not in out["libraries"]:
        out["libraries"].append("mpi")
    return out


def _mpich_wheel_prefix():
    try:
        from importlib.metadata import PackageNotFoundError, distribution
        dist = distribution("mpich")
    except Exception:
        return None
    for f in dist.files or []:
        if str(f).endswith("include/mpi.h"):
            header = str(dist.locate_file(f))
            return os.path.dirname(os.path.dirname(os.path.abspath(header)))
    return None


def find_mpi():
    if os.environ.get("FUSEOPT_MPI_DIR"):
        return _mpi_from_prefix(os.environ["FUSEOPT_MPI_DIR"])
    if os.environ.get("FUSEOPT_MPICXX"):
        return _mpi_from_wrapper(os.environ["FUSEOPT_MPICXX"])
    prefix = _mpich_wheel_prefix()
    if prefix:
        return _mpi_from_prefix(prefix)
    if shutil.which("mpicxx"):
        return _mpi_from_wrapper("mpicxx")
    raise RuntimeError(
        "fuseopt: no MPI found. Install the 'mpich' wheel (pip install mpich), or point "
        "FUSEOPT_MPI_DIR at an MPI prefix, or FUSEOPT_MPICXX at its mpicxx wrapper.")


OPEN_MPI_ABI = {"include_dirs": [os.path.join(ROOT, "native", "abi", "openmpi")],
                "library_dirs": [], "libraries": [], "rpath": []}


def is_open_mpi(mpi):
    """Whether the MPI found at build time is Open MPI (its mpi.h says so):
    the default core then serves Open MPI jobs, and no second one is built."""
    for directory in mpi["include_dirs"]:
        header = os.path.join(directory, "mpi.h")
        if os.path.exists(header) and "define OPEN_MPI " in open(header, errors="replace").read():
            return True
    return False


def make_builder(absolute_paths=False, abi=None):
    """The default core (the MPI found at build time), or with abi="openmpi"
    the core for Open MPI's ABI."""
    mpi = OPEN_MPI_ABI if abi == "openmpi" else find_mpi()
    module = "fuseopt._fuseopt_cffi" + ("_" + abi if abi else "")
    sources = sorted(glob.glob(os.path.join(ROOT, "native", "src", "**", "*.cc"), recursive=True))
    # Every header, so that editing one rebuilds the core: setuptools compares
    # only sources and depends with the built module, and a header-only change
    # (transport/mpi/store_choice.h) left a stale core behind in a development
    # install, silently.
    headers = sorted(glob.glob(os.path.join(ROOT, "native", "**", "*.h"), recursive=True))
    if not absolute_paths:  # setuptools insists on paths relative to setup.py
        sources = [os.path.relpath(p, ROOT) for p in sources]
        headers = [os.path.relpath(p, ROOT) for p in headers]
    # The chosen MPI's own directory first, so that a site MPI with the same
    # soname as the mpich wheel (libmpi.so.12: Intel MPI, Cray MPICH, MVAPICH)
    # is not shadowed by the wheel's copy. $ORIGIN/../../.. is <venv>/lib when
    # installed into site-packages, where the wheel puts libmpi;
    # fuseopt/base/_native.py preloads it when neither is found.
    rpaths = mpi["rpath"] + ([] if abi else ["$ORIGIN/../../.."])
    ffi = FFI()
    ffi.cdef(read_cdef())
    ffi.set_source(
        module,
        '#include "fuseopt/fuseopt.h"',
        sources=sources,
        depends=headers,
        source_extension=".cpp",
        include_dirs=[os.path.join(ROOT, "native", "include"), os.path.join(ROOT, "native", "src")]
        + mpi["include_dirs"],
        library_dirs=mpi["library_dirs"],
        # dl: the device backends dlopen NCCL/HCCL (part of libc since glibc 2.34)
        libraries=mpi["libraries"] + ["stdc++", "dl"],
        # -ffp-contract=off: no FMA contraction in the per-CPU clones of the
        # kernels (native/src/kernels), so that every CPU gets the same bits.
        extra_compile_args=["-std=c++17", "-O2", "-g0", "-Wall", "-fvisibility=hidden",
                            "-ffp-contract=off", "-Wno-psabi"],
        extra_link_args=(["-Wl,-rpath," + ":".join(rpaths)] if rpaths else []) + ["-pthread"],
    )
    return ffi


if __name__ == "__main__":  # python fuseopt/_build.py: build in place, for development
    for abi in [None] + ([] if is_open_mpi(find_mpi()) else ["openmpi"]):
        make_builder(absolute_paths=True, abi=abi).compile(tmpdir=ROOT, verbose=True)
else:
    # setup.py reads MODULES (the builders of this install) to name them in cffi_modules.
    ffibuilder = make_builder()
    MODULES = ["ffibuilder"]
    if not is_open_mpi(find_mpi()):
        ffibuilder_openmpi = make_builder(abi="openmpi")
        MODULES.append("ffibuilder_openmpi")
