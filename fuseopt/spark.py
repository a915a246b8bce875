"""Horovod's horovod.spark (run, the Estimators): not in fuseopt yet;
importing this raises UnsupportedError (fuseopt/base/unsupported.py)."""
from .base.unsupported import refuse

refuse(__name__, "horovod.spark integration yet (run, the Estimators)")
