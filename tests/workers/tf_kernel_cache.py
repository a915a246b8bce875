"""fuseopt's compiled TensorFlow kernel and its cache (fuseopt/tensorflow/kernels):
a corrupt library built again, unsafe files refused, a failing compiler a
warning after which collectives still work; then tf_ops.py's checks at one
rank, through the kernel built here. A library loads into a process once, so
the checks that load nothing come first; FUSEOPT_CACHE_DIR is the test's own
directory, never the user's cache."""
import logging
import os
import shutil
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
    # A second copy of the library would break the first: refused, kept.
    other = _private_dir()
    copy = kernels.library_path(other)
    shutil.copy(library, copy)
    harness.expect_error(kernels.KernelUnavailable, lambda: kernels.build_and_load(other),
                         "already loaded the kernel from " + library)
    assert os.path.exists(copy)
    empty = _private_dir()  # nor built for nothing
    harness.expect_error(kernels.KernelUnavailable, lambda: kernels.build_and_load(empty),
                         "already loaded")
    assert os.listdir(empty) == [], os.listdir(empty)
    close(module.fuseopt_check_status(0, "", [tf.constant(2.0)])[0], 2.0, "first copy still runs")


def check_nested_tapes_through_a_traced_collective():
    # The op has no gradient of its own, like the tf.numpy_function before
    # it: a second-order tape through a collective gives what it gave
    # without the kernel instead of "no gradient registered".
    @tf.function
    def second_order(x):
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                y = tf.reduce_sum(hvd.allreduce(x * x, name="kernel.nested"))
            first = inner.gradient(y, x)
        return first, outer.gradient(first, x)

    first, second = second_order(tf.constant([1.0, 3.0]))
    close(first, [2.0, 6.0], "first-order gradient through the kernel")
    assert kernels.status_kernel() is not None
    # The same computation without the kernel (the tf.numpy_function alone):
    # what the kernel must not change, including the second order.
    kernels._kernel, loaded = None, kernels._kernel
    try:
        first_off, second_off = tf.function(second_order.python_function)(
            tf.constant([1.0, 3.0]))
    finally:
        kernels._kernel = loaded
    close(first, first_off, "first order with and without the kernel", 0)
    close(second, second_off, "second order with and without the kernel", 0)


def check_unusable_caches_are_refused_not_loaded():
    # a cache that cannot be created (here under a plain file: root may
    # write anywhere, so no permission bit would stop this test's user)
    not_a_dir = os.path.join(tempfile.mkstemp()[1], "cache")
    harness.expect_error(kernels.KernelUnavailable, lambda: kernels.build_and_load(not_a_dir),
                         "cannot be used", not_a_dir)
    open_dir = _private_dir()
    os.chmod(open_dir, 0o777)
    harness.expect_error(kernels.KernelUnavailable, lambda: kernels.build_and_load(open_dir),
                         open_dir, "other users")
    shared_parent = _private_dir()
    os.chmod(shared_parent, 0o777)  # writable by all, not sticky: the child could be swapped
    inside = os.path.join(shared_parent, "cache")
    harness.expect_error(kernels.KernelUnavailable, lambda: kernels.build_and_load(inside),
                         shared_parent + " may be written by other users")
    directory = _private_dir()
    library = kernels.library_path(directory)
    with open(library, "wb") as f:
        f.write(b"planted")
    os.chmod(library, 0o666)
    harness.expect_error(kernels.KernelUnavailable, lambda: kernels.build_and_load(directory),
                         library, "other users")
    with open(library, "rb") as f:
        assert f.read() == b"planted"  # refused, neither loaded nor replaced


def check_a_cache_component_swapped_for_a_link_is_refused():
    """Issue 48, finding 6: the walk up the path used os.stat on the path as
    given, and dlopen resolved it again later. A component that is a link
    to a directory others may write is judged by its target; the library
    file itself as a link to such a place is refused; and the check-then-
    load race is closed by loading the very fd that was checked."""
    home = _private_dir()
    attacker = _private_dir()
    os.chmod(attacker, 0o777)  # the attacker's: anyone may write, not sticky
    link = os.path.join(home, "cache")
    os.symlink(attacker, link)
    harness.expect_error(kernels.KernelUnavailable,
                         lambda: kernels.build_and_load(os.path.join(link, "kernels")),
                         attacker, "other users")
    directory = _private_dir()
    planted = os.path.join(attacker, "evil.so")
    with open(planted, "wb") as f:
        f.write(b"planted")
    os.symlink(planted, kernels.library_path(directory))
    harness.expect_error(kernels.KernelUnavailable, lambda: kernels.build_and_load(directory),
                         attacker, "other users")
    # A link swapped in between resolving the path and opening it: the walk
    # opens every component with O_NOFOLLOW.
    real_realpath = kernels.os.path.realpath
    kernels.os.path.realpath = lambda p: p  # as if resolved before the swap
    try:
        harness.expect_error(kernels.KernelUnavailable,
                             lambda: kernels._open_checked(os.path.join(link, "x"), True),
                             link, "without following a link")
    finally:
        kernels.os.path.realpath = real_realpath


