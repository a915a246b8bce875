"""Directories of one job on hosts where other users live (the launch
directory and the elastic commit store under /tmp on every host): created
0700, or, when they exist already, used only if they are this user's and
nobody else may write them. Whoever creates a name in /tmp first owns it; a directory
someone else created (or may write) could hold a planted commit or notice.
Also where this user's own cache lives (user_cache)."""
import os
import stat


class UnsafeDirectoryError(PermissionError):
    """A job directory that another user owns or may write, or a link."""


def _check(path, info, final):
    uid = os.getuid()
    if stat.S_ISLNK(info.st_mode) and final:
        raise UnsafeDirectoryError("%s is a symbolic link; a job directory must be a directory "
                                   "of its own" % path)
    if info.st_uid not in (uid, 0) or (final and info.st_uid != uid):
        raise UnsafeDirectoryError("%s belongs to uid %d, not to this user (uid %d): someone "
                                   "else created it first; remove it or choose another place"
                                   % (path, info.st_uid, uid))
    if final and info.st_mode & 0o022:
        raise UnsafeDirectoryError("%s may be written by other users (mode %o); a job "
                                   "directory must not be" % (path, stat.S_IMODE(info.st_mode)))
    if not final and info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
        raise UnsafeDirectoryError("%s may be written by other users and is not sticky: they "
                                   "could swap what is below it" % path)


def ensure_private_dir(path):
    """Creates ``path`` (and what is missing above it) with mode 0700, or
    checks the one that is there, component by component with lstat:
    every directory above belongs to this user or root and is not writable
    by others unless sticky (as /tmp); the directory itself is this user's,
    not a link, and nobody else may write it (one you made for a store to
    keep may be readable by your group). Raises UnsafeDirectoryError otherwise."""
    path = os.path.abspath(path)
    current = os.sep
    parts = [p for p in path.split(os.sep) if p]
    for i, part in enumerate(parts):
        current = os.path.join(current, part)
        final = i == len(parts) - 1
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            try:
                os.mkdir(current, 0o700)
            except FileExistsError:
                pass  # another rank of this job made it: checked below like any other
            info = os.lstat(current)
        if stat.S_ISLNK(info.st_mode) and not final:
            info = os.stat(current)  # a link above (/var -> /private/var): judge its target
        _check(current, info, final)
    return path


def user_cache(*parts):
    """A path under this user's fuseopt cache: ``FUSEOPT_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/fuseopt``, else ``~/.cache/fuseopt``."""
    root = os.environ.get("FUSEOPT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "fuseopt")
    return os.path.join(root, *parts)
