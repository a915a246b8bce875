"""fuseopt on other MPIs than the mpich wheel's, run for real (issue 43).

Intel MPI (the `impi-rt` wheel from PyPI, 2021.19): the default install,
built against the mpich wheel, runs unchanged on Intel's library through the
MPICH ABI (`libmpi.so.12`), started by Intel's `mpiexec.hydra` through
fuseoptrun --mpiexec, with LD_LIBRARY_PATH at Intel's lib directory (as
Intel's `mpivars.sh` sets it). The wheel goes under its own prefix in the
venv, never over the mpich wheel's files (both ship lib/libmpi.so.12), once
per venv. Its `libfabric` dependency is not on this machine's registries;
on one host Intel MPI's shared-memory transport does without it."""
import os
import subprocess
import sys

import pytest

IMPI_VERSION = "2021.19.0"
IMPI_PREFIX = os.path.join(sys.prefix, "other-mpis", "impi-rt-" + IMPI_VERSION)


@pytest.fixture(scope="module")
def intel_mpi():
    """The Intel MPI prefix, installed from PyPI on first use."""
    launcher = os.path.join(IMPI_PREFIX, "bin", "mpiexec.hydra")
    if not os.path.exists(launcher):
        done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                               "--prefix", IMPI_PREFIX, "impi-rt==" + IMPI_VERSION],
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout + done.stderr
    assert os.path.exists(launcher), "impi-rt installed no %s" % launcher
    return os.path.realpath(IMPI_PREFIX)


def test_intel_mpi_runs_the_collectives_the_optimizer_and_mismatches(run_ranks, intel_mpi):
    lib = os.path.join(intel_mpi, "lib")
    out = run_ranks(2, "other_mpi.py", timeout=300,
                    launcher_args=("--mpiexec", os.path.join(intel_mpi, "bin", "mpiexec.hydra")),
                    env={"LD_LIBRARY_PATH": os.pathsep.join(
                        filter(None, [lib, os.environ.get("LD_LIBRARY_PATH")])),
                         "EXPECTED_MPI_PREFIX": intel_mpi,
                         "EXPECTED_MPI_VENDOR": "Intel MPI"}).output
    assert out.count("16 checks, 0 failed") == 2, out
