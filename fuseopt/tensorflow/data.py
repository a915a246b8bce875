"""Horovod's horovod.tensorflow.data (the tf.data service compute_service):
not in fuseopt; importing this raises UnsupportedError
(fuseopt/base/unsupported.py)."""
from ..base.unsupported import refuse

refuse(__name__, "tf.data service integration (horovod.tensorflow.data.compute_service: "
       "TfDataServiceConfig, tf_data_service)",
       "Read each rank's shard with tf.data directly (dataset.shard(hvd.size(), hvd.rank()))")
