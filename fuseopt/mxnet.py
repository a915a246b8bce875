"""Horovod's horovod.mxnet: fuseopt has no MXNet binding (Apache MXNet was
retired in 2023); importing this raises UnsupportedError
(fuseopt/_not_yet.py)."""
from ._not_yet import refuse

refuse(__name__, "MXNet binding (Apache MXNet was retired in 2023)",
       "Use fuseopt.torch or fuseopt.tensorflow")
