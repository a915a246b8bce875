"""The one version string: the installed package's metadata, which comes
from pyproject.toml (shown by ``fuseopt.__version__`` and ``fuseoptrun --version``)."""
from importlib.metadata import PackageNotFoundError, version as _metadata_version


def version():
    try:
        return _metadata_version("fuseopt")
    except PackageNotFoundError:  # imported from a source tree that was never installed
        return "0+unknown"
