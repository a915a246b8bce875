"""The 2-rank TensorFlow workers whose checks can share a process (tf_ops,
tf_module, tf_keras_behaviours, tf_sync_batch_norm) in one job: one TensorFlow start per rank
instead of three. tests/test_tensorflow.py reads which module's checks
passed. (tf_training.py runs on its own: it sets Keras's float type to
float64 for the whole process.)"""
import rank_harness as harness
import tf_keras_behaviours
import tf_module
import tf_ops
import tf_sync_batch_norm

if __name__ == "__main__":
    harness.run(tf_ops.CHECKS + tf_module.CHECKS + tf_keras_behaviours.CHECKS +
                tf_sync_batch_norm.CHECKS)
