"""Under an MPI other than the mpich wheel's (tests/test_other_mpis.py): the
library this process loaded is the one the test installed (what
`fuseopt check-build` reports, checked against /proc/self/maps) and the core
is the one built for its ABI, then the checks that matter on any MPI: every
collective of collectives.py, the torch optimizer against one process,
mismatches named on every rank; with the argument ``keras``, Keras 3 too;
with ``brief``, only the library, an allreduce of every dtype and the
optimizer (a build's smoke test: the full set runs on the default install)."""
import os
import sys

import torch

import collectives
import negotiation
import rank_harness as harness
import torch_training
from fuseopt.tools import check_build


def check_the_library_loaded_is_the_one_expected():
    found = check_build.report("x")
    mpi, core = found["mpi"], found["core"]
    with open("/proc/self/maps") as f:
        mapped = {os.path.realpath(line.split()[-1]) for line in f if "/" in line}
    assert os.path.realpath(mpi["path"]) in mapped, (mpi["path"], mapped)
    assert os.path.realpath(mpi["path"]).startswith(os.environ["EXPECTED_MPI_PREFIX"]), mpi
    assert mpi["vendor"] == os.environ["EXPECTED_MPI_VENDOR"], mpi
    assert os.path.realpath(core["file"]) in mapped, (core, mapped)
    assert core["module"] == os.environ["EXPECTED_CORE"], core
    assert not [m for m in mapped if "libmpi.so" in m and m != os.path.realpath(mpi["path"])], \
        "two MPI libraries in one process: %s" % mapped


def keras_checks():
    import tf_ops
    import tf_training
    from tf_common import keras

    def check_keras_training_equals_one_process():
        # float64, as tests/workers/tf_training.py runs them: the references
        # are then exact enough for its 1e-5.
        keras.config.set_floatx("float64")
        try:
            tf_training.check_fit_equals_single_process_sgd_adam()
            tf_training.check_custom_loop_tape_and_apply_gradients()
            tf_training.check_sync_batch_normalization_uneven_batches()
        finally:
            keras.config.set_floatx("float32")

    return [tf_ops.check_ops_eager_and_graph, tf_ops.check_errors,
            check_keras_training_equals_one_process]


if __name__ == "__main__":
    torch.set_num_threads(1)
    if "brief" in sys.argv[1:]:
        harness.run([check_the_library_loaded_is_the_one_expected,
                     collectives.check_allreduce_every_dtype_op_shape,
                     torch_training.check_equivalence_sgd_momentum_and_adam])
    harness.run([check_the_library_loaded_is_the_one_expected] + collectives.CHECKS
                + [torch_training.check_equivalence_sgd_momentum_and_adam,
                   torch_training.check_gradient_accumulation,
                   negotiation.check_mismatched_shape_dtype_op_root_kind]
                + (keras_checks() if "keras" in sys.argv[1:] else []))
