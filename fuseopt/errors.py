"""``fuseopt.errors``: fuseopt's exception classes (fuseopt/base/errors.py),
under the import path scripts use."""
import sys

from .base import errors as _errors

sys.modules[__name__] = _errors
