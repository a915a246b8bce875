"""Emulated hosts for multi-node MPI tests on one Linux machine (needs root).

    with EmulatedHosts(2) as emu:
        cmd = emu.wrap([mpiexec, *emu.launcher_args(), "-hosts", emu.host_list(2),
                        "-n", "4", python, "prog.py"])
        subprocess.run(cmd, check=True)

Each emulated host is a network namespace ``fo-<id>-h<i>`` whose only
interface besides ``lo`` is ``eth0`` (address ``<subnet>.<i+1>``), a veth whose
other end is a port of a bridge inside a switch namespace ``fo-<id>-sw``.
Nothing is added to the root namespace: its routes and interfaces stay as they
were, and the namespaces have no default route, so traffic to any address
outside the test subnet fails locally (ENETUNREACH) instead of leaving the box.

Every process "on" a host runs as ``ip netns exec NS unshare --uts --ipc``
with the host's own hostname. The UTS namespace makes gethostname() differ per
host; the IPC namespace is what makes UCX (the mpich wheel's default netmod)
treat ranks on other hosts as remote and use tcp/eth0 instead of its sysv/cma
shared-memory transports (UCX compares the boot id and the IPC namespace, not
the hostname or the network namespace).

mpiexec must run on host 0 (``wrap``): hydra sees host 0 as local and forks
its proxy there, and starts the others through ``launcher_args()`` (``-launcher
ssh -launcher-exec <shim> -iface eth0``), a generated script that takes ssh's argv
(``[-x] HOST COMMAND...``) and runs the command in that host's namespaces.
Hydra locality comes from the host list (PMI_process_mapping), so ranks on
different entries are on different nodes for MPICH.

Names resolve inside the namespaces through /etc/netns/<ns>/hosts (bind-mounted
over /etc/hosts by ``ip netns exec``) and an empty resolv.conf, so no DNS query
leaves the namespaces. Use host names or addresses only inside ``wrap``.

Stale state from a crashed run (namespaces, /etc/netns entries, processes
left in them) is removed on the next ``EmulatedHosts`` start: each live run
holds an flock on /run/fo-emuhosts/<id>.lock; an id whose lock is free is stale.
"""
import fcntl
import ipaddress
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import tempfile
import time

PREFIX = "fo"
LOCK_DIR = "/run/fo-emuhosts"
NETNS_ETC = "/etc/netns"
_NS_RE = re.compile(r"^%s-([0-9a-f]{6})-(sw|h\d+)$" % PREFIX)
IP = shutil.which("ip") or "/usr/sbin/ip"
TC = shutil.which("tc") or "/usr/sbin/tc"
UNSHARE = shutil.which("unshare") or "/usr/bin/unshare"


class EmulationError(RuntimeError):
    pass


def _run(argv, check=True, capture=True):
    p = subprocess.run(argv, stdout=subprocess.PIPE if capture else None,
                       stderr=subprocess.PIPE if capture else None, text=True)
    if check and p.returncode != 0:
        raise EmulationError("%s failed (%d): %s" % (" ".join(argv), p.returncode,
                                                      (p.stderr or "").strip()))
    return p


def available():
    """(ok, reason): whether this machine can run the emulation."""
    if os.geteuid() != 0:
        return False, "needs root"
    for tool in (IP, UNSHARE):
        if not os.path.exists(tool):
            return False, "%s not installed" % tool
    name = "%s-probe%d" % (PREFIX, os.getpid())
    p = _run([IP, "netns", "add", name], check=False)
    if p.returncode != 0:
        return False, "ip netns add failed: %s" % p.stderr.strip()
    _run([IP, "netns", "del", name], check=False)
    return True, ""


def list_netns():
    out = _run([IP, "-j", "netns", "list"], check=False).stdout.strip()
    try:
        return [e["name"] for e in json.loads(out or "[]")]
    except ValueError:
        return [line.split()[0] for line in out.splitlines() if line.strip()]


