"""Horovod's ``horovod.torch.mpi_ops`` import path: the same names as
``fuseopt.torch`` (collectives, handles, init, rank, size, ...), for scripts
and wrappers that import them from there."""
from . import *  # noqa: F401,F403  (every public name of fuseopt.torch)
