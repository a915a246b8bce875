"""TensorFlow / Keras 3 binding at 1, 2 and 4 ranks: ops eager and in
tf.function with gradients (tests/workers/tf_ops.py); fit and custom loops
equal to single-process training, accumulation, compression, IndexedSlices,
loss scaling and mixed precision, callbacks, local SGD, save/load,
jit_compile error, SyncBatchNormalization (tests/workers/tf_training.py); the plain
module's Horovod-only pieces (sparse grouped allreduce, object broadcasts,
local sources, hvd.elastic states: tests/workers/tf_module.py); what Horovod's Keras
tests promise, on Keras 3 (tests/workers/tf_keras_behaviours.py), and of the plain
module's collectives (tests/workers/tf_collective_behaviours.py).
Each worker imports TensorFlow once and runs all its checks."""
from conftest import launch


def test_tf_ops(run_ranks):
    run_ranks(2, "tf_ops.py", timeout=240)


def test_compiled_kernel_its_cache_and_the_ops_at_one_rank(tmp_path):
    # tf_ops.py's checks at one rank run in the same worker (one TensorFlow
    # import less), after the kernel checks that must load first.
    launch(1, "tf_kernel_cache.py", timeout=240, env={"FUSEOPT_CACHE_DIR": str(tmp_path)})


def test_keras_training(run_ranks):
    run_ranks(2, "tf_training.py", timeout=600)


# At 4 ranks (two per core here), the checks whose outcome depends on the
# rank count: one process on the concatenated batch, accumulation, the custom
# loop, compression tolerances and uneven SyncBatchNormalization batches. The
# others (callbacks, save/load, loss scaling, ...) ran at 2 ranks above; this
# halves the run (57 s for every check at 4 ranks).
RANK_COUNT_CHECKS = ("check_fit_equals_single_process_sgd_adam",
                     "check_accumulation_equals_concatenated_batch",
                     "check_custom_loop_tape_and_apply_gradients",
                     "check_compression_and_sparse_gradients",
                     "check_sync_batch_normalization_uneven_batches",
                     "check_sync_batch_normalization_in_fit")


def test_keras_training_at_4_ranks(run_ranks):
    run_ranks(4, "tf_training.py", *RANK_COUNT_CHECKS, timeout=600)


def test_tf_module_as_horovods(run_ranks):
    run_ranks(2, "tf_module.py", timeout=240)


def test_keras_behaviours_horovod_promises(run_ranks):
    run_ranks(2, "tf_keras_behaviours.py", timeout=300)


def test_collective_behaviours_horovod_promises(run_ranks):
    # 4 ranks: uneven splits, rows and every root differ from 2's (and the
    # suite's time stays under its budget with one size).
    run_ranks(4, "tf_collective_behaviours.py", timeout=300)
