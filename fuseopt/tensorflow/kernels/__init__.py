"""TensorFlow kernels of fuseopt's own, compiled on first use against the
TensorFlow that is installed.

fuseopt ships no TensorFlow binary: a kernel built for one TensorFlow does
not load into another, and ``pip install fuseopt`` must not depend on which
TensorFlow comes later. The first traced collective builds the kernel with
``$CXX`` (default ``g++``; about 6 s here) into a per-user cache keyed by
the source, the TensorFlow version and its compile flags; every later
process loads it from there. ``fuseopt build-tf-kernel`` builds it ahead of
a job. When it cannot be had (no compiler, no TensorFlow headers, an unsafe
or read-only cache) fuseopt warns once and works without it: only the
TensorFlow class of an error raised inside a traced graph changes (see
``tf_errors``). A build that failed is not tried again by every process: a
``.failed`` file next to the library says why, until the next
``fuseopt build-tf-kernel``.

A library is loaded only from a file owned by this user (or root) that
nobody else may write, in a directory whose every ancestor is owned by this
user or root and writable by no one else (or sticky, as /tmp): a library
another user could have planted or swapped is never loaded.

Knobs: ``FUSEOPT_TF_KERNELS=0`` never builds nor loads them;
``FUSEOPT_CACHE_DIR`` moves the cache (default
``$XDG_CACHE_HOME/fuseopt``, else ``~/.cache/fuseopt``).
"""
import fcntl
import hashlib
import os
import shlex
import stat
import subprocess
import threading
import warnings

import tensorflow as tf
from tensorflow.python.framework import op_def_registry

from ...base.private_dir import user_cache

OP = "FuseoptCheckStatus"
_HERE = os.path.dirname(os.path.abspath(__file__))
# status_op.cc: errors of traced collectives; batch_norm_op.cc:
# SyncBatchNormalization's passes, which include the core's public header.
# Both are written against TensorFlow's C API (c_api_helpers.h says why).
SOURCES = [os.path.join(_HERE, name) for name in ("status_op.cc", "batch_norm_op.cc")]
HEADERS = [os.path.join(_HERE, "c_api_helpers.h")]


def header_dir():
    """Where fuseopt/fuseopt.h is: in the installed package (setup.py copies
    it there) or, in a source checkout, native/include."""
    package = os.path.dirname(os.path.dirname(_HERE))
    for d in (os.path.join(package, "include"),
              os.path.join(os.path.dirname(package), "native", "include")):
        if os.path.exists(os.path.join(d, "fuseopt", "fuseopt.h")):
            return d
    raise KernelUnavailable("fuseopt/fuseopt.h is in neither %s/include nor the source tree"
                            % package)
# A build at a collective's first trace stays well inside the peer timeout
# (30 s by default) that ranks already waiting in a collective apply;
# `fuseopt build-tf-kernel` waits longer.
TRACE_BUILD_TIMEOUT_S = 20
AHEAD_BUILD_TIMEOUT_S = 600
_lock = threading.Lock()
_loaded = {}  # library path -> module: a process loads its kernel once
_kernel = None
_tried = False

# The op forwards its values unchanged and, like the tf.numpy_function that
# feeds it, has no gradient of its own: the collectives define theirs.
tf.no_gradient(OP)


class KernelUnavailable(RuntimeError):
    """Why the kernel cannot be built or loaded (it becomes a warning)."""


def cache_dir():
    return user_cache("tf-kernels")


def _build_command(output):
    compiler = shlex.split(os.environ.get("CXX") or "g++")
    return (compiler + ["-shared", "-fPIC", "-O2", "-w"] + SOURCES + ["-o", output,
                                                                     "-I" + header_dir()]
            + tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags())


def library_path(directory):
    """The library's file: its name changes with anything that changes the
    binary, so a new TensorFlow or a new kernel source never loads an old one."""
    key = hashlib.sha256()
    for source in SOURCES + HEADERS + [os.path.join(header_dir(), "fuseopt", "fuseopt.h")]:
        with open(source, "rb") as f:
            key.update(f.read())
    key.update(tf.__version__.encode())
    key.update(" ".join(_build_command("")).encode())
    return os.path.join(directory, "status_op-%s.so" % key.hexdigest()[:16])


def _check_opened(fd, where):
    """Raises unless what ``fd`` holds belongs to this user or root and
    nobody else may write it (a sticky directory, as /tmp, may be shared:
    others cannot rename what is ours in it)."""
    info = os.fstat(fd)
    if info.st_uid not in (os.getuid(), 0):
        raise KernelUnavailable("%s belongs to uid %d, neither this user (uid %d) nor root"
                                % (where, info.st_uid, os.getuid()))
    shared = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if shared and not (stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX):
        raise KernelUnavailable("%s may be written by other users; fuseopt loads kernels "
                                "only from files and directories nobody else may write" % where)


