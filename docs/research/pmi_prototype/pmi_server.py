"""A PMI-1 process manager server in pure Python, for MPICH's built-in
"simple PMI" client (MPICH 4.1+/5.x: src/pmi/src/pmi_v1.c, pmi_wire.c).

It lets processes started by anything (Ray actors, Spark tasks, plain
subprocesses) form one MPI_COMM_WORLD without mpiexec: give rank r the
environment ``server.env(r)`` (PMI_PORT=host:port, PMI_ID=r) before it calls
MPI_Init. MPICH then connects to this server and speaks the PMI-1 wire
protocol: one line per message, ``cmd=NAME key=value ...\\n``, values with
spaces escaped by a backslash. The replies below copy Hydra's
(src/pm/hydra/proxy/pmip_pmi.c, mpiexec/pmiserv_kvs.c).

A job is one server: ``size`` ranks, one KVS, one port. Failures (a rank's
socket closing before ``cmd=finalize``, ``cmd=abort``, ``fail()`` called by the
driver when it sees a process die, or ``connect_timeout``) answer every rank
waiting in a PMI barrier, and every later initack or barrier, with ``rc=1``:
MPI_Init then fails instead of waiting for ever. PMI cannot reach a rank that
waits elsewhere (MPICH's shared-memory init barrier, an MPI collective): the
driver must kill those, as Hydra does (see REPORT.md).
"""
import logging
import os
import re
import selectors
import socket
import threading
import time

log = logging.getLogger("pmi_server")

# Sizes Hydra announces (src/pm/hydra/lib/pmiserv_common.h).
KVSNAME_MAX, KEYLEN_MAX, VALLEN_MAX = 256, 64, 1024

# Query -> the reply MPICH's client waits for (src/pmi/maint/pmi-1.1.txt).
# A reply of the wrong name is an error in the client (cmd_read_expect).
RESPONSE = {
    "init": "response_to_init", "initack": "initack", "get_maxes": "maxes",
    "get_appnum": "appnum", "get_my_kvsname": "my_kvsname",
    "get_universe_size": "universe_size", "put": "put_result", "get": "get_result",
    "barrier_in": "barrier_out", "finalize": "finalize_ack",
    "publish_name": "publish_result", "unpublish_name": "unpublish_result",
    "lookup_name": "lookup_result", "spawn": "spawn_result",
}

_job_counter = 0


def escape(value):
    """Values go on the wire as one token: escape backslashes and spaces."""
    return str(value).replace("\n", " ").replace("\\", "\\\\").replace(" ", "\\ ")


def parse_line(line):
    """``cmd=put key=a value=b\\ c`` -> ('put', {'key': 'a', 'value': 'b\\ c'}).
    Values stay escaped as received, so a value stored by put goes back out
    by get byte for byte (the client unescapes it)."""
    fields = {}
    for tok in re.findall(r"(?:\\.|[^ \\])+", line):  # split at unescaped spaces
        key, eq, val = tok.partition("=")
        fields[key] = val if eq else None
    return fields.pop("cmd", None), fields


def process_mapping(nodes):
    """MPICH's node map string: ranks -> node ids, e.g. [0,0,1,1] ->
    '(vector,(0,2,2))' (triplets of first node, node count, ranks per node)."""
    blocks = []  # (node, ranks) runs of consecutive ranks
    for n in nodes:
        if blocks and blocks[-1][0] == n:
            blocks[-1][1] += 1
        else:
            blocks.append([n, 1])
    triplets = []  # (first node, number of nodes, ranks per node)
    for n, k in blocks:
        if triplets and triplets[-1][2] == k and triplets[-1][0] + triplets[-1][1] == n:
            triplets[-1][1] += 1
        else:
            triplets.append([n, 1, k])
    return "(vector,%s)" % ",".join("(%d,%d,%d)" % tuple(t) for t in triplets)


class _Conn:
    def __init__(self, sock, peer):
        self.sock, self.peer = sock, peer
        self.buf = b""
        self.rank = None        # known after cmd=initack pmiid=N
        self.finalized = False
        self.mcmd = None        # lines of a multi-line mcmd=spawn being read


