"""Host lists: ``-H a:2,b:4`` and hostfiles, and what runs on this machine."""
import os
import re
import socket


class HostError(ValueError):
    """A host string or hostfile fuseoptrun cannot use (its message says why)."""


def _slots(text, where):
    if not text:
        return 1
    if not text.isdigit() or int(text) < 1:
        raise HostError("%s: slots must be a positive integer, not %r" % (where, text))
    return int(text)


# Host names and addresses (RFC 1123 letters, digits, '-' and '.', plus '_'
# that some clusters use); anything else is a typo or bytes that are not text.
# Never a leading '-' or '.': the name reaches ssh and mpiexec as an
# argument, and "-oProxyCommand=..." would be read as an option.
_HOST_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")


def _name(name, where):
    if not _HOST_NAME.fullmatch(name):
        raise HostError("%s: %r is not a host name" % (where, name))
    return name


def parse_host_list(text):
    """'a:2,b' -> [('a', 2), ('b', 1)]."""
    items = [s.strip() for s in text.split(",")]
    if not any(items):
        raise HostError("-H %r names no host" % text)
    if not all(items):  # 'a:2,,b' or a trailing comma: a host left out by mistake?
        raise HostError("-H %s: empty entry between commas (expected host:slots,...)" % text)
    hosts = []
    for item in items:
        name, _, slots = item.partition(":")
        where = "-H %s" % item
        hosts.append((_name(name, where), _slots(slots, where)))
    return hosts


def parse_hostfile(path):
    """Lines 'host', 'host:4' or 'host slots=4'; '#' starts a comment."""
    hosts = []
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise HostError("--hostfile %s: %s" % (path, getattr(e, "strerror", None) or e)) from None
    for number, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        where = "--hostfile %s line %d" % (path, number)
        words = line.split()
        name, _, slots = words[0].partition(":")
        for w in words[1:]:
            if w.startswith("slots="):
                slots = w[len("slots="):]
            else:
                raise HostError("%s: unknown field %r (expected 'host slots=N')" % (where, w))
        hosts.append((_name(name, where), _slots(slots, where)))
    if not hosts:
        raise HostError("--hostfile %s names no host" % path)
    return hosts


def is_local(host):
    names = {"localhost", "127.0.0.1", "::1", socket.gethostname(), socket.getfqdn()}
    return host in names or host.split(".")[0] == socket.gethostname().split(".")[0]


def ranks_per_host(hosts, nranks):
    """How many of nranks land on each host when filled in order by slots
    (hydra's default placement), wrapping around when oversubscribed."""
    if not hosts:
        return {"localhost": nranks}
    placed = {h: 0 for h, _ in hosts}
    left = nranks
    while left > 0:
        for h, slots in hosts:
            take = min(slots, left)
            placed[h] += take
            left -= take
            if left == 0:
                break
    return placed


def local_oversubscribed(hosts, nranks, cores=None):
    """Whether more ranks than cores would run on this machine. MPICH's
    shared-memory busy polling then collapses (a 1 MiB allreduce measured
    ~1 s instead of 0.16 ms with 3-4 ranks on 2 cores)."""
    cores = cores or os.cpu_count() or 1
    local = sum(n for h, n in ranks_per_host(hosts, nranks).items() if is_local(h))
    return local > cores
