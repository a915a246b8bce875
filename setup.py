# Metadata lives in pyproject.toml; setup.py exists for cffi_modules, which
# compiles the native core, once per MPI ABI (see fuseopt/_build.py), and to
# put the core's public header into the package: fuseopt.tensorflow compiles
# its kernels against it on first use (fuseopt/tensorflow/kernels).
import os
import runpy
import shutil
from concurrent.futures import ThreadPoolExecutor

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HEADER = os.path.join("native", "include", "fuseopt", "fuseopt.h")


class BuildPyWithHeader(build_py):
    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "fuseopt", "include", "fuseopt")
        os.makedirs(target, exist_ok=True)
        shutil.copy(HEADER, target)


class BuildExtOnEveryCore(build_ext):
    """Compiles an extension's sources in parallel, one per core: each core
    is ~50 files, built once per MPI ABI, and setuptools compiles one file at
    a time. The objects are those setuptools would make, in the same places."""

    def build_extensions(self):
        compiler = self.compiler

        def compile_sources(sources, output_dir=None, macros=None, include_dirs=None,
                            debug=0, extra_preargs=None, extra_postargs=None, depends=None):
            macros, objects, extra_postargs, pp_opts, build = compiler._setup_compile(
                output_dir, macros, include_dirs, sources, depends, extra_postargs)
            cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)

            def one(obj):
                src, ext = build[obj]
                compiler._compile(obj, src, ext, cc_args, extra_postargs, pp_opts)
            with ThreadPoolExecutor(len(os.sched_getaffinity(0)) or 1) as pool:
                list(pool.map(one, objects))  # list(): a failed compile raises here
            return objects

        compiler.compile = compile_sources
        super().build_extensions()


BUILD = "fuseopt/_build.py"
setup(cffi_modules=[BUILD + ":" + name for name in runpy.run_path(BUILD)["MODULES"]],
      cmdclass={"build_py": BuildPyWithHeader, "build_ext": BuildExtOnEveryCore})
