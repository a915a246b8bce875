"""Horovod's ``horovod.torch.mpi_ops`` import path: the same names as
``fuseopt.torch`` (collectives, handles, init, rank, size, ...), for scripts
and wrappers that import them from there."""
from . import *  # noqa: F401,F403  (every public name of fuseopt.torch)
from ..core.process_sets import horovod_basics as _basics  # noqa: F401,E402
