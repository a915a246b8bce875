"""fuseopt's errors as TensorFlow's, where Horovod's TensorFlow ops raise
``tf.errors`` classes: ranks that disagree on a tensor (shape, dtype, root)
give ``tf.errors.FailedPreconditionError``, a bad argument
``tf.errors.InvalidArgumentError``, what fuseopt does not implement
``tf.errors.UnimplementedError`` (also a ``NotImplementedError``). The
raised exception is both: a script written for Horovod catches it with
``except tf.errors....``, one written for fuseopt with ``except
hvd.MismatchError``.

Eagerly, and for the checks made when a ``tf.function`` is traced, that is
what the public functions raise (``with_tf_errors``). Inside a traced graph
the collective runs in a ``tf.numpy_function``, whose errors TensorFlow maps
to a few codes by Python type only; there the collective hands its error to
fuseopt's compiled kernel (``kernels``), which raises the same TensorFlow
class with ``<fuseopt class>: <message>`` (``graph_status``). Without the
kernel, such an error is ``tf.errors.UnknownError`` with that message."""
import functools
from typing import Any, Callable, Dict, Type, TypeVar

import tensorflow as tf

from ..base.errors import FuseoptError, InvalidArgumentError, MismatchError, UnsupportedError

# fuseopt's class -> the TensorFlow class and status code Horovod's ops give.
_TF_CLASS = ((MismatchError, tf.errors.FailedPreconditionError, tf.errors.FAILED_PRECONDITION),
             (InvalidArgumentError, tf.errors.InvalidArgumentError, tf.errors.INVALID_ARGUMENT),
             (UnsupportedError, tf.errors.UnimplementedError, tf.errors.UNIMPLEMENTED))
_both: Dict[type, type] = {}


def _twin(cls: Type[FuseoptError]) -> Any:
    """(TensorFlow class, status code) for fuseopt's ``cls``, or None."""
    return next(((tf_cls, code) for base, tf_cls, code in _TF_CLASS if issubclass(cls, base)),
                None)


def _class_for(cls: Type[FuseoptError]) -> Any:
    """The class that is both ``cls`` and its TensorFlow twin, or None."""
    found = _twin(cls)
    if found is None:
        return None
    twin = found[0]
    if cls not in _both:
        def __init__(self, message):
            twin.__init__(self, None, None, message)

        _both[cls] = type(cls.__name__, (cls, twin), {
            "__init__": __init__, "__str__": lambda self: self.message,
            "__module__": cls.__module__, "__doc__": cls.__doc__})
    return _both[cls]


def as_tf_error(error: BaseException) -> BaseException:
    """``error`` as the class that is also its TensorFlow twin, if it has one."""
    if not isinstance(error, FuseoptError) or isinstance(error, tf.errors.OpError):
        return error
    cls = _class_for(type(error))
    return error if cls is None else cls(str(error))


def graph_status(error: FuseoptError):
    """(status code, message) for ``error`` raised inside a traced graph."""
    found = _twin(type(error))
    return (found[1] if found else tf.errors.UNKNOWN), "%s: %s" % (type(error).__name__, error)


F = TypeVar("F", bound=Callable[..., Any])


def with_tf_errors(fn: F) -> F:
    """``fn`` raising fuseopt's errors as their TensorFlow twins."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except FuseoptError as e:
            converted = as_tf_error(e)
            if converted is e:
                raise
            raise converted from e
    return call  # type: ignore[return-value]
