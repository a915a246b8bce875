"""The variables every rank's command finds, as torchrun sets them.

Scripts and data loaders written for torchrun read ``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE``; the rank wrapper derives them from
what the MPI launcher exported (Hydra's PMI_*/MPI_LOCAL*, Open MPI's
OMPI_COMM_WORLD_*, Slurm's SLURM_*). ``OMP_NUM_THREADS`` is set to this host's
cores divided by its ranks unless the user set it: without it every rank's
intra-op pool takes every core, and N ranks on N cores oversubscribe N-fold.
"""
import os

from ..base.launch_records import RANK_SOURCES, SIZE_SOURCES, first_int
_LOCAL_RANK = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")
_LOCAL_SIZE = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")


def usable_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def torchrun_variables(environ, cpus):
    """{name: value} to add to a rank's environment (strings). Missing
    launcher information leaves the matching variable out."""
    out = {}
    for name, sources in (("RANK", RANK_SOURCES), ("WORLD_SIZE", SIZE_SOURCES),
                          ("LOCAL_RANK", _LOCAL_RANK), ("LOCAL_WORLD_SIZE", _LOCAL_SIZE)):
        value = first_int(environ, sources)
        if value is not None:
            out[name] = str(value)
    local_size = first_int(environ, _LOCAL_SIZE)
    if not environ.get("OMP_NUM_THREADS") and local_size:  # unset or empty
        out["OMP_NUM_THREADS"] = str(max(1, cpus // local_size))
    return out
