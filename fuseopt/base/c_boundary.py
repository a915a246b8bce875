"""Arguments at the boundary: each is checked where it becomes a C value
(once per request template, a cache miss), so that a bad one is an
InvalidArgumentError naming it, rather than a raw TypeError or OverflowError
from cffi, or a tensor name silently cut at a NUL byte."""
import numbers

from .errors import InvalidArgumentError

INT32 = (-2 ** 31, 2 ** 31 - 1)
INT64 = (-2 ** 63, 2 ** 63 - 1)


def c_name_bytes(name):
    """A tensor name as the core takes it: UTF-8, no NUL (C would cut the name
    there, and two different names could then be reduced together)."""
    if not isinstance(name, str):
        raise InvalidArgumentError("tensor name must be a str, not %s (%r)"
                                   % (type(name).__name__, name))
    try:
        raw = name.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidArgumentError("tensor name %r is not valid Unicode text (%s)"
                                   % (name, e.reason)) from None
    if b"\0" in raw:
        raise InvalidArgumentError("tensor name %r contains a NUL character" % (name,))
    return raw


def derived_name(name, suffix):
    """``name + suffix`` for the tensors a binding derives from a user's name
    (None stays None), refusing a name that is not a str before it is mixed."""
    if name is None:
        return None
    c_name_bytes(name)
    return name + suffix


def checked_int(value, what, bounds):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidArgumentError("%s must be an int, not %s (%r)"
                                   % (what, type(value).__name__, value))
    value = int(value)
    if not bounds[0] <= value <= bounds[1]:
        raise InvalidArgumentError("%s = %d is out of range" % (what, value))
    return value


def checked_real(value, what):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError("%s must be a number, not %s (%r)"
                                   % (what, type(value).__name__, value))
    return float(value)
