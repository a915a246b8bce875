"""Where Horovod has horovod.ray (RayExecutor, ElasticRayExecutor): nothing in fuseopt yet.

Importing this module raises UnsupportedError saying so and what to use
instead, so a script migrated with ``s/horovod/fuseopt/`` stops at its
first line with that, not with a bare ModuleNotFoundError."""
from .errors import UnsupportedError

raise UnsupportedError(
    "fuseopt.ray: fuseopt has no horovod.ray (RayExecutor, ElasticRayExecutor) integration yet. "
    "Start the ranks with fuseoptrun (mpiexec) or Slurm's srun instead, one process per "
    "rank; see docs/migration.md ('Spark/Ray integrations')")
