"""One process imports both bindings: one runtime, no double init, and a
torch tensor and a tf tensor reduce under names the other ranks share."""
import numpy as np
import torch

from tf_common import tf
import fuseopt
import fuseopt.tensorflow as hvd_tf
import fuseopt.torch as hvd_torch


def main():
    hvd_torch.init()
    hvd_tf.init()  # the same runtime: a no-op
    assert fuseopt.is_initialized() and hvd_tf.is_initialized()
    assert hvd_torch.rank() == hvd_tf.rank() == fuseopt.rank()
    assert hvd_torch.size() == hvd_tf.size() == fuseopt.size()
    r, n = fuseopt.rank(), fuseopt.size()
    # The same name from torch on even ranks and from TensorFlow on odd ones.
    if r % 2 == 0:
        out = hvd_torch.allreduce(torch.full((3,), float(r)), name="both.x", op=hvd_torch.Sum)
        out = out.numpy()
    else:
        out = hvd_tf.allreduce(tf.fill([3], float(r)), name="both.x", op=hvd_tf.Sum).numpy()
    assert np.allclose(out, n * (n - 1) / 2), out
    # Both bindings in the same step of one process.
    a = hvd_torch.allreduce_async(torch.ones(2), name="both.t", op=hvd_torch.Sum)
    b = hvd_tf.allreduce(tf.ones([2]), name="both.f", op=hvd_tf.Sum)
    assert np.allclose(hvd_torch.synchronize(a).numpy(), n)
    assert np.allclose(b.numpy(), n)
    hvd_tf.shutdown()
    assert not hvd_torch.is_initialized()  # one runtime: shut down for both
    print("[rank %d] both bindings ok" % r, flush=True)


if __name__ == "__main__":
    main()
