"""Horovod's horovod.ray (RayExecutor, ElasticRayExecutor): not in fuseopt
yet; importing this raises UnsupportedError (fuseopt/_not_yet.py)."""
from ._not_yet import refuse

refuse(__name__, "horovod.ray integration yet (RayExecutor, ElasticRayExecutor)")
