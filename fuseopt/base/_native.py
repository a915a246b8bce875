"""Loads the compiled core and exposes ``ffi`` and ``lib``.

Note [One install, the MPI chosen at run time]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
MPIs come in two binary families: MPICH's (``libmpi.so.12``: MPICH, Intel MPI,
MVAPICH, Cray MPICH) and Open MPI's (``libmpi.so.40``: Open MPI 4 and 5). An
``mpi.h`` fixes one of them, so the install carries the core twice:

- ``fuseopt._fuseopt_cffi``, built against the MPI found at build time (the
  ``mpich`` wheel unless FUSEOPT_MPI_DIR/FUSEOPT_MPICXX say otherwise), linked
  to it;
- ``fuseopt._fuseopt_cffi_openmpi``, built against fuseopt's declaration of
  Open MPI's ABI (native/abi/openmpi/mpi.h) and linked to no libmpi.

Which one loads is decided here, before either is imported (a process must
never map two MPIs): ``FUSEOPT_MPI_ABI`` (``mpich`` or ``openmpi``) if set;
else the family of an MPI library this process already mapped (mpi4py
imported first); else Open MPI's when Open MPI's launcher started the rank
(``OMPI_COMM_WORLD_SIZE``); else the default. For Open MPI the library is
loaded first, with RTLD_GLOBAL, so the core's MPI names bind to it:
``FUSEOPT_MPI_LIBRARY`` if set, else the one under ``OPAL_PREFIX`` (which Open
MPI's launcher sets when it runs from its own prefix), else ``libmpi.so.40``
as the loader finds it (LD_LIBRARY_PATH, the ldconfig cache), else beside the
``mpirun`` on PATH. ``FUSEOPT_MPI_LIBRARY`` also serves the MPICH family: a
file loaded first satisfies the core's dependency by its soname.

The choice is made once, at import; both cores are the same code calling MPI
through the same PLT, so it costs nothing afterwards (benchmarks/mpis.py
--site compares the Open MPI core with one built against Open MPI's header).
"""
import ctypes
import glob
import os
import re
import shutil

ABIS = ("mpich", "openmpi")
# The soname of each family's library, as /proc/self/maps shows it.
SONAMES = {"mpich": re.compile(r"/libmpi\.so\.12(\.|$)"),
           "openmpi": re.compile(r"/libmpi\.so\.40(\.|$)")}


def wanted_abi(environ, mapped):
    """The MPI family this process should run: ``environ`` is os.environ,
    ``mapped`` the paths of the shared objects it has loaded. Returns the
    family and why (for errors and ``fuseopt check-build``)."""
    chosen = environ.get("FUSEOPT_MPI_ABI", "").strip().lower()
    if chosen:
        if chosen not in ABIS:
            raise ImportError("FUSEOPT_MPI_ABI=%r: expected one of %s"
                              % (environ["FUSEOPT_MPI_ABI"], ", ".join(ABIS)))
        return chosen, "FUSEOPT_MPI_ABI=%s" % chosen
    for abi, soname in SONAMES.items():
        for path in mapped:
            if soname.search(path):
                return abi, "this process had already loaded %s" % path
    if environ.get("OMPI_COMM_WORLD_SIZE"):
        return "openmpi", "started by Open MPI's launcher (OMPI_COMM_WORLD_SIZE is set)"
    return "mpich", "the default"


def open_mpi_candidates(environ, which=shutil.which):
    """Where Open MPI's library may be, most specific first: under the prefix
    Open MPI's launcher gives its ranks (OPAL_PREFIX), then the loader's own
    search by soname, then beside a launcher on PATH."""
    out = []
    if environ.get("OPAL_PREFIX"):
        out += [os.path.join(environ["OPAL_PREFIX"], lib, "libmpi.so.40")
                for lib in ("lib", "lib64")]
    out.append("libmpi.so.40")
    for launcher in ("mpirun", "ompi_info", "prterun"):
        found = which(launcher, path=environ.get("PATH"))
        if found:
            prefix = os.path.dirname(os.path.dirname(os.path.realpath(found)))
            out += [os.path.join(prefix, lib, "libmpi.so.40") for lib in ("lib", "lib64")]
    return list(dict.fromkeys(out))


