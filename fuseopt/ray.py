"""Horovod's horovod.ray (RayExecutor, ElasticRayExecutor): not in fuseopt
yet; importing this raises UnsupportedError (fuseopt/base/unsupported.py)."""
from .base.unsupported import refuse

refuse(__name__, "horovod.ray integration yet (RayExecutor, ElasticRayExecutor)")