def _kill_netns_processes(ns):
    """SIGKILL the processes still inside one of our namespaces (by pid)."""
    pids = _run([IP, "netns", "pids", ns], check=False).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    return len(pids)


def _run_tmpdir(run_id):
    return os.path.join(tempfile.gettempdir(), "emuhosts-%s" % run_id)


def _remove_run(run_id, namespaces):
    for ns in sorted(namespaces, key=lambda n: n.endswith("-sw")):  # hosts first
        _kill_netns_processes(ns)
        _run([IP, "netns", "del", ns], check=False)
        shutil.rmtree(os.path.join(NETNS_ETC, ns), ignore_errors=True)
    for name in os.listdir(NETNS_ETC) if os.path.isdir(NETNS_ETC) else ():
        if name.startswith("%s-%s-" % (PREFIX, run_id)):
            shutil.rmtree(os.path.join(NETNS_ETC, name), ignore_errors=True)
    shutil.rmtree(_run_tmpdir(run_id), ignore_errors=True)


def cleanup_stale():
    """Removes what runs that no longer hold their lock left behind; returns their ids."""
    os.makedirs(LOCK_DIR, exist_ok=True)
    ids = {}
    for ns in list_netns():
        m = _NS_RE.match(ns)
        if m:
            ids.setdefault(m.group(1), []).append(ns)
    if os.path.isdir(NETNS_ETC):
        for name in os.listdir(NETNS_ETC):
            m = _NS_RE.match(name)
            if m:
                ids.setdefault(m.group(1), [])
    for name in os.listdir(LOCK_DIR):
        if name.endswith(".lock"):
            ids.setdefault(name[:-5], [])
    removed = []
    for run_id, namespaces in ids.items():
        lock_path = os.path.join(LOCK_DIR, run_id + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live run
            _remove_run(run_id, namespaces)
            os.unlink(lock_path)
            removed.append(run_id)
        finally:
            os.close(fd)
    return removed


class Host:
    def __init__(self, index, run_id, address, veth_sw):
        self.index = index
        self.netns = "%s-%s-h%d" % (PREFIX, run_id, index)
        self.name = self.netns          # hostname inside the host and in /etc/hosts there
        self.address = address
        self.iface = "eth0"             # the host's side of its veth
        self.switch_port = veth_sw      # the switch's side (in the switch namespace)

    def __repr__(self):
        return "Host(%s, %s)" % (self.name, self.address)


class EmulatedHosts:
    """Context manager: n_hosts emulated hosts on one bridge; see the module doc.

    subnet: an IPv4 /24-or-larger network for the hosts (default 198.18.0.0/24,
    RFC 2544 benchmarking range); refused if it overlaps anything routed in the
    root namespace. rate: e.g. "1gbit" to shape each host's egress with tbf
    (see shape()). mtu: veth MTU.
    """

    def __init__(self, n_hosts=2, subnet="198.18.0.0/24", rate=None, mtu=1500,
                 isolate_ipc=True):
        if n_hosts < 1:
            raise ValueError("n_hosts must be >= 1")
        self.n_hosts = n_hosts
        self.subnet = ipaddress.ip_network(subnet)
        if self.subnet.num_addresses < n_hosts + 2:
            raise ValueError("subnet too small")
        self.rate = rate
        self.mtu = mtu
        self.isolate_ipc = isolate_ipc
        self.run_id = None
        self.hosts = []
        self.switch_netns = None
        self.tmpdir = None
        self.shim = None
        self._lock_fd = None
        self.setup_seconds = None

    # ---- set-up / tear-down ----
    def __enter__(self):
        t0 = time.perf_counter()
        try:
            self._setup()
        except BaseException:
            self.close()
            raise
        self.setup_seconds = time.perf_counter() - t0
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _check_subnet(self):
        for family_cmd in ([IP, "-j", "-4", "route", "show", "table", "all"],
                           [IP, "-j", "-4", "addr", "show"]):
            data = json.loads(_run(family_cmd).stdout or "[]")
            for entry in data:
                nets = []
                if "dst" in entry and entry["dst"] not in ("default",):
                    try:
                        nets.append(ipaddress.ip_network(entry["dst"], strict=False))
                    except ValueError:
                        pass
                for a in entry.get("addr_info", []):
                    nets.append(ipaddress.ip_network("%s/%s" % (a["local"], a["prefixlen"]),
                                                     strict=False))
                for n in nets:
                    if n.version == 4 and n.overlaps(self.subnet) and n.prefixlen > 0:
                        raise EmulationError(
                            "subnet %s overlaps %s in the root namespace; pick another "
                            "(e.g. 198.18.0.0/24)" % (self.subnet, n))

    def _setup(self):
        ok, why = available()
        if not ok:
            raise EmulationError(why)
        self._check_subnet()
        os.makedirs(LOCK_DIR, exist_ok=True)
        global_fd = os.open(os.path.join(LOCK_DIR, ".global"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(global_fd, fcntl.LOCK_EX)
            cleanup_stale()
            while True:
                run_id = secrets.token_hex(3)
                if not any(n.startswith("%s-%s-" % (PREFIX, run_id)) for n in list_netns()):
                    break
            self._lock_fd = os.open(os.path.join(LOCK_DIR, run_id + ".lock"),
                                    os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.run_id = run_id
        finally:
            os.close(global_fd)

        addrs = list(self.subnet.hosts())
        prefixlen = self.subnet.prefixlen
        self.switch_netns = "%s-%s-sw" % (PREFIX, self.run_id)
        self.hosts = [Host(i, self.run_id, str(addrs[i]), "%s%sh%d" % (PREFIX, self.run_id, i))
                      for i in range(self.n_hosts)]
        no_v6 = ("echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6; "
                 "echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6; ")
        sw = self.switch_netns
        _run([IP, "netns", "add", sw])
        _run([IP, "netns", "exec", sw, "sh", "-ec",
              no_v6 + "ip link set lo up; ip link add br0 type bridge forward_delay 0 stp_state 0;"
              " ip link set br0 up"])
        hosts_file = "127.0.0.1 localhost\n" + "".join(
            "%s %s\n" % (h.address, h.name) for h in self.hosts)
        for h in self.hosts:
            _run([IP, "netns", "add", h.netns])
            etc = os.path.join(NETNS_ETC, h.netns)
            os.makedirs(etc, exist_ok=True)
            with open(os.path.join(etc, "hosts"), "w") as f:
                f.write(hosts_file)
            with open(os.path.join(etc, "resolv.conf"), "w") as f:
                f.write("# emulated host: no DNS\noptions attempts:1 timeout:1\n")
            _run([IP, "netns", "exec", h.netns, "sh", "-ec", no_v6 + "ip link set lo up"])
            _run([IP, "-n", sw, "link", "add", h.switch_port, "mtu", str(self.mtu),
                  "type", "veth", "peer", "name", h.iface, "netns", h.netns])
            _run([IP, "-n", sw, "link", "set", h.switch_port, "master", "br0", "up"])
            _run([IP, "-n", h.netns, "addr", "add", "%s/%d" % (h.address, prefixlen),
                  "dev", h.iface])
            _run([IP, "-n", h.netns, "link", "set", h.iface, "up"])
        if self.rate:
            self.shape(self.rate)
        self.tmpdir = _run_tmpdir(self.run_id)
        os.makedirs(self.tmpdir, mode=0o700)
        self.shim = os.path.join(self.tmpdir, "rsh")
        with open(self.shim, "w") as f:
            f.write(self._shim_text())
        os.chmod(self.shim, 0o755)

    def close(self):
        """Kills what still runs in the namespaces, deletes them; idempotent."""
        if self.run_id:
            _remove_run(self.run_id, [h.netns for h in self.hosts] +
                        ([self.switch_netns] if self.switch_netns else []))
        self.tmpdir = None
        if self._lock_fd is not None:
            try:
                os.unlink(os.path.join(LOCK_DIR, self.run_id + ".lock"))
            except FileNotFoundError:
                pass
            os.close(self._lock_fd)
            self._lock_fd = None
        self.run_id = None

    # ---- running things on a host ----
    def _host(self, host):
        if isinstance(host, Host):
            return host
        if isinstance(host, int):
            return self.hosts[host]
        for h in self.hosts:
            if host in (h.name, h.address):
                return h
        raise KeyError(host)

    def prefix(self, host=0):
        """argv prefix that runs a command on ``host`` (index, name or address)."""
        h = self._host(host)
        unshare = [UNSHARE, "--uts"] + (["--ipc"] if self.isolate_ipc else [])
        return [IP, "netns", "exec", h.netns] + unshare + [
            "sh", "-c", 'hostname "$0" && exec "$@"', h.name]

    def wrap(self, argv, host=0):
        return self.prefix(host) + list(argv)

    def _shim_text(self):
        cases = "".join('  %s|%s) set -- %s "$@";;\n' % (
            h.name, h.address, " ".join(shlex.quote(a) for a in self.prefix(h))) for h in self.hosts)
        return (
            "#!/bin/sh\n"
            "# ssh stand-in for hydra (-launcher ssh -launcher-exec THIS) and Open MPI\n"
            "# (plm_ssh_agent): THIS [-x] HOST COMMAND...  runs COMMAND (joined, and\n"
            "# through a shell as ssh does: Open MPI's sets variables first) on HOST's namespaces\n"
            "while [ $# -gt 0 ]; do case \"$1\" in -*) shift;; *) break;; esac; done\n"
            "host=$1; shift; cmd=\"$*\"; shift $#\n"
            "case \"$host\" in\n" + cases +
            '  *) echo "emuhosts rsh: unknown host $host" >&2; exit 255;;\n'
            "esac\n"
            'exec "$@" sh -c "$cmd"\n')

    # ---- hydra ----
    def launcher_args(self, iface=True):
        """hydra flags: start remote proxies through the shim; with iface, the
        proxies call back to mpiexec at host 0's eth0 address (no name lookup)."""
        return ["-launcher", "ssh", "-launcher-exec", self.shim] + (
            ["-iface", "eth0"] if iface else [])

    def host_list(self, slots=1, use_addresses=False):
        return ",".join("%s:%d" % (h.address if use_addresses else h.name, slots)
                        for h in self.hosts)

    def mpiexec_args(self, slots=1, use_addresses=False):
        return self.launcher_args() + ["-hosts", self.host_list(slots, use_addresses)]

    # ---- link ----
    def link_bytes(self, host=0):
        """(rx_bytes, tx_bytes) of host's eth0."""
        h = self._host(host)
        data = json.loads(_run([IP, "-n", h.netns, "-j", "-s", "link", "show", h.iface]).stdout)
        st = data[0]["stats64"]
        return st["rx"]["bytes"], st["tx"]["bytes"]

    def unshape(self):
        """Removes what shape() added: the hosts' links at the veth's own speed."""
        for h in self.hosts:
            _run([IP, "netns", "exec", h.netns, TC, "qdisc", "del", "dev", h.iface, "root"],
                 check=False)

    def shape(self, rate, burst="512kb"):
        """Limits every host's egress to ``rate`` (e.g. "1gbit") with tbf. (netem,
        for added delay, is not built into this machine's kernel.)"""
        self.unshape()
        for h in self.hosts:
            _run([IP, "netns", "exec", h.netns, TC, "qdisc", "add", "dev", h.iface, "root", "tbf",
                  "rate", rate, "burst", burst, "latency", "50ms"])
