"""Horovod's ``horovod.runner.common.util.env``: this process's rank and
size as its launcher told it, before ``init``."""
import os
from typing import Tuple

# (rank, size) variable pairs, in Horovod's order of preference, then the
# launchers fuseopt also starts under (Slurm's srun).
_PAIRS = (("HOROVOD_RANK", "HOROVOD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
          ("PMI_RANK", "PMI_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"))


def get_env_rank_and_size() -> Tuple[int, int]:
    """(rank, size) from the first launcher's pair of variables that is set;
    (0, 1) outside any launcher. Raises RuntimeError when only one of a pair
    is set, as Horovod's does."""
    for rank_var, size_var in _PAIRS:
        rank, size = os.environ.get(rank_var), os.environ.get(size_var)
        if rank is not None and size is not None:
            return int(rank), int(size)
        if rank is not None or size is not None:
            raise RuntimeError("Could not determine process rank and size: only one of %s and "
                               "%s found in environment" % (rank_var, size_var))
    return 0, 1
