"""fuseopt's compiled TensorFlow kernel and its cache (fuseopt/tensorflow/kernels):
a corrupt library built again, unsafe files refused, a failing compiler a
warning after which collectives still work; then tf_ops.py's checks at one
rank, through the kernel built here. A library loads into a process once, so
the first check must be the first load; FUSEOPT_CACHE_DIR is the test's own
directory, never the user's cache."""
import os
import tempfile
import warnings

import tensorflow as tf

import rank_harness as harness
from tf_common import close, hvd
from fuseopt.tensorflow import kernels


def _private_dir():
    path = tempfile.mkdtemp(prefix="fuseopt-kernels-")
    os.chmod(path, 0o700)
    return path


def check_a_corrupt_library_is_built_again_and_loads():
    # through `fuseopt build-tf-kernel`, the way to build it ahead of a job
    from fuseopt.tools import command
    library = kernels.library_path(kernels.cache_dir())
    os.makedirs(os.path.dirname(library), mode=0o700)
    with open(library, "wb") as f:
        f.write(b"\x7fELF truncated")
    os.chmod(library, 0o700)
    assert command.main(["build-tf-kernel"]) == 0
    module = kernels.build_and_load()
    assert os.path.getsize(library) > 10000, os.path.getsize(library)
    values = module.fuseopt_check_status(0, "", [tf.constant([1.0, 2.0]), tf.constant(3)])
    close(values[0], [1.0, 2.0], "forwarded values")
    assert int(values[1]) == 3
    harness.expect_error(tf.errors.FailedPreconditionError,
                         lambda: module.fuseopt_check_status(
                             tf.errors.FAILED_PRECONDITION, "MismatchError: ranks disagree",
                             [tf.constant(1.0)]), "MismatchError: ranks disagree")
    harness.expect_error(tf.errors.AbortedError, lambda: module.fuseopt_check_status(
        tf.errors.ABORTED, "gone", []), "gone")


def check_unusable_caches_are_refused_not_loaded():
    # a cache that cannot be created (here under a plain file: root may
    # write anywhere, so no permission bit would stop this test's user)
    not_a_dir = os.path.join(tempfile.mkstemp()[1], "cache")
    harness.expect_error(kernels.KernelBuildError, lambda: kernels.build_and_load(not_a_dir),
                         "cannot be used", not_a_dir)
    open_dir = _private_dir()
    os.chmod(open_dir, 0o777)
    harness.expect_error(kernels.KernelBuildError, lambda: kernels.build_and_load(open_dir),
                         open_dir, "other users")
    directory = _private_dir()
    library = kernels.library_path(directory)
    with open(library, "wb") as f:
        f.write(b"planted")
    os.chmod(library, 0o666)
    harness.expect_error(kernels.KernelBuildError, lambda: kernels.build_and_load(directory),
                         library, "other users")
    with open(library, "rb") as f:
        assert f.read() == b"planted"  # refused, neither loaded nor replaced


def check_a_failing_compiler_is_a_warning_and_collectives_still_run():
    saved = dict(os.environ)
    os.environ.update(CXX="false", FUSEOPT_CACHE_DIR=_private_dir())
    kernels._tried, kernels._module = False, None
    try:
        harness.expect_error(kernels.KernelBuildError,
                             lambda: kernels.build_and_load(kernels.cache_dir()),
                             "the compiler failed")
        from fuseopt.tools import command
        assert command.main(["build-tf-kernel"]) == 1
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert kernels.status_module() is None

            @tf.function
            def total(x):
                return hvd.allreduce(x, op=hvd.Sum, name="kernel.fallback")

            close(total(tf.constant([1.0, 2.0])), [1.0, 2.0], "allreduce without the kernel")
        text = " ".join(str(w.message) for w in caught)
        assert "the compiler failed" in text and "FUSEOPT_TF_KERNELS=0" in text, text
    finally:
        os.environ.clear()
        os.environ.update(saved)
        kernels._tried, kernels._module = False, None


def check_the_switch_turns_the_kernel_off():
    os.environ["FUSEOPT_TF_KERNELS"] = "0"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # off is quiet
            assert kernels.status_module() is None
    finally:
        del os.environ["FUSEOPT_TF_KERNELS"]
        kernels._tried, kernels._module = False, None


if __name__ == "__main__":
    assert os.environ.get("FUSEOPT_CACHE_DIR"), "give it a cache of its own (FUSEOPT_CACHE_DIR)"
    import tf_ops
    harness.run([check_a_corrupt_library_is_built_again_and_loads,
                 check_unusable_caches_are_refused_not_loaded,
                 check_a_failing_compiler_is_a_warning_and_collectives_still_run,
                 check_the_switch_turns_the_kernel_off] + tf_ops.CHECKS)