def _open_checked(path, directory):
    """An fd of ``path``, reached from / one component at a time, each opened
    with O_NOFOLLOW and checked on what was opened (_check_opened): what is
    checked is what is used. Links that exist now are resolved first (and
    their targets checked); one swapped in during the walk fails it."""
    parts = [p for p in os.path.realpath(path).split(os.sep) if p]
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _check_opened(fd, "/")
        for i, part in enumerate(parts):
            where = "/" + "/".join(parts[:i + 1])
            kind = os.O_DIRECTORY if directory or i < len(parts) - 1 else 0
            try:
                child = os.open(part, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | kind, dir_fd=fd)
            except OSError as e:
                raise KernelUnavailable("%s cannot be opened without following a link: %s "
                                        "(was it swapped for one?)" % (where, e.strerror)) from None
            os.close(fd)
            fd = child
            _check_opened(fd, where)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _check_safe(path):
    os.close(_open_checked(path, directory=True))


def _compile(path, timeout):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    command = _build_command(tmp)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-5:])
            raise KernelUnavailable("the compiler failed (%s):\n%s"
                                    % (shlex.join(command[:2]), tail))
        os.chmod(tmp, 0o700)
        os.replace(tmp, path)  # atomic: a reader sees the old file or the whole new one
    except (OSError, subprocess.TimeoutExpired) as e:
        raise KernelUnavailable("the compiler did not finish: %s" % e) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _refuse_a_second_copy(path):
    # A second library registering the same kernel would break the first.
    if path not in _loaded and op_def_registry.get(OP) is not None:
        raise KernelUnavailable("this process already loaded the kernel from %s"
                                % (", ".join(_loaded) or "another file"))


def _load(path):
    """Loads the library through the fd that was checked (/proc/self/fd),
    so that a file swapped in after the check is never the one loaded."""
    if path in _loaded:
        return _loaded[path]
    fd = _open_checked(path, directory=False)
    try:
        _loaded[path] = tf.load_op_library("/proc/self/fd/%d" % fd)
    except (tf.errors.OpError, OSError) as e:
        raise KernelUnavailable("%s did not load: %s" % (path, e)) from None
    finally:
        os.close(fd)
    return _loaded[path]


def build_and_load(directory=None, ahead=False):
    """The loaded kernel module, built into ``directory`` if needed. Ranks
    that start together take turns on a lock file, so one of them compiles
    and the others load its result. ``ahead``: `fuseopt build-tf-kernel`,
    which tries again after a failed build and may take longer."""
    directory = directory or cache_dir()
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        _check_safe(directory)
        path = library_path(directory)
        _refuse_a_second_copy(path)
        failed = path + ".failed"
        with open(path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if os.path.exists(path):
                os.close(_open_checked(path, directory=False))  # unsafe: refused, kept
                try:
                    return _load(path)
                except KernelUnavailable:
                    os.unlink(path)  # a truncated or stale file: build it again
            if os.path.exists(failed) and not ahead:
                with open(failed) as f:
                    raise KernelUnavailable("an earlier build failed (%s; `fuseopt "
                                            "build-tf-kernel` tries again):\n%s"
                                            % (failed, f.read()))
            try:
                _compile(path, AHEAD_BUILD_TIMEOUT_S if ahead else TRACE_BUILD_TIMEOUT_S)
                module = _load(path)
            except KernelUnavailable as e:
                with open(failed, "w") as f:
                    f.write(str(e))
                raise
            if os.path.exists(failed):
                os.unlink(failed)
            return module
    except OSError as e:  # a read-only or vanished cache, a full disk
        raise KernelUnavailable("the cache %s cannot be used: %s" % (directory, e)) from None


# Called while a tf.function is traced: AutoGraph would otherwise try to
# convert the cache and compiler calls and warn about each.
@tf.autograph.experimental.do_not_convert
def status_kernel():
    """The kernel module, or None when the kernel is off or cannot be had
    (warned once per process)."""
    global _kernel, _tried
    with _lock:
        if not _tried:
            _tried = True
            if os.environ.get("FUSEOPT_TF_KERNELS", "1") != "0":
                try:
                    _kernel = build_and_load()
                except KernelUnavailable as e:
                    warnings.warn(
                        "fuseopt cannot use its TensorFlow kernel (%s). Collectives work as "
                        "before; an error inside a traced graph arrives as "
                        "tf.errors.UnknownError instead of Horovod's class. Set "
                        "FUSEOPT_TF_KERNELS=0 to silence this." % e, RuntimeWarning,
                        stacklevel=3)
        return _kernel
