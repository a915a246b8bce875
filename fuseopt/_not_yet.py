"""Modules that stand where Horovod has an integration fuseopt does not
have yet (fuseopt.ray, fuseopt.spark): importing one raises UnsupportedError
saying what is missing and what to use, so that a script migrated with
``s/horovod/fuseopt/`` stops at its first line with that, not with a bare
ModuleNotFoundError."""
from .errors import UnsupportedError


def refuse(module, horovod):
    raise UnsupportedError(
        "%s: fuseopt has no %s integration yet. Start the ranks with fuseoptrun (mpiexec) or "
        "Slurm's srun instead, one process per rank; see docs/migration.md ('Spark/Ray "
        "integrations')" % (module, horovod))
