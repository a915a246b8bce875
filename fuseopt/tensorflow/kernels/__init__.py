"""TensorFlow kernels of fuseopt's own, compiled on first use against the
TensorFlow that is installed.

fuseopt ships no TensorFlow binary: a kernel built for one TensorFlow does
not load into another, and ``pip install fuseopt`` must not depend on which
TensorFlow comes later. The first traced collective builds the kernel with
the compiler that built fuseopt's core (about 6 s), into a per-user cache
keyed by the source, the TensorFlow version and its compile flags; every
later process loads it from there. When it cannot be built (no compiler,
no TensorFlow headers, a read-only cache) fuseopt warns once and works
without it: only the TensorFlow class of an error raised inside a traced
graph changes (see ``tf_errors``).

The cache is a directory of the user's own (0700) and a library is loaded
only from a directory and a file that the user owns and nobody else may
write: a library planted by another user is never loaded, and one that
fails to load is built again.

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

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "status_op.cc")
BUILD_TIMEOUT_S = 600
_lock = threading.Lock()
_module = None
_tried = False


class KernelBuildError(RuntimeError):
    """Why the kernels could not be built or loaded (it becomes a warning)."""


def cache_dir():
    root = os.environ.get("FUSEOPT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "fuseopt")
    return os.path.join(root, "tf-kernels")


def _build_command(output):
    compiler = shlex.split(os.environ.get("CXX") or "g++")
    return (compiler + ["-shared", "-fPIC", "-O2", "-w", SOURCE, "-o", output]
            + tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags())


def library_path(directory):
    """The library's file: its name changes with anything that changes the
    binary, so a new TensorFlow or a new kernel source never loads an old one."""
    with open(SOURCE, "rb") as f:
        key = hashlib.sha256(f.read())
    key.update(tf.__version__.encode())
    key.update(" ".join(_build_command("")).encode())
    return os.path.join(directory, "status_op-%s.so" % key.hexdigest()[:16])


def _check_private(path):
    """Raises unless ``path`` belongs to this user and nobody else may write it."""
    info = os.stat(path)
    if info.st_uid != os.getuid():
        raise KernelBuildError("%s belongs to uid %d, not to this user (uid %d)"
                               % (path, info.st_uid, os.getuid()))
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise KernelBuildError("%s may be written by other users; fuseopt loads kernels only "
                               "from files and a directory nobody else may write" % path)


def _compile(path):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    try:
        done = subprocess.run(_build_command(tmp), capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise KernelBuildError("the compiler did not run: %s" % e) from None
    if done.returncode != 0:
        if os.path.exists(tmp):
            os.unlink(tmp)
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise KernelBuildError("the compiler failed (%s):\n%s"
                               % (shlex.join(_build_command(tmp)[:2]), tail))
    os.chmod(tmp, 0o700)
    os.replace(tmp, path)  # atomic: a reader sees the old file or the whole new one


def _load(path):
    try:
        return tf.load_op_library(path)
    except (tf.errors.OpError, OSError) as e:
        raise KernelBuildError("%s did not load: %s" % (path, e)) from None


def build_and_load(directory=None):
    """The loaded kernel module, built into ``directory`` if needed. Ranks
    that start together take turns on a lock file, so one of them compiles
    and the others load its result."""
    directory = directory or cache_dir()
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        _check_private(directory)
        path = library_path(directory)
        with open(path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if os.path.exists(path):
                _check_private(path)
                try:
                    return _load(path)
                except KernelBuildError:
                    os.unlink(path)  # a truncated or stale file: build it again
            _compile(path)
            return _load(path)
    except OSError as e:  # a read-only or vanished cache, a full disk
        raise KernelBuildError("the cache %s cannot be used: %s" % (directory, e)) from None


def status_module():
    """The kernel module, or None when the kernels are off or cannot be had
    (warned once per process)."""
    global _module, _tried
    with _lock:
        if not _tried:
            _tried = True
            if os.environ.get("FUSEOPT_TF_KERNELS", "1") != "0":
                try:
                    _module = build_and_load()
                    if not hasattr(_module, "fuseopt_check_status"):
                        _module = None  # the op came from another file loaded before
                        raise KernelBuildError("another copy of the kernel is loaded in this "
                                               "process")
                except KernelBuildError as e:
                    warnings.warn(
                        "fuseopt could not build its TensorFlow kernel (%s). Collectives work "
                        "as before; an error inside a traced graph arrives as "
                        "tf.errors.UnknownError instead of Horovod's class. Set "
                        "FUSEOPT_TF_KERNELS=0 to silence this." % e, RuntimeWarning,
                        stacklevel=3)
        return _module