class PmiServer:
    """One MPI job's PMI-1 server, served from a daemon thread.

    nodes: node id of each rank (list of ``size`` ints) for the
    PMI_process_mapping key; None means all ranks on one node; False serves
    no mapping (MPICH then exchanges host names through put/barrier/get).
    jobattrs: more read-only PMI_* keys, e.g. {"PMI_hwloc_xmlfile": path}.
    on_failure(reason, kind): called once, in a thread of its own, when the job
    fails; kind is "abort" (a rank sent cmd=abort: MPICH 5's MPI_Abort then
    *returns* and counts on the process manager to kill the job, as Hydra
    does, so kill at once), "lost" (a socket closed before finalize),
    "timeout", "driver" (fail() called) or "internal".
    """

    def __init__(self, size, host="127.0.0.1", nodes=None, appnum=0, universe_size=None,
                 kvsname=None, on_failure=None, connect_timeout=None, transcript=True,
                 jobattrs=None):
        global _job_counter
        _job_counter += 1
        self.size, self.host, self.appnum = size, host, appnum
        self.universe_size = size if universe_size is None else universe_size
        self.kvsname = kvsname or "kvs_%d_%d_%s" % (os.getpid(), _job_counter,
                                                    os.urandom(4).hex())
        nodes = [0] * size if nodes is None else nodes
        self.jobattrs = {} if nodes is False else {"PMI_process_mapping": process_mapping(nodes)}
        self.jobattrs.update(jobattrs or {})  # e.g. PMI_hwloc_xmlfile=<hwloc XML topology>
        self.kvs = {}
        self.on_failure, self.connect_timeout = on_failure, connect_timeout
        self.transcript = [] if transcript else None  # (seconds, rank, '<' or '>', line)
        self.failure = None
        self.failure_kind = None
        self.exit_codes = {}     # rank -> exit code given with cmd=abort
        self._ranks = {}         # rank -> _Conn
        self._barrier = set()    # conns waiting in barrier_in
        self._lock = threading.RLock()
        self._done = threading.Event()
        self._sel = selectors.DefaultSelector()
        self._t0 = time.monotonic()
        self._lsock = socket.create_server((host, 0), backlog=max(128, size))
        self.port = self._lsock.getsockname()[1]
        self._stop_r, self._stop_w = socket.socketpair()
        self._thread = threading.Thread(target=self._serve, name="pmi-server", daemon=True)

    # ---- driver API -------------------------------------------------------
    def start(self):
        self._thread.start()
        return self

    def env(self, rank):
        """What rank ``rank`` needs in its environment (and nothing of
        another launcher's: PMI_FD, PMIX_*, HYDRA_* must be absent)."""
        return {"PMI_PORT": "%s:%d" % (self.host, self.port), "PMI_ID": str(rank)}

    def fail(self, reason, kind="driver"):
        """The job failed (the driver saw a process die, ...): answer every
        rank waiting in a PMI barrier, and later initacks/barriers, rc=1."""
        with self._lock:
            if self.failure is not None:
                return
            self.failure, self.failure_kind = reason, kind
            log.warning("job %s failed: %s", self.kvsname, reason)
            waiting, self._barrier = self._barrier, set()
            for conn in waiting:
                self._reply(conn, "barrier_out", rc=1, msg=reason)
            self._check_done()
        if self.on_failure:  # own thread: the callback may take its time (kill ranks)
            threading.Thread(target=self.on_failure, args=(reason, kind), daemon=True).start()

    def wait(self, timeout=None):
        """True once every rank finalized (or the job failed)."""
        return self._done.wait(timeout)

    def close(self):
        if self._thread.is_alive():
            self._stop_w.send(b"x")
            self._thread.join(5)

    # ---- the server thread ------------------------------------------------
    def _serve(self):
        self._sel.register(self._lsock, selectors.EVENT_READ, None)
        self._sel.register(self._stop_r, selectors.EVENT_READ, "stop")
        try:
            while True:
                for key, _ in self._sel.select(timeout=0.5):
                    if key.data == "stop":
                        return
                    if key.data is None:
                        sock, peer = self._lsock.accept()
                        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                        self._sel.register(sock, selectors.EVENT_READ, _Conn(sock, peer))
                    else:
                        try:
                            self._read(key.data)
                        except Exception as e:  # a bug here must not hang the ranks
                            log.exception("PMI server error")
                            self.fail("PMI server error: %r" % e, "internal")
                self._check_timeout()
        finally:
            for key in list(self._sel.get_map().values()):
                key.fileobj.close()
            self._sel.close()
            self._stop_w.close()

    def _check_timeout(self):
        if (self.connect_timeout and self.failure is None and len(self._ranks) < self.size
                and time.monotonic() - self._t0 > self.connect_timeout):
            missing = sorted(set(range(self.size)) - set(self._ranks))
            self.fail("ranks %s did not connect within %.0f s" % (missing, self.connect_timeout),
                      "timeout")

    def _read(self, conn):
        try:
            data = conn.sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            return self._closed(conn)
        conn.buf += data
        while b"\n" in conn.buf:
            line, conn.buf = conn.buf.split(b"\n", 1)
            with self._lock:
                self._handle(conn, line.decode("utf-8", "replace"))

    def _closed(self, conn):
        self._sel.unregister(conn.sock)
        conn.sock.close()
        with self._lock:
            self._barrier.discard(conn)
            if conn.rank is not None and not conn.finalized:
                self.fail("rank %d closed its PMI connection before PMI_Finalize "
                          "(process died?)" % conn.rank, "lost")
            self._check_done()

    def _check_done(self):
        finished = sum(c.finalized for c in self._ranks.values())
        if self.failure is not None or finished == self.size:
            self._done.set()

    def _record(self, conn, arrow, line):
        if self.transcript is not None:
            self.transcript.append((time.monotonic() - self._t0, conn.rank, arrow, line))
        log.debug("%s rank %s %s", arrow, conn.rank, line)

    def _send(self, conn, text):
        for line in text.rstrip("\n").split("\n"):
            self._record(conn, ">", line)
        try:
            conn.sock.sendall(text.encode())
        except OSError:
            pass  # its close shows up as a read of nothing

    def _reply(self, conn, name, rc=0, msg=None, **fields):
        parts = ["cmd=" + name, "rc=%d" % rc]
        if msg is not None:
            parts.append("msg=" + escape(msg))
        parts += ["%s=%s" % kv for kv in fields.items()]
        self._send(conn, " ".join(parts) + "\n")

    # ---- one PMI-1 command ------------------------------------------------
    def _handle(self, conn, line):
        self._record(conn, "<", line)
        if conn.mcmd is not None or line.startswith("mcmd="):  # spawn: lines until endcmd
            conn.mcmd = (conn.mcmd or []) + [line]
            if line == "endcmd":
                conn.mcmd = None
                self._reply(conn, "spawn_result", rc=1, msg="spawn is not supported")
            return
        cmd, f = parse_line(line)
        if conn.rank is None and cmd != "initack":
            # PMI_PORT without PMI_ID: MPICH would run as rank 0 of a world
            # of 1 (PMI_size's default), N silent copies. Refuse it instead.
            if cmd in RESPONSE:
                self._reply(conn, RESPONSE[cmd], rc=1, msg="no PMI_ID: set PMI_ID=<rank> "
                            "beside PMI_PORT")
            return
        if cmd == "abort":  # no reply: the rank exits after sending it
            self.exit_codes[conn.rank] = f.get("exitcode")
            return self.fail("rank %s called PMI_Abort (MPI_Abort or a fatal MPI error), "
                             "exit code %s" % (conn.rank, f.get("exitcode")), "abort")
        if cmd == "finalize":
            conn.finalized = True
            self._reply(conn, "finalize_ack")
            return self._check_done()
        if self.failure is not None and cmd in ("initack", "barrier_in"):
            # Only where a rank would start, or block on the lost one. An error
            # on put/get sent MPICH 5.0.2 (UCX netmod) into an assertion
            # failure (SIGABRT) instead of a clean MPI_Init error.
            return self._reply(conn, RESPONSE[cmd], rc=1, msg=self.failure)
        if cmd == "initack":  # PMI_PORT + PMI_ID: tell the rank who it is
            rank = int(f.get("pmiid", -1))
            if not 0 <= rank < self.size or rank in self._ranks:
                return self._reply(conn, "initack", rc=1, msg="bad or duplicate PMI_ID %d" % rank)
            conn.rank = rank
            self._ranks[rank] = conn
            return self._send(conn, "cmd=initack rc=0 rank=%d size=%d appnum=%d debug=0\n"
                              "cmd=set size=%d\ncmd=set rank=%d\ncmd=set debug=0\n"
                              % (rank, self.size, self.appnum, self.size, rank))
        if cmd == "init":
            if f.get("pmi_version") != "1":
                return self._reply(conn, "response_to_init", rc=1, msg="only PMI-1 is served")
            # 1.1, not Hydra's 1.2: no PMI 1.2 group barriers, so MPICH sets
            # MPIR_CVAR_PMI_DISABLE_GROUP and uses world barriers only.
            return self._reply(conn, "response_to_init", pmi_version=1, pmi_subversion=1)
        if cmd == "get_maxes":
            return self._reply(conn, "maxes", kvsname_max=KVSNAME_MAX, keylen_max=KEYLEN_MAX,
                               vallen_max=VALLEN_MAX)
        if cmd == "get_appnum":
            return self._reply(conn, "appnum", appnum=self.appnum)
        if cmd == "get_my_kvsname":
            return self._reply(conn, "my_kvsname", kvsname=self.kvsname)
        if cmd == "get_universe_size":
            return self._reply(conn, "universe_size", size=self.universe_size)
        if cmd == "put":
            key = f.get("key") or ""
            if key.startswith("PMI_"):
                return self._reply(conn, "put_result", rc=1, msg="Keys with PMI_ prefix are reserved")
            self.kvs[key] = f.get("value") or ""
            return self._reply(conn, "put_result")
        if cmd == "get":
            key = f.get("key") or ""
            val = self.jobattrs.get(key) if key.startswith("PMI_") else self.kvs.get(key)
            if val is None:  # as Hydra: MPICH treats it as "not set" (jobattrs) or an error
                return self._reply(conn, "get_result", rc=1, msg="key_not_found")
            return self._reply(conn, "get_result", value=val)
        if cmd == "barrier_in":
            self._barrier.add(conn)
            if len(self._barrier) == self.size:
                waiting, self._barrier = self._barrier, set()
                for c in sorted(waiting, key=lambda c: c.rank or 0):
                    self._reply(c, "barrier_out")
            return
        if cmd in RESPONSE:  # publish/lookup/unpublish: not served
            return self._reply(conn, RESPONSE[cmd], rc=1, msg="%s is not supported" % cmd)
        log.warning("rank %s sent an unknown PMI command: %r", conn.rank, line)
