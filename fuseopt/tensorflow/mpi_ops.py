"""Horovod's ``horovod.tensorflow.mpi_ops`` import path: the same names as
``fuseopt.tensorflow``, for scripts and wrappers that import them from
there, and ``_basics`` for Horovod's process-set tests."""
from . import *  # noqa: F401,F403  (every public name of fuseopt.tensorflow)
from ..core.process_sets import horovod_basics as _basics  # noqa: F401
