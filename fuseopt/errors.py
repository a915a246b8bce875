"""fuseopt's exceptions, and the one place a native status becomes one."""
from . import _launch_notes
from ._native import ffi, lib


class FuseoptError(RuntimeError):
    """Base class. ``status`` is the native status name, e.g. ``"MISMATCH"``."""

    status = "INTERNAL"


class InvalidArgumentError(FuseoptError, ValueError):
    status = "INVALID_ARG"


class NotInitializedError(FuseoptError):
    status = "NOT_INITIALIZED"


class UnsupportedError(FuseoptError):
    status = "UNSUPPORTED"


class MismatchError(FuseoptError):
    """Ranks disagree about a tensor (shape, dtype, op, root...). Raised on every rank."""
    status = "MISMATCH"


class BackendError(FuseoptError):
    status = "BACKEND"


class TimeoutError(FuseoptError):  # noqa: A001  (fuseopt.TimeoutError, like Horovod's names)
    status = "TIMEOUT"


class ShutDownError(FuseoptError):
    status = "SHUT_DOWN"


class RankFailedError(FuseoptError):
    status = "RANK_FAILED"


class InternalError(FuseoptError):
    status = "INTERNAL"


_BY_STATUS = {
    lib.FUSEOPT_INVALID_ARG: InvalidArgumentError,
    lib.FUSEOPT_NOT_INITIALIZED: NotInitializedError,
    lib.FUSEOPT_UNSUPPORTED: UnsupportedError,
    lib.FUSEOPT_MISMATCH: MismatchError,
    lib.FUSEOPT_BACKEND: BackendError,
    lib.FUSEOPT_TIMEOUT: TimeoutError,
    lib.FUSEOPT_SHUT_DOWN: ShutDownError,
    lib.FUSEOPT_RANK_FAILED: RankFailedError,
    lib.FUSEOPT_INTERNAL: InternalError,
}


def error_for(status, message):
    """The exception for a native status code and detail message."""
    cls = _BY_STATUS.get(status, InternalError)
    return cls(message)


def check(status):
    """Raises the matching FuseoptError unless status is FUSEOPT_OK."""
    if status != lib.FUSEOPT_OK:
        error = error_for(status, ffi.string(lib.fuseopt_last_error()).decode("utf-8", "replace"))
        if isinstance(error, (ShutDownError, RankFailedError)):
            _launch_notes.record(error.status, str(error))
        try:
            raise error
        finally:
            # error -> traceback -> this frame -> error would be a cycle that
            # keeps the caller's frame (and a Handle's buffers) alive until gc.
            del error
