"""Horovod's horovod.spark (run, the Estimators): not in fuseopt yet;
importing this raises UnsupportedError (fuseopt/_not_yet.py)."""
from ._not_yet import refuse

refuse(__name__, "horovod.spark integration yet (run, the Estimators)")
