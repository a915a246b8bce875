"""TensorFlow / Keras 3 binding at 1, 2 and 4 ranks: ops eager and in
tf.function with gradients (tests/workers/tf_ops.py); fit and custom loops
equal to single-process training, accumulation, compression, IndexedSlices,
loss scaling and mixed precision, callbacks, local SGD, save/load,
jit_compile error, SyncBatchNormalization (tests/workers/tf_training.py); the plain
module's Horovod-only pieces (sparse grouped allreduce, object broadcasts,
local sources, hvd.elastic states: tests/workers/tf_module.py); what Horovod's Keras
tests promise, on Keras 3 (tests/workers/tf_keras_behaviours.py), and of the plain
module's collectives (tests/workers/tf_collective_behaviours.py); fuseopt's
compiled kernel and its cache (tests/workers/tf_kernel_cache.py).
Each worker imports TensorFlow once and runs all its checks; the 2-rank
workers that can share a process run as one job (tf_two_ranks.py)."""
import ast
import os
import re

import pytest

from conftest import WORKERS, launch


@pytest.fixture(scope="module")
def two_rank_job():
    """tf_ops, tf_module, tf_keras_behaviours and tf_sync_batch_norm in one 2-rank job."""
    job = launch(2, "tf_two_ranks.py", timeout=600, expect_ok=False)
    assert job.code == 0 or "FAIL " in job.output, job.output  # a failure names its check
    return job.output


def assert_checks_passed(output, module):
    """Every check in the worker module's CHECKS list reported success on
    rank 0, and none failed on any rank (the harness prints both)."""
    with open(os.path.join(WORKERS, module + ".py")) as f:
        tree = ast.parse(f.read())
    names = next([e.id for e in node.value.elts] for node in tree.body
                 if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "CHECKS")
    failed = [n for n in names if "FAIL %s\n" % n in output or "[rank 0] %s: " % n not in output]
    assert not failed, "%s: %s did not pass\n%s" % (module, failed, output)
    # Both ranks reached the end (a crash at shutdown is not a pass).
    assert all(re.search(r"\[rank %d\] \d+ checks, \d+ failed" % r, output) for r in (0, 1)), \
        output


def test_tf_ops(two_rank_job):
    assert_checks_passed(two_rank_job, "tf_ops")


def test_compiled_kernel_its_cache_and_the_ops_at_one_rank(tmp_path):
    # tf_ops.py's checks at one rank run in the same worker (one TensorFlow
    # import less), after the kernel checks that must load first.
    launch(1, "tf_kernel_cache.py", timeout=240, env={"FUSEOPT_CACHE_DIR": str(tmp_path)})


def test_keras_training(run_ranks):
    run_ranks(2, "tf_training.py", timeout=600)


# At 3 ranks (more ranks than cores, and a count whose averages are not exact
# divisions), the checks whose outcome depends on the rank count: one process
# on the concatenated batch, accumulation, the custom loop, compression
# tolerances and uneven SyncBatchNormalization batches. The others
# (callbacks, save/load, loss scaling, ...) ran at 2 ranks above.
RANK_COUNT_CHECKS = ("check_fit_with_a_bucket_per_gradient",
                     "check_accumulation_equals_concatenated_batch",
                     "check_custom_loop_tape_and_apply_gradients",
                     "check_compression_and_sparse_gradients",
                     "check_sync_batch_normalization_uneven_batches",
                     "check_sync_batch_normalization_in_fit",
                     "check_sharded_optimizer_state_and_weights")


def test_keras_training_at_3_ranks(run_ranks):
    run_ranks(3, "tf_training.py", *RANK_COUNT_CHECKS, timeout=600)


def test_tf_module_as_horovods(two_rank_job):
    assert_checks_passed(two_rank_job, "tf_module")


def test_keras_behaviours_horovod_promises(two_rank_job):
    assert_checks_passed(two_rank_job, "tf_keras_behaviours")


def test_sync_batch_normalization_op_and_fallback(two_rank_job):
    assert_checks_passed(two_rank_job, "tf_sync_batch_norm")


def test_collective_behaviours_horovod_promises(run_ranks):
    # 4 ranks: uneven splits, rows and every root differ from 2's (and the
    # suite's time stays under its budget with one size).
    run_ranks(4, "tf_collective_behaviours.py", timeout=300)
