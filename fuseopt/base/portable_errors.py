"""An exception raised on one rank, raised again on the others.

When one rank does the work and tells the others (a checkpoint written by the
root, an object pickled by it), a failure there must reach every rank as the
same error, or the others wait forever for a result that never comes. The
error travels as plain data, its class name and message, never pickled
(unpickling would run code chosen by whoever built the bytes). It is raised
again as the same class where that class can be named safely (Python's own
exceptions, fuseopt's, pickle's), else as RuntimeError naming the original."""
import builtins
import pickle

from .errors import FuseoptError


def _known_classes():
    found = {"%s.%s" % (c.__module__, c.__qualname__): c
             for c in vars(builtins).values()
             if isinstance(c, type) and issubclass(c, Exception)}
    stack = [FuseoptError]  # every fuseopt error class imported so far (CheckpointError, ...)
    while stack:
        cls = stack.pop()
        found["%s.%s" % (cls.__module__, cls.__qualname__)] = cls
        stack.extend(cls.__subclasses__())
    for cls in (pickle.PicklingError, pickle.UnpicklingError):
        found["%s.%s" % (cls.__module__, cls.__qualname__)] = cls
    return found


def describe(error, context):
    """``(class name, message)`` of ``error``, the message prefixed by
    ``context`` (who failed doing what) and, for a class that will arrive
    as RuntimeError, by the class's name."""
    cls = type(error)
    kind = "%s.%s" % (cls.__module__, cls.__qualname__)
    shown = str(error) if kind in _known_classes() else "%s: %s" % (cls.__name__, error)
    return kind, "%s: %s" % (context, shown)


def rebuild(failure):
    """The exception to raise for ``describe``'s ``(class name, message)``."""
    kind, message = failure
    cls = _known_classes().get(kind)
    if cls is not None:
        try:
            return cls(message)
        except TypeError:  # a constructor that wants more than a message (UnicodeDecodeError)
            pass
    return RuntimeError(message)
