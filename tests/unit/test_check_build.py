"""`fuseopt check-build` says what this process really loaded: the MPI
library file is the one mapped into the process, its ABI and vendor follow
from it, and the command line prints the same (fuseopt/tools/check_build.py)."""
import os
import subprocess
import sys

import pytest

from fuseopt.tools import check_build


def mapped_libmpi():
    """The libmpi files mapped into this process (/proc/self/maps)."""
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if len(line.split()) >= 6}
    return {os.path.realpath(p) for p in paths if os.path.basename(p).startswith("libmpi")}


def test_the_reported_library_is_the_one_mapped_into_the_process():
    found = check_build.report("x")
    mpi = found["mpi"]
    assert os.path.realpath(mpi["path"]) in mapped_libmpi(), (mpi["path"], mapped_libmpi())
    # The default install runs the mpich wheel: MPICH, through the MPICH ABI.
    assert mpi["vendor"] == "MPICH" and mpi["abi"].startswith("MPICH ABI"), mpi
    assert mpi["version"].startswith("MPICH Version:"), mpi["version"][:200]
    assert mpi["standard"] in ("3.1", "4.0", "4.1", "5.0"), mpi["standard"]
    assert any(f.startswith("MPICH device ch4") for f in mpi["fabrics"]), mpi["fabrics"]
    assert mpi["thread_level"] == "MPI_THREAD_SERIALIZED"


@pytest.mark.parametrize("name, abi", [("libmpi.so.12", "MPICH ABI"), ("libmpi.so.40", "Open MPI ABI"),
                                       ("libmpi_abi.so.1", "MPI-5 standard ABI"),
                                       ("libmsmpi.so", "unknown")])
def test_abi_follows_from_the_shared_object_name(name, abi):
    assert check_build.abi_of("/opt/mpi/lib/" + name).startswith(abi)


@pytest.mark.parametrize("version, vendor", [
    ("Intel(R) MPI Library 2021.19 for Linux* OS", "Intel MPI"),
    ("Open MPI v5.0.11, package: Open MPI pip Distribution", "Open MPI"),
    ("MVAPICH Version: 3.0", "MVAPICH"), ("MPICH Version: 5.0.2", "MPICH"),
    ("something else", "unknown")])
def test_vendor_follows_from_the_version_string(version, vendor):
    assert check_build.vendor_of(version) == vendor


def test_the_command_prints_horovods_table_then_the_library_loaded(tmp_path):
    env = dict(os.environ, FUSEOPT_CACHE_DIR=str(tmp_path), FUSEOPT_MPI_THREAD_MULTIPLE="1")
    out = subprocess.run([sys.executable, "-m", "fuseopt", "check-build"], env=env, check=True,
                         capture_output=True, text=True, timeout=120).stdout
    assert out.index("Available Frameworks:") < out.index("Runtime:"), out
    assert "[X] PyTorch" in out and "[X] MPI" in out and "[ ] Gloo" in out, out
    path = check_build.report("x")["mpi"]["path"]
    assert "MPI library  %s" % path in out, out
    assert "thread level MPI_THREAD_MULTIPLE" in out, out
    assert "TF kernels   %s: empty" % os.path.join(str(tmp_path), "tf-kernels") in out, out
    os.makedirs(tmp_path / "tf-kernels")
    (tmp_path / "tf-kernels" / "status_op-0123.so").write_bytes(b"")
    out = subprocess.run([sys.executable, "-m", "fuseopt", "check-build"], env=env, check=True,
                         capture_output=True, text=True, timeout=120).stdout
    assert "1 built, 0 failed" in out, out


@pytest.mark.parametrize("raw, level", [("false", "MPI_THREAD_SERIALIZED"), ("0", "MPI_THREAD_SERIALIZED"),
                                        ("on", "MPI_THREAD_MULTIPLE"), ("maybe", "unknown")])
def test_the_thread_level_is_read_as_the_knob_reads_it(monkeypatch, raw, level):
    monkeypatch.setenv("FUSEOPT_MPI_THREAD_MULTIPLE", raw)
    assert check_build.report("x")["mpi"]["thread_level"].startswith(level)


def test_the_core_reported_is_the_one_loaded():
    core = check_build.report("x")["core"]
    with open("/proc/self/maps") as f:
        mapped = {os.path.realpath(line.split()[-1]) for line in f if "/" in line}
    assert os.path.realpath(core["file"]) in mapped, core
    assert (core["module"], core["family"], core["why"]) == \
        ("fuseopt._fuseopt_cffi", "mpich", "the default")


def test_open_mpis_transports_are_read_from_its_plug_ins(tmp_path):
    components = tmp_path / "lib" / "openmpi" / "openmpi3"
    components.mkdir(parents=True)
    for name in ("mca_btl_vader.so", "mca_pml_ucx.so", "mca_mtl_ofi.so", "mca_bml_r2.so"):
        (components / name).write_text("")
    (tmp_path / "lib" / "openmpi" / "libucp.so.0").write_text("")
    found = check_build.fabrics("Open MPI v4.1.4", str(tmp_path / "lib" / "libmpi.so.40"))
    assert found == ["Open MPI components: btl_vader, mtl_ofi, pml_ucx",
                     "UCX (carried by this Open MPI)"]
