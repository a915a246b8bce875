"""Which hosts an elastic job may use: Horovod's host discovery script (it
prints ``host:slots`` lines, or bare host names with --slots-per-host), the
hosts lost so far, and how many ranks go where."""
import subprocess

from .. import hosts as _hosts

DISCOVERY_TIMEOUT_S = 30.0


class DiscoveryError(_hosts.HostError):
    """The discovery script failed or printed something that is not a host list."""


def parse(text, slots_per_host=None, where="--host-discovery-script"):
    """[(host, slots)] from the script's output, in its order. A line
    without slots takes ``slots_per_host`` (an error when that is None)."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, colon, slots = line.partition(":")
        place = "%s output line %d (%r)" % (where, number, line)
        if not colon:
            if slots_per_host is None:
                raise DiscoveryError("%s: no slots; print host:slots, or pass --slots-per-host"
                                     % place)
            slots = str(slots_per_host)
        try:
            found.append((_hosts._name(name, place), _hosts._slots(slots, place)))
        except _hosts.HostError as e:
            raise DiscoveryError(str(e)) from None
    names = [h for h, _ in found]
    if len(set(names)) != len(names):
        raise DiscoveryError("%s printed a host twice: %s" % (where, names))
    return found


def discover(script, slots_per_host=None, timeout=DISCOVERY_TIMEOUT_S):
    """Runs the script (through the shell, as horovodrun does) and parses it."""
    try:
        # errors="replace": bytes that are not text become a parse error
        # naming the line, not a traceback of the driver
        p = subprocess.run(script, shell=True, capture_output=True, text=True, timeout=timeout,
                           errors="replace")
    except subprocess.TimeoutExpired:
        raise DiscoveryError("--host-discovery-script %s did not finish within %.0f s"
                             % (script, timeout)) from None
    except OSError as e:  # the shell itself could not start
        raise DiscoveryError("--host-discovery-script %s could not run: %s"
                             % (script, e)) from None
    if p.returncode != 0:
        raise DiscoveryError("--host-discovery-script %s exited with %d: %s"
                             % (script, p.returncode, p.stderr.strip()[-500:]))
    return parse(p.stdout, slots_per_host)


def usable(found, blacklist):
    """The discovered hosts that have not been lost."""
    return [(h, n) for h, n in found if h not in blacklist]


def plan(found, max_np=None, np_=None):
    """[(host, ranks)] for the next job: hosts filled in order up to
    ``np_`` (the first job's -np) or ``max_np`` ranks, or every slot."""
    want = sum(n for _, n in found)
    for limit in (max_np, np_):
        if limit is not None:
            want = min(want, limit)
    placed = []
    for host, slots in found:
        if want <= 0:
            break
        take = min(slots, want)
        placed.append((host, take))
        want -= take
    return placed


def host_of_rank(placement, rank):
    """The host a rank of ``placement`` runs on (Hydra fills hosts in order)."""
    for host, n in placement:
        if rank < n:
            return host
        rank -= n
    return None


def describe(placement):
    return ",".join("%s:%d" % h for h in placement) or "(none)"
