# Metadata lives in pyproject.toml; setup.py exists for cffi_modules, which
# compiles the native core (see fuseopt/_build.py).
from setuptools import setup

setup(cffi_modules=["fuseopt/_build.py:ffibuilder"])
