"""Horovod's horovod.mxnet: fuseopt has no MXNet binding (Apache MXNet was
retired in 2023); importing this raises UnsupportedError
(fuseopt/base/unsupported.py)."""
from .base.unsupported import refuse

refuse(__name__, "MXNet binding (Apache MXNet was retired in 2023)",
       "Use fuseopt.torch or fuseopt.tensorflow")