def check_a_cache_of_another_user_is_refused():
    # Root is trusted (container images), so as root the directory is given
    # to nobody (uid 65534); as anyone else it is this user's, and the check
    # is made to see another user (getuid patched).
    directory = _private_dir()
    real_getuid = kernels.os.getuid
    if real_getuid() == 0:
        os.chown(directory, 65534, -1)
        owner = 65534
    else:
        owner = real_getuid()
        kernels.os.getuid = lambda: owner + 1
    try:
        harness.expect_error(kernels.KernelUnavailable, lambda: kernels.build_and_load(directory),
                             directory, "belongs to uid %d" % owner, "neither this user")
    finally:
        kernels.os.getuid = real_getuid


def check_a_slow_compiler_times_out_and_leaves_nothing():
    # The build at trace time has a limit (peers wait in a collective
    # meanwhile): a compiler past it is stopped, and its partial output goes.
    saved, limit = dict(os.environ), kernels.TRACE_BUILD_TIMEOUT_S
    cache = _private_dir()
    compiler = os.path.join(cache, "slow-compiler.sh")
    with open(compiler, "w") as f:
        f.write('while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out="$2"; shift; done\n'
                'echo partial > "$out"; exec sleep 30\n')
    os.environ["CXX"] = "sh " + compiler
    kernels.TRACE_BUILD_TIMEOUT_S = 1
    try:
        directory = os.path.join(cache, "kernels")
        harness.expect_error(kernels.KernelUnavailable, lambda: kernels.build_and_load(directory),
                             "the compiler did not finish", "timed out after 1")
        left = [name for name in os.listdir(directory) if name.endswith(".tmp")]
        assert not left, left
    finally:
        os.environ.clear()
        os.environ.update(saved)
        kernels.TRACE_BUILD_TIMEOUT_S = limit


def check_a_failing_compiler_is_a_warning_and_collectives_still_run():
    saved = dict(os.environ)
    cache = _private_dir()
    runs = os.path.join(cache, "compiler-runs")
    compiler = os.path.join(cache, "failing-compiler.sh")
    with open(compiler, "w") as f:
        f.write('echo run >> "%s"; echo "no such header" >&2; exit 1\n' % runs)
    os.environ.update(CXX="sh " + compiler, FUSEOPT_CACHE_DIR=cache)
    kernels._tried, kernels._kernel = False, None
    try:
        harness.expect_error(kernels.KernelUnavailable,
                             lambda: kernels.build_and_load(kernels.cache_dir()),
                             "the compiler failed", "no such header")
        # Not tried again by every process (a slow or broken build would
        # cost each one its time) until the command that builds ahead does.
        harness.expect_error(kernels.KernelUnavailable,
                             lambda: kernels.build_and_load(kernels.cache_dir()),
                             "an earlier build failed", "build-tf-kernel", "no such header")
        from fuseopt.tools import command
        assert command.main(["build-tf-kernel"]) == 1
        with open(runs) as f:
            assert f.read().split() == ["run", "run"]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")

            @tf.function
            def total(x):
                return hvd.allreduce(x, op=hvd.Sum, name="kernel.fallback")

            # The kernel is first asked for while this traces: AutoGraph must
            # leave fuseopt's cache and compiler calls alone (it warned about
            # each of them).
            records = []
            handler = logging.Handler()
            handler.emit = records.append
            logging.getLogger("tensorflow").addHandler(handler)
            try:
                close(total(tf.constant([1.0, 2.0])), [1.0, 2.0], "allreduce without the kernel")
            finally:
                logging.getLogger("tensorflow").removeHandler(handler)
            converted = [r.getMessage() for r in records if "AutoGraph" in r.getMessage()]
            assert not converted, converted
            assert kernels.status_kernel() is None
        text = " ".join(str(w.message) for w in caught)
        assert "the compiler failed" in text and "FUSEOPT_TF_KERNELS=0" in text, text
    finally:
        os.environ.clear()
        os.environ.update(saved)
        kernels._tried, kernels._kernel = False, None


def check_the_switch_turns_the_kernel_off():
    os.environ["FUSEOPT_TF_KERNELS"] = "0"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # off is quiet
            assert kernels.status_kernel() is None
    finally:
        del os.environ["FUSEOPT_TF_KERNELS"]
        kernels._tried, kernels._kernel = False, None


if __name__ == "__main__":
    assert os.environ.get("FUSEOPT_CACHE_DIR"), "give it a cache of its own (FUSEOPT_CACHE_DIR)"
    import tf_ops
    # Nothing is loaded before the corrupt-library check; after it, a
    # process refuses every other copy.
    harness.run([check_unusable_caches_are_refused_not_loaded,
                 check_a_cache_of_another_user_is_refused,
                 check_a_cache_component_swapped_for_a_link_is_refused,
                 check_a_slow_compiler_times_out_and_leaves_nothing,
                 check_a_failing_compiler_is_a_warning_and_collectives_still_run,
                 check_the_switch_turns_the_kernel_off,
                 check_a_corrupt_library_is_built_again_and_loads,
                 check_nested_tapes_through_a_traced_collective] + tf_ops.CHECKS)
