"""init / shutdown / re-init, use before init, config errors, world of size 1."""
import os
import subprocess
import sys

import pytest

from conftest import WORKERS


@pytest.mark.parametrize("nranks", [1, 2])
def test_lifecycle_under_launcher(run_ranks, nranks):
    run_ranks(nranks, "lifecycle.py", env={"EXPECT_SIZE": str(nranks)})


def test_plain_python_is_a_world_of_size_one():
    env = dict(os.environ, EXPECT_SIZE="1", PYTHONPATH=WORKERS)
    for k in list(env):
        if k.startswith(("PMI_", "MPI_", "HYDRA_")):
            del env[k]
    proc = subprocess.run([sys.executable, os.path.join(WORKERS, "lifecycle.py")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "lifecycle ok" in proc.stdout


def test_init_takes_horovods_comm_argument_for_the_whole_job(run_ranks):
    out = run_ranks(2, "init_comm.py").output
    assert out.count("init(comm=) ok") == 2, out


@pytest.mark.parametrize("multiple", ["1", "0"])
def test_mpi4py_threads_next_to_fuseopt(run_ranks, multiple):
    """FUSEOPT_MPI_THREAD_MULTIPLE=1: mpi_threads_supported() is True and a
    script thread's mpi4py allreduces run beside fuseopt's; by default MPI
    stays at SERIALIZED and mpi_threads_supported() is False."""
    out = run_ranks(2, "mpi4py_threads.py", env={"FUSEOPT_MPI_THREAD_MULTIPLE": multiple},
                    timeout=120).output
    assert out.count("mpi4py threads ok (multiple=%s)" % (multiple == "1")) == 2, out