def _mapped_objects():
    try:
        with open("/proc/self/maps") as maps:
            return {line.split()[-1] for line in maps if "/" in line}
    except OSError:
        return set()


def _preload(path):
    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


def _load_open_mpi(why):
    explicit = os.environ.get("FUSEOPT_MPI_LIBRARY")
    tried = []
    for path in [explicit] if explicit else open_mpi_candidates(os.environ):
        try:
            _preload(path)
            break
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    else:
        raise ImportError(
            "fuseopt runs on Open MPI here (%s) but cannot load its library: tried %s. Put "
            "Open MPI's lib directory on LD_LIBRARY_PATH (mpirun -x LD_LIBRARY_PATH), or set "
            "FUSEOPT_MPI_LIBRARY to its libmpi.so.40, or FUSEOPT_MPI_ABI=mpich for an MPI "
            "of the MPICH family." % (why, "; ".join(tried)))
    # Built with FUSEOPT_MPI_DIR/FUSEOPT_MPICXX at Open MPI, an install has no
    # second core: its default one is Open MPI's. (Looked for as a file: an
    # import would also search other installs, e.g. an editable one's.)
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not glob.glob(os.path.join(package, "_fuseopt_cffi_openmpi.*")):
        return _load_default(why, preloaded=True)
    try:
        from .. import _fuseopt_cffi_openmpi
    except ImportError as e:
        raise ImportError("fuseopt's core for Open MPI failed to load (%s): %s" % (why, e)) from e
    return _fuseopt_cffi_openmpi


def _mpich_wheel_libmpi():
    try:
        from importlib.metadata import distribution
        dist = distribution("mpich")
    except Exception:
        return None
    # libmpi.so itself may be a linker script; the versioned name is the ELF.
    candidates = sorted(str(dist.locate_file(f)) for f in dist.files or []
                        if re.fullmatch(r"libmpi\.so\.\d+", os.path.basename(str(f))))
    return next((p for p in candidates if os.path.exists(p)), None)


def _load_default(why, preloaded=False):
    explicit = None if preloaded else os.environ.get("FUSEOPT_MPI_LIBRARY")
    if explicit:
        try:
            _preload(explicit)
        except OSError as e:
            raise ImportError("FUSEOPT_MPI_LIBRARY=%s cannot be loaded: %s" % (explicit, e))
    try:
        from .. import _fuseopt_cffi
        return _fuseopt_cffi
    except ImportError as first:
        if "libmpi" not in str(first):
            raise ImportError(
                "fuseopt's native core is not built or failed to load: %s. "
                "Reinstall with `pip install .` (needs g++)." % first) from first
        # An editable install, an unusual layout: the mpich wheel's copy,
        # loaded first, satisfies the dependency by soname.
        path = _mpich_wheel_libmpi()
        if path is None:
            raise ImportError(
                "fuseopt cannot find libmpi (%s): %s. Install the mpich wheel (pip install "
                "mpich) or add your MPI's lib directory to LD_LIBRARY_PATH." % (why, first)) \
                from first
        _preload(path)
        from .. import _fuseopt_cffi
        return _fuseopt_cffi


MPI_ABI, MPI_ABI_REASON = wanted_abi(os.environ, _mapped_objects())
_module = _load_open_mpi(MPI_ABI_REASON) if MPI_ABI == "openmpi" \
    else _load_default(MPI_ABI_REASON)
ffi = _module.ffi
lib = _module.lib

if lib.fuseopt_abi_version() != lib.FUSEOPT_ABI_VERSION:
    raise ImportError("fuseopt native core ABI %d does not match header ABI %d; rebuild"
                      % (lib.fuseopt_abi_version(), lib.FUSEOPT_ABI_VERSION))
