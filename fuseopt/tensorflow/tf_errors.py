"""fuseopt's errors as TensorFlow's, where Horovod's TensorFlow ops raise
``tf.errors`` classes: ranks that disagree on a tensor (shape, dtype, root)
give ``tf.errors.FailedPreconditionError``, a bad argument
``tf.errors.InvalidArgumentError``. The raised exception is both: a script
written for Horovod catches it with ``except tf.errors....``, one written for
fuseopt with ``except hvd.MismatchError``.

Eagerly, and for the checks made when a ``tf.function`` is traced, that is
what the public functions raise (``with_tf_errors``). A failure inside a
traced graph's collective surfaces as ``tf.errors.UnknownError`` carrying
fuseopt's message: the collective runs in a ``tf.numpy_function``, whose
errors TensorFlow maps to a few codes by Python type only."""
import functools
from typing import Any, Callable, Dict, Type, TypeVar

import tensorflow as tf

from ..base.errors import FuseoptError, InvalidArgumentError, MismatchError

_TF_CLASS = ((MismatchError, tf.errors.FailedPreconditionError),
             (InvalidArgumentError, tf.errors.InvalidArgumentError))
_both: Dict[type, type] = {}


def _class_for(cls: Type[FuseoptError]) -> Any:
    """The class that is both ``cls`` and its TensorFlow twin, or None."""
    twin = next((tf_cls for base, tf_cls in _TF_CLASS if issubclass(cls, base)), None)
    if twin is None:
        return None
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
