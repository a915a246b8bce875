"""A PMI-1 server: one MPI world for ranks that something other than mpiexec
started (Ray actors, Spark tasks). The design and the measurements behind it
are in docs/research/pmi_launch.md.

MPICH's built-in PMI client (src/pmi/src/pmi_v1.c) connects to any process
manager named by ``PMI_PORT=host:port`` and introduces itself with
``PMI_ID=<rank>``; rank and size come from this server's reply. Give rank r
``server.env(r)`` before it calls MPI_Init (runner/rank_env.py adds what else
a rank needs). The wire protocol is one line per message,
``cmd=NAME key=value ...``, with spaces in values escaped by a backslash; the
replies copy Hydra's (src/pm/hydra/proxy/pmip_pmi.c).

Failures (a rank's connection closing before ``cmd=finalize``, ``cmd=abort``,
``fail()`` from the driver, ranks missing at ``connect_timeout``) answer every
rank waiting in a PMI barrier, and every later initack or barrier, with
``rc=1``, so MPI_Init fails instead of waiting for ever. A rank waiting
elsewhere (MPICH's shared-memory init barrier, an MPI collective) cannot be
reached through PMI: ``on_failure`` is where the driver stops those, as Hydra
kills a job's processes.

There is no authentication, as in Hydra's PMI-1 port mode: anyone who can
reach the port can claim a free rank. A duplicate or unknown PMI_ID is
refused. Bind to the cluster's interface, not to every interface.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional
import logging
import os
import re
import selectors
import socket
import threading
import time

log = logging.getLogger("fuseopt.pmi")

# Sizes Hydra announces (src/pm/hydra/lib/pmiserv_common.h).
KVSNAME_MAX, KEYLEN_MAX, VALLEN_MAX = 256, 64, 1024

# Query -> the reply MPICH's client waits for (src/pmi/maint/pmi-1.1.txt). A
# reply of another name is an error in the client.
RESPONSE = {
    "init": "response_to_init", "initack": "initack", "get_maxes": "maxes",
    "get_appnum": "appnum", "get_my_kvsname": "my_kvsname",
    "get_universe_size": "universe_size", "put": "put_result", "get": "get_result",
    "barrier_in": "barrier_out", "finalize": "finalize_ack",
    "publish_name": "publish_result", "unpublish_name": "unpublish_result",
    "lookup_name": "lookup_result", "spawn": "spawn_result",
}

_jobs = 0


def escape(value) -> str:
    """A value as one token on the wire."""
    return str(value).replace("\n", " ").replace("\\", "\\\\").replace(" ", "\\ ")


def parse_line(line: str):
    """``cmd=put key=a value=b\\ c`` -> ('put', {'key': 'a', 'value': 'b\\ c'}).
    Values stay escaped, so what put stored goes back out by get byte for
    byte (the client unescapes it)."""
    fields: Dict[str, Optional[str]] = {}
    for token in re.findall(r"(?:\\.|[^ \\])+", line):  # split at unescaped spaces
        key, eq, value = token.partition("=")
        fields[key] = value if eq else None
    return fields.pop("cmd", None), fields


def process_mapping(nodes: List[int]) -> str:
    """MPICH's node map: each rank's node, [0,0,1,1] -> '(vector,(0,2,2))'
    (triplets of first node, node count, ranks per node)."""
    runs: List[List[int]] = []  # [node, ranks] of consecutive ranks
    for n in nodes:
        if runs and runs[-1][0] == n:
            runs[-1][1] += 1
        else:
            runs.append([n, 1])
    triplets: List[List[int]] = []
    for n, k in runs:
        if triplets and triplets[-1][2] == k and triplets[-1][0] + triplets[-1][1] == n:
            triplets[-1][1] += 1
        else:
            triplets.append([n, 1, k])
    return "(vector,%s)" % ",".join("(%d,%d,%d)" % tuple(t) for t in triplets)


class _Connection:
    def __init__(self, sock):
        self.sock = sock
        self.buffer = b""
        self.rank: Optional[int] = None  # known after cmd=initack pmiid=N
        self.finalized = False
        self.spawn_lines: Optional[List[str]] = None  # a multi-line mcmd=spawn


class PmiServer:
    """One MPI job's PMI-1 server, served from a daemon thread.

    nodes: each rank's node id, for PMI_process_mapping; None serves no
    mapping and MPICH compares host names itself (one barrier more; right
    whatever the placement). on_failure(reason, kind) runs once, in a thread
    of its own, when the job fails; kind is "abort" (MPICH 5's MPI_Abort
    *returns* and counts on the process manager to end the job: stop every
    rank at once), "lost" (a connection closed before finalize), "timeout",
    "driver" (fail() was called) or "internal".
    """

    def __init__(self, size: int, host: str = "127.0.0.1", nodes: Optional[List[int]] = None,
                 on_failure: Optional[Callable[[str, str], None]] = None,
                 connect_timeout: Optional[float] = None):
        global _jobs
        _jobs += 1
        self.size, self.host = size, host
        # Unique per job, and never "0" or "singinit": MPICH hashes the name
        # into its world id and uses getpid() for those two.
        self.kvsname = "kvs_%d_%d_%s" % (os.getpid(), _jobs, os.urandom(4).hex())
        self.job_attributes = {} if nodes is None else {
            "PMI_process_mapping": process_mapping(nodes)}
        self.kvs: Dict[str, str] = {}
        self.on_failure, self.connect_timeout = on_failure, connect_timeout
        self.failure: Optional[str] = None
        self.failure_kind: Optional[str] = None
        self.exit_codes: Dict[int, Optional[str]] = {}  # rank -> code given with cmd=abort
        self._ranks: Dict[int, _Connection] = {}
        self._barrier: set = set()
        self._lock = threading.RLock()
        self._done = threading.Event()
        self._selector = selectors.DefaultSelector()
        self._started = time.monotonic()
        self._listener = socket.create_server((host, 0), backlog=max(128, size))
        self.port = self._listener.getsockname()[1]
        self._stop_r, self._stop_w = socket.socketpair()
        self._thread = threading.Thread(target=self._serve, name="fuseopt-pmi", daemon=True)

    # ---- the driver's side --------------------------------------------------
    def start(self) -> "PmiServer":
        self._thread.start()
        return self

    def env(self, rank: int) -> Dict[str, str]:
        return {"PMI_PORT": "%s:%d" % (self.host, self.port), "PMI_ID": str(rank)}

    def fail(self, reason: str, kind: str = "driver") -> None:
        """The job failed: every rank in a PMI barrier, and every later
        initack or barrier, gets rc=1."""
        with self._lock:
            if self.failure is not None:
                return
            self.failure, self.failure_kind = reason, kind
            log.info("PMI job %s failed: %s", self.kvsname, reason)
            waiting, self._barrier = self._barrier, set()
            for conn in waiting:
                self._reply(conn, "barrier_out", rc=1, msg=reason)
            self._check_done()
        if self.on_failure:  # its own thread: stopping ranks may take a while
            threading.Thread(target=self.on_failure, args=(reason, kind), daemon=True).start()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """True once every rank finalized, or the job failed."""
        return self._done.wait(timeout)

    def finalized(self) -> int:
        with self._lock:
            return sum(c.finalized for c in self._ranks.values())

    def close(self) -> None:
        if self._thread.is_alive():
            self._stop_w.send(b"x")
            self._thread.join(5)
        else:
            self._listener.close()

    # ---- the server thread --------------------------------------------------
    def _serve(self):
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._stop_r, selectors.EVENT_READ, "stop")
        try:
            while True:
                for key, _ in self._selector.select(timeout=0.5):
                    if key.data == "stop":
                        return
                    if key.data is None:
                        self._accept()
                    else:
                        self._read_guarded(key.data)
                self._check_timeout()
        finally:
            for key in list(self._selector.get_map().values()):
                key.fileobj.close()
            self._selector.close()
            self._stop_w.close()

    def _accept(self):
        sock, _ = self._listener.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._selector.register(sock, selectors.EVENT_READ, _Connection(sock))

    def _read_guarded(self, conn):
        try:
            self._read(conn)
        except Exception as e:  # a bug here must fail the job, not hang its ranks
            log.exception("PMI server error")
            self.fail("PMI server error: %r" % e, "internal")

    def _check_timeout(self):
        if (self.connect_timeout and self.failure is None and len(self._ranks) < self.size
                and time.monotonic() - self._started > self.connect_timeout):
            missing = sorted(set(range(self.size)) - set(self._ranks))
            self.fail("ranks %s did not start MPI within %.0f s" % (missing, self.connect_timeout),
                      "timeout")

    def _read(self, conn):
        try:
            data = conn.sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            return self._closed(conn)
        conn.buffer += data
        if len(conn.buffer) > 1 << 20:  # no PMI-1 line is near this: not a rank
            return self._closed(conn)
        while b"\n" in conn.buffer:
            line, conn.buffer = conn.buffer.split(b"\n", 1)
            with self._lock:
                self._handle(conn, line.decode("utf-8", "replace"))

    def _closed(self, conn):
        self._selector.unregister(conn.sock)
        conn.sock.close()
        with self._lock:
            self._barrier.discard(conn)
            if conn.rank is not None and not conn.finalized:
                self.fail("rank %d ended its PMI connection before MPI_Finalize (its process "
                          "died?)" % conn.rank, "lost")
            self._check_done()

    def _check_done(self):
        if self.failure is not None or sum(c.finalized for c in self._ranks.values()) == self.size:
            self._done.set()

    def _send(self, conn, text):
        log.debug("> rank %s %s", conn.rank, text.rstrip("\n"))
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

    # ---- one PMI-1 command --------------------------------------------------
    def _handle(self, conn, line):
        log.debug("< rank %s %s", conn.rank, line)
        if conn.spawn_lines is not None or line.startswith("mcmd="):  # lines until endcmd
            conn.spawn_lines = (conn.spawn_lines or []) + [line]
            if line == "endcmd":
                conn.spawn_lines = None
                self._reply(conn, "spawn_result", rc=1, msg="spawn is not supported")
            return
        cmd, fields = parse_line(line)
        if conn.rank is None and cmd != "initack":
            # PMI_PORT without PMI_ID: MPICH would run as rank 0 of a world of
            # 1, N silent copies of one job. Refuse instead.
            if cmd in RESPONSE:
                self._reply(conn, RESPONSE[cmd], rc=1,
                            msg="no PMI_ID: set PMI_ID=<rank> beside PMI_PORT")
            return
        if self.failure is not None and cmd in ("initack", "barrier_in"):
            # Only where a rank would start or block on the lost one: rc=1 on
            # put/get sent MPICH 5.0.2 (UCX) into an assertion (SIGABRT).
            return self._reply(conn, RESPONSE[cmd], rc=1, msg=self.failure)
        handler = _HANDLERS.get(cmd or "")
        if handler is not None:
            return handler(self, conn, fields)
        if cmd in RESPONSE:  # publish/lookup/unpublish: not served
            return self._reply(conn, RESPONSE[cmd], rc=1, msg="%s is not supported" % cmd)
        log.warning("rank %s sent an unknown PMI command: %r", conn.rank, line)

    def _initack(self, conn, fields):
        try:
            rank = int(fields.get("pmiid") or -1)
        except ValueError:
            rank = -1
        if not 0 <= rank < self.size or rank in self._ranks:
            return self._reply(conn, "initack", rc=1, msg="bad or duplicate PMI_ID %d" % rank)
        conn.rank = rank
        self._ranks[rank] = conn
        self._send(conn, "cmd=initack rc=0 rank=%d size=%d appnum=0 debug=0\n"
                   "cmd=set size=%d\ncmd=set rank=%d\ncmd=set debug=0\n"
                   % (rank, self.size, self.size, rank))

    def _init(self, conn, fields):
        if fields.get("pmi_version") != "1":
            return self._reply(conn, "response_to_init", rc=1, msg="only PMI-1 is served")
        # 1.1, not Hydra's 1.2: MPICH then uses world barriers only.
        self._reply(conn, "response_to_init", pmi_version=1, pmi_subversion=1)

    def _abort(self, conn, fields):  # no reply: the rank exits after sending it
        self.exit_codes[conn.rank] = fields.get("exitcode")
        self.fail("rank %s called MPI_Abort (or hit a fatal MPI error), exit code %s"
                  % (conn.rank, fields.get("exitcode")), "abort")

    def _finalize(self, conn, fields):
        conn.finalized = True
        self._reply(conn, "finalize_ack")
        self._check_done()

    def _put(self, conn, fields):
        key = fields.get("key") or ""
        if key.startswith("PMI_"):
            return self._reply(conn, "put_result", rc=1, msg="keys starting PMI_ are reserved")
        if len(self.kvs) >= 1 << 20:
            return self._reply(conn, "put_result", rc=1, msg="the key-value space is full")
        self.kvs[key[:KEYLEN_MAX]] = (fields.get("value") or "")[:2 * VALLEN_MAX]
        self._reply(conn, "put_result")

    def _get(self, conn, fields):
        key = fields.get("key") or ""
        value = self.job_attributes.get(key) if key.startswith("PMI_") else self.kvs.get(key)
        if not value:  # as Hydra; MPICH's parser also rejects an empty value=
            return self._reply(conn, "get_result", rc=1, msg="key_not_found")
        self._reply(conn, "get_result", value=value)

    def _barrier_in(self, conn, fields):
        self._barrier.add(conn)
        if len(self._barrier) == self.size:
            waiting, self._barrier = self._barrier, set()
            for c in sorted(waiting, key=lambda c: c.rank or 0):
                self._reply(c, "barrier_out")


_HANDLERS = {
    "initack": PmiServer._initack, "init": PmiServer._init, "abort": PmiServer._abort,
    "finalize": PmiServer._finalize, "put": PmiServer._put, "get": PmiServer._get,
    "barrier_in": PmiServer._barrier_in,
    "get_maxes": lambda s, c, f: s._reply(c, "maxes", kvsname_max=KVSNAME_MAX,
                                          keylen_max=KEYLEN_MAX, vallen_max=VALLEN_MAX),
    "get_appnum": lambda s, c, f: s._reply(c, "appnum", appnum=0),
    "get_my_kvsname": lambda s, c, f: s._reply(c, "my_kvsname", kvsname=s.kvsname),
    "get_universe_size": lambda s, c, f: s._reply(c, "universe_size", size=s.size),
}
