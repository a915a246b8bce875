# Metadata lives in pyproject.toml; setup.py exists for cffi_modules, which
# compiles the native core, once per MPI ABI (see fuseopt/_build.py), and to put the core's
# public header into the package: fuseopt.tensorflow compiles its kernels
# against it on first use (fuseopt/tensorflow/kernels).
import os
import runpy
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HEADER = os.path.join("native", "include", "fuseopt", "fuseopt.h")


class BuildPyWithHeader(build_py):
    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "fuseopt", "include", "fuseopt")
        os.makedirs(target, exist_ok=True)
        shutil.copy(HEADER, target)


BUILD = "fuseopt/_build.py"
setup(cffi_modules=[BUILD + ":" + name for name in runpy.run_path(BUILD)["MODULES"]],
      cmdclass={"build_py": BuildPyWithHeader})
