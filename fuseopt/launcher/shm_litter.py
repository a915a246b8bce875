"""Shared-memory files a job leaves behind in /dev/shm.

MPICH backs its intra-node communication (and fuseopt's shared-memory
allreduce window) with /dev/shm/mpich_shm_* files, 2 MiB and more each, and
unlinks them once every rank has attached. A job that ends abnormally (a
SIGKILL, Ctrl-C, a stall shutdown, a rank that failed before init) can leave
them behind, and on a long-lived machine they add up. fuseoptrun notes which
exist before the job and removes, after it, the new ones that no live process
still has open or mapped: another job's files are never touched."""
import glob
import os

PATTERN = "/dev/shm/mpich_shm_*"


def snapshot(pattern=PATTERN):
    return set(glob.glob(pattern))


def in_use():
    """Paths that some process of this machine has open or mapped."""
    used = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/maps" % pid) as f:
                for line in f:
                    if "/dev/shm/" in line:
                        used.add(line.split(None, 5)[-1].strip().replace(" (deleted)", ""))
            for fd in os.listdir("/proc/%s/fd" % pid):
                target = os.readlink("/proc/%s/fd/%s" % (pid, fd))
                if target.startswith("/dev/shm/"):
                    used.add(target)
        except OSError:
            continue  # gone, or not ours to read
    return used


def remove_new(before, pattern=PATTERN):
    """Removes the files matching pattern that were not in ``before`` and are
    not in use; returns their paths."""
    new = snapshot(pattern) - before
    if not new:
        return []
    removed = []
    for path in sorted(new - in_use()):
        try:
            if os.stat(path).st_uid == os.getuid():
                os.unlink(path)
                removed.append(path)
        except OSError:
            pass
    return removed
