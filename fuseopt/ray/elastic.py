"""Horovod's horovod.ray.elastic (ElasticRayExecutor, TestDiscovery): not in
fuseopt; importing this raises UnsupportedError (see fuseopt/ray/__init__.py)."""
from ..base.unsupported import refuse

refuse(__name__, "elastic executor for Ray (ElasticRayExecutor, TestDiscovery)",
       "Use fuseoptrun's elastic driver (--min-np/--max-np) instead, or a fixed-size "
       "RayExecutor")
