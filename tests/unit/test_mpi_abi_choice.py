"""Which core an install loads (Note [One install, the MPI chosen at run time]
in fuseopt/base/_native.py): the choice from the environment and the mapped
libraries, where Open MPI's library is looked for, and the errors a wrong
setting gets. The runs on Open MPI 4.1/5.0 are tests/test_other_mpis.py."""
import os
import subprocess
import sys

import pytest

from fuseopt.base._native import open_mpi_candidates, wanted_abi


def test_the_default_is_the_mpich_family():
    assert wanted_abi({}, set()) == ("mpich", "the default")


def test_open_mpis_launcher_chooses_open_mpi():
    abi, why = wanted_abi({"OMPI_COMM_WORLD_SIZE": "2"}, set())
    assert abi == "openmpi" and "OMPI_COMM_WORLD_SIZE" in why


def test_a_library_already_mapped_wins_over_the_launcher():
    # mpi4py imported first under Hydra loaded MPICH: never map a second MPI.
    mapped = {"/usr/lib/libc.so.6", "/venv/lib/libmpi.so.12.5.0"}
    assert wanted_abi({"OMPI_COMM_WORLD_SIZE": "2"}, mapped)[0] == "mpich"
    assert wanted_abi({}, {"/opt/ompi/lib/libmpi.so.40"})[0] == "openmpi"
    # Names that only look alike are not MPI libraries.
    assert wanted_abi({}, {"/x/libmpi.so.400", "/x/libmpi_cxx.so.40"})[0] == "mpich"


def test_the_variable_wins_and_a_wrong_value_is_refused():
    env = {"FUSEOPT_MPI_ABI": "OpenMPI", "OMPI_COMM_WORLD_SIZE": "2"}
    assert wanted_abi(env, set())[0] == "openmpi"
    assert wanted_abi({"FUSEOPT_MPI_ABI": "mpich"}, {"/x/libmpi.so.40"})[0] == "mpich"
    with pytest.raises(ImportError, match="FUSEOPT_MPI_ABI='ompi': expected one of mpich, openmpi"):
        wanted_abi({"FUSEOPT_MPI_ABI": "ompi"}, set())


def test_open_mpis_library_is_looked_for_under_the_launchers_prefix_first(tmp_path):
    (tmp_path / "bin").mkdir()
    mpirun = tmp_path / "bin" / "mpirun"
    mpirun.write_text("")
    mpirun.chmod(0o755)
    env = {"OPAL_PREFIX": "/opt/ompi5", "PATH": str(tmp_path / "bin")}
    assert open_mpi_candidates(env) == [
        "/opt/ompi5/lib/libmpi.so.40", "/opt/ompi5/lib64/libmpi.so.40", "libmpi.so.40",
        str(tmp_path / "lib" / "libmpi.so.40"), str(tmp_path / "lib64" / "libmpi.so.40")]
    assert open_mpi_candidates({"PATH": ""}) == ["libmpi.so.40"]


def _import_fuseopt(env):
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("FUSEOPT_", "OMPI_", "PMI_", "OPAL_"))}
    return subprocess.run([sys.executable, "-c", "from fuseopt.base import _native"], env=dict(clean, **env),
                          capture_output=True, text=True, timeout=120)


def test_an_open_mpi_library_that_cannot_load_is_a_clear_error():
    run = _import_fuseopt({"FUSEOPT_MPI_ABI": "openmpi",
                           "FUSEOPT_MPI_LIBRARY": "/nonexistent/libmpi.so.40"})
    assert run.returncode != 0
    assert "fuseopt runs on Open MPI here (FUSEOPT_MPI_ABI=openmpi) but cannot load its " \
           "library: tried /nonexistent/libmpi.so.40" in run.stderr, run.stderr
    assert "FUSEOPT_MPI_LIBRARY" in run.stderr and "LD_LIBRARY_PATH" in run.stderr


def test_a_wrong_abi_setting_fails_the_import_with_its_name():
    run = _import_fuseopt({"FUSEOPT_MPI_ABI": "lam"})
    assert run.returncode != 0 and "FUSEOPT_MPI_ABI='lam'" in run.stderr, run.stderr
    run = _import_fuseopt({"FUSEOPT_MPI_LIBRARY": "/nonexistent/libmpi.so.12"})
    assert run.returncode != 0
    assert "FUSEOPT_MPI_LIBRARY=/nonexistent/libmpi.so.12 cannot be loaded" in run.stderr
