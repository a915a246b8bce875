"""Loads the compiled core (fuseopt._fuseopt_cffi) and exposes ``ffi`` and ``lib``.

The extension links against libmpi.so.12. When the loader cannot find it on its
own (an editable install, an unusual layout), the copy from the ``mpich`` wheel
is loaded first with RTLD_GLOBAL, which satisfies the dependency by soname.
"""
import ctypes
import os
import re


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


def _load():
    try:
        from .. import _fuseopt_cffi
        return _fuseopt_cffi
    except ImportError as first:
        if "libmpi" not in str(first):
            raise ImportError(
                "fuseopt's native core is not built or failed to load: %s. "
                "Reinstall with `pip install .` (needs g++)." % first) from first
        path = _mpich_wheel_libmpi()
        if path is None:
            raise ImportError(
                "fuseopt cannot find libmpi: %s. Install the mpich wheel "
                "(pip install mpich) or add your MPI's lib directory to "
                "LD_LIBRARY_PATH." % first) from first
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        from .. import _fuseopt_cffi
        return _fuseopt_cffi


_module = _load()
ffi = _module.ffi
lib = _module.lib

if lib.fuseopt_abi_version() != lib.FUSEOPT_ABI_VERSION:
    raise ImportError("fuseopt native core ABI %d does not match header ABI %d; rebuild"
                      % (lib.fuseopt_abi_version(), lib.FUSEOPT_ABI_VERSION))
