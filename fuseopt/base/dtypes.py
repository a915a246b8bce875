"""Element types: the native codes and their names, read from the core.

Framework bindings map their own dtypes to these names; nothing here is
copied from the header by hand.
"""
from ._native import ffi, lib
from .errors import InvalidArgumentError

#: dtype name ("float32", "bfloat16", ...) -> native code
CODES = {ffi.string(lib.fuseopt_dtype_name(i)).decode(): i
         for i in range(lib.FUSEOPT_DTYPE_COUNT)}
NAMES = {code: name for name, code in CODES.items()}
ITEMSIZE = {name: lib.fuseopt_dtype_size(code) for name, code in CODES.items()}


def code_for(name, what="tensor"):
    """Native dtype code for a dtype name, or a clear error listing what works."""
    try:
        return CODES[name]
    except KeyError:
        raise InvalidArgumentError(
            "%s has dtype %s, which fuseopt does not reduce; supported: %s"
            % (what, name, ", ".join(CODES))) from None
