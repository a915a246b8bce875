"""Replacing a file so that readers and crashes only ever see the old or the
new contents: write a temporary file beside it, then rename it over it.
Used by checkpoints (durable) and elastic commits (not)."""
import glob
import os
import tempfile

from .private_dir import ensure_private_dir


def write_atomically(path, write, durable=True, private=False):
    """Calls ``write(file)`` on a temporary file beside ``path``, then renames
    it over ``path``. A crash or kill at any point leaves the previous file
    intact (at worst a stray temporary file, which the next successful write
    removes). ``durable`` also fsyncs the file and the rename, so that they
    survive a power cut; without it the file survives only the death of
    processes (elastic commits: fsync per commit would cost milliseconds to
    seconds per batch, and a lost machine takes its copy with it anyway).
    ``private``: the directory is a job's own (private_dir.py)."""
    directory = os.path.dirname(os.path.abspath(path))
    if private:
        ensure_private_dir(directory)
    else:
        os.makedirs(directory, exist_ok=True)
    prefix = ".%s." % os.path.basename(path)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself must survive a power cut
        finally:
            os.close(dir_fd)
    _remove_strays(directory, prefix)


def _remove_strays(directory, prefix):
    """Temporary files of writers that were killed before their rename. Only
    one process writes a given path, so none of them belongs to a live write."""
    for stray in glob.glob(os.path.join(glob.escape(directory), glob.escape(prefix) + "*.tmp")):
        try:
            os.unlink(stray)
        except OSError:
            pass
