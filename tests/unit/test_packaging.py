"""What the package says about itself agrees with pyproject.toml: one version
string (fuseopt.__version__, fuseoptrun --version), the license that ships,
and the Python floor the README states."""
import os
import re
import subprocess
import sys

import fuseopt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYPROJECT = open(os.path.join(ROOT, "pyproject.toml")).read()


def project_field(name):
    return re.search(r'^%s = "([^"]+)"' % name, PYPROJECT, re.M).group(1)


def test_one_version_string():
    version = project_field("version")
    assert fuseopt.__version__ == version
    out = subprocess.run([sys.executable, "-m", "fuseopt.launcher.cli", "--version"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["fuseoptrun", "(fuseopt)", version]


def test_the_declared_license_ships():
    assert 'license = {text = "Apache-2.0"}' in PYPROJECT
    text = open(os.path.join(ROOT, "LICENSE")).read()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_readme_states_the_python_floor_of_pyproject():
    floor = re.fullmatch(r">=(\d+\.\d+)", project_field("requires-python")).group(1)
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert "Python %s+" % floor in readme.split("```")[0]


def test_torchrun_variables_from_each_launcher():
    from fuseopt.launcher.rank_env import torchrun_variables
    hydra = {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
    assert torchrun_variables(hydra, cpus=8) == {
        "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
        "OMP_NUM_THREADS": "4"}
    ompi = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
            "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
            "OMP_NUM_THREADS": "2"}  # the user's own setting wins
    assert torchrun_variables(ompi, cpus=1) == {
        "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}
    assert torchrun_variables({"MPI_LOCALNRANKS": "4"}, cpus=2)["OMP_NUM_THREADS"] == "1"
    assert torchrun_variables({}, cpus=2) == {}


def test_the_tensorflow_kernel_source_ships_as_package_data():
    # Built at run time from this file (fuseopt/tensorflow/kernels), so a
    # wheel without it could never build the kernel.
    import fnmatch
    data = re.search(r'^fuseopt = \[(.*)\]$', PYPROJECT, re.M).group(1)
    patterns = re.findall(r'"([^"]+)"', data)
    kernels = os.path.join("tensorflow", "kernels")
    names = sorted(n for n in os.listdir(os.path.join(ROOT, "fuseopt", kernels))
                   if n.endswith((".cc", ".h")))
    assert {"status_op.cc", "batch_norm_op.cc", "c_api_helpers.h"} <= set(names), names
    for name in names:
        source = os.path.join(kernels, name)
        assert any(fnmatch.fnmatch(source, p) for p in patterns), patterns


def test_the_core_header_ships_in_the_package(tmp_path):
    # batch_norm_op.cc includes fuseopt/fuseopt.h: setup.py's build_py puts
    # it into the package, where kernels.header_dir() finds it.
    from setuptools.dist import Distribution
    out = tmp_path / "build"
    # setup.py's definitions without its setup() call, which would build the core.
    text = open(os.path.join(ROOT, "setup.py")).read()
    namespace = {"__name__": "setup_without_setup"}
    exec(compile(text.replace("setup(cffi_modules", "dict(cffi_modules"), "setup.py", "exec"),
         namespace)
    command = namespace["BuildPyWithHeader"](Distribution({"packages": []}))
    command.initialize_options()
    command.build_lib = str(out)
    command.finalize_options()
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        command.run()
    finally:
        os.chdir(cwd)
    copied = out / "fuseopt" / "include" / "fuseopt" / "fuseopt.h"
    assert copied.read_text() == open(os.path.join(ROOT, "native", "include", "fuseopt",
                                                   "fuseopt.h")).read()


def test_every_native_header_rebuilds_the_core():
    # setuptools rebuilds an extension only when a source or a listed
    # dependency is newer than it: a header missing from depends leaves a
    # stale core in a development install after that header is edited.
    import glob
    import runpy
    build = runpy.run_path(os.path.join(ROOT, "fuseopt", "_build.py"))
    ffi = build["make_builder"](abi="openmpi")  # the ABI core needs no MPI wrapper
    depends = set(ffi._assigned_source[3]["depends"])
    headers = {os.path.relpath(p, ROOT) for p in glob.glob(
        os.path.join(ROOT, "native", "**", "*.h"), recursive=True)}
    assert "native/src/transport/mpi/store_choice.h" in headers
    assert headers <= depends, sorted(headers - depends)
