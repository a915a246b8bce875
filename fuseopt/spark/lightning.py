"""Horovod's horovod.spark.lightning (the Spark Estimators): not in fuseopt; importing
this raises UnsupportedError. docs/migration.md says what to use."""
from ..base.unsupported import refuse

refuse(__name__, "Spark Estimators (horovod.spark.lightning)",
       "Train inside fuseopt.spark.run (a function that reads its shard and trains with "
       "fuseopt.torch or fuseopt.tensorflow.keras) instead")
