"""fuseopt's exceptions, and the one place a native status becomes one."""
from ._native import ffi, lib


class FuseoptError(RuntimeError):
    """Base class. ``status`` is the native status name, e.g. ``"MISMATCH"``."""

    status = "INTERNAL"


class InvalidArgumentError(FuseoptError, ValueError):
    """A bad argument or setting (raised on every rank when ranks disagree)."""

    status = "INVALID_ARG"


class NotInitializedError(FuseoptError):
    """An operation before ``init()`` or after ``shutdown()``."""

    status = "NOT_INITIALIZED"


class UnsupportedError(FuseoptError, NotImplementedError):
    """A feature this build or device cannot provide. Also a
    NotImplementedError, which Horovod raises for such cases."""

    status = "UNSUPPORTED"


class MismatchError(FuseoptError):
    """Ranks disagree about a tensor (shape, dtype, op, root...). Raised on every rank."""
    status = "MISMATCH"


class BackendError(FuseoptError):
    """MPI, NCCL or HCCL reported an error."""

    status = "BACKEND"


class TimeoutError(FuseoptError):  # noqa: A001  (fuseopt.TimeoutError, like Horovod's names)
    """A wait with a timeout ran out (the operation is still pending)."""

    status = "TIMEOUT"


class ShutDownError(FuseoptError):
    """fuseopt shut down while the operation was pending."""

    status = "SHUT_DOWN"


class RankFailedError(FuseoptError):
    """Another rank died, froze or stopped; the message names it."""

    status = "RANK_FAILED"


class InternalError(FuseoptError):
    """A fuseopt bug: please report it with the message."""

    status = "INTERNAL"


# Each class names its status; the codes come from the header.
_BY_STATUS = {getattr(lib, "FUSEOPT_" + cls.status): cls for cls in (
    InvalidArgumentError, NotInitializedError, UnsupportedError, MismatchError, BackendError,
    TimeoutError, ShutDownError, RankFailedError, InternalError)}


def error_for(status, message):
    """The exception for a native status code and detail message."""
    cls = _BY_STATUS.get(status, InternalError)
    return cls(message)


def check(status):
    """Raises the matching FuseoptError unless status is FUSEOPT_OK."""
    if status != lib.FUSEOPT_OK:
        error = error_for(status, ffi.string(lib.fuseopt_last_error()).decode("utf-8", "replace"))
        try:
            raise error
        finally:
            # error -> traceback -> this frame -> error would be a cycle that
            # keeps the caller's frame (and a Handle's buffers) alive until gc.
            del error
