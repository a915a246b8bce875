"""fuseopt: data-parallel training over a native negotiate-fuse-reduce core.

    import fuseopt
    fuseopt.init()
    avg = fuseopt.allreduce(numpy_array, name="grad")

Framework bindings live in ``fuseopt.torch`` and ``fuseopt.tensorflow``.
"""
import ast as _ast
import importlib as _importlib
import os as _os
from typing import TYPE_CHECKING

# The public names, loaded on first use (PEP 562). `fuseoptrun` and its rank
# wrapper import only launcher modules, yet every import of a fuseopt module
# runs this file first: importing the names eagerly cost them the native core
# and numpy, 0.2 s in each of those processes (fuseoptrun started a 2-rank
# job in 0.6 s). The imports below are the list: __getattr__ reads them from
# this file, and type checkers see them as written.
if TYPE_CHECKING:
    from .base.errors import (BackendError, FuseoptError, InternalError, InvalidArgumentError,
                              MismatchError, NotInitializedError, RankFailedError,
                              ShutDownError, TimeoutError, UnsupportedError)
    from .api.runtime import init, shutdown
    from .core.world import (cross_rank, cross_size, is_initialized, local_rank, local_size,
                             metrics, pending_handles, rank, settings, size)
    from .core.handles import Handle
    from .api.ops import (Adasum, Average, Max, Min, Product, Sum, allgather, allgather_async,
                          allreduce, allreduce_, allreduce_async, allreduce_async_, alltoall,
                          alltoall_async, barrier, broadcast, broadcast_, broadcast_async,
                          broadcast_async_, grouped_allreduce, grouped_allreduce_,
                          grouped_allreduce_async, grouped_allreduce_async_, join, poll,
                          reducescatter, reducescatter_async, synchronize)
    from .api.objects import allgather_object, broadcast_object
    from .api.agreed import AgreedReduction
    from .core.process_sets import (ProcessSet, add_process_set, global_process_set,
                                    remove_process_set)
    from .training.checkpoint import CheckpointError
    from .training.naming import Shared
    from .api.timeline import start_timeline, stop_timeline
    from .runner import run  # Horovod's horovod.run: a function on every rank of a new job


def _public_names():
    """{name: module} from the TYPE_CHECKING imports above."""
    with open(_os.path.join(_os.path.dirname(__file__), "__init__.py")) as f:
        tree = _ast.parse(f.read())
    block = next(node for node in tree.body if isinstance(node, _ast.If))
    return {alias.name: "." * node.level + (node.module or "")
            for node in block.body for alias in node.names}


_WHERE = _public_names()


def __getattr__(name):
    if name == "__version__":
        from ._version import version
        value = version()
    elif name in _WHERE:
        value = getattr(_importlib.import_module(_WHERE[name], __name__), name)
    elif name in ("errors", "checkpoint", "elastic"):  # their modules (errors.py, ...)
        value = _importlib.import_module("." + name, __name__)
    else:
        raise AttributeError("module 'fuseopt' has no attribute %r" % name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_WHERE) | {"__version__"})


__all__ = sorted(_WHERE)
