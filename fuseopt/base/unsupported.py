"""Modules that stand where Horovod has something fuseopt does not have
(fuseopt.mxnet, fuseopt.tensorflow.data, the Spark Estimators'
fuseopt.spark.keras / .torch / .lightning / .common):
importing one raises UnsupportedError saying what is missing and what to
use, so that a script migrated with ``s/horovod/fuseopt/`` stops at its first
line with that, not with a bare ModuleNotFoundError."""
from .errors import UnsupportedError

_LAUNCH = ("Start the ranks with fuseoptrun (mpiexec) or Slurm's srun instead, one process "
           "per rank")


def refuse(module, horovod, instead=_LAUNCH):
    raise UnsupportedError(
        "%s: fuseopt has no %s. %s; see docs/migration.md ('Other import paths')"
        % (module, horovod, instead))
