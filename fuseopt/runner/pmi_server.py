"""A PMI-1 server: one MPI world for ranks that something other than mpiexec
started (Ray actors, Spark tasks). The design and the measurements behind it
are in docs/research/pmi_launch.md.

MPICH's built-in PMI client (src/pmi/src/pmi_v1.c) connects to any process
manager named by ``PMI_PORT=host:port`` and introduces itself with
``PMI_ID=<rank>``; rank and size come from this server's reply. Give rank r
``server.env(r)`` before it calls MPI_Init (runner/rank_env.py adds what else
a rank needs). The wire protocol is one line per message,
``cmd=NAME key=value ...``, with spaces in values escaped by a backslash
(pmi_wire.py); the commands and their replies, which copy Hydra's
(src/pm/hydra/proxy/pmip_pmi.c), are in pmi_commands.py; this file holds
the server's sockets, its thread and the job's failure.

Failures (a rank's connection closing before ``cmd=finalize``, ``cmd=abort``,
``fail()`` from the driver, ranks missing at ``connect_timeout``) answer every
rank waiting in a PMI barrier, and every later initack or barrier, with
``rc=1``, so MPI_Init fails instead of waiting for ever. A rank waiting
elsewhere (MPICH's shared-memory init barrier, an MPI collective) cannot be
reached through PMI: ``on_failure`` is where the driver stops those, as Hydra
kills a job's processes.

Whoever can reach the port is not trusted (docs/reliability.md, "Threat
model"). A rank proves itself with its PMI_ID, which is not its rank but a
random number given only to it (MPICH sends it as an int, hence 31 bits):
a connection's first line must be ``cmd=initack`` with a PMI_ID of a rank
not yet in, else it is closed; one initack per connection. Before that
nothing is parsed, and a connection that has not proved itself within
AUTH_TIMEOUT_S is closed. Sockets are non-blocking and each reply queue is
capped, so a client that sends and never reads is cut off instead of
stalling the one server thread; lines and batches are capped too. A rank may
not overwrite a key another rank put. The listener closes once every rank
is in; the start timeout runs on a timer of its own. Bind to the cluster's
interface, not to every interface.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional
import logging
import os
import random
import selectors
import socket
import threading
import time

from .pmi_commands import PmiCommands
from .pmi_wire import escape, process_mapping

log = logging.getLogger("fuseopt.pmi")

# Limits on what any client can make this server hold or do. No PMI-1 line
# of MPICH's comes near MAX_LINE (values are capped at 2 * VALLEN_MAX).
MAX_LINE = 16 << 10
MAX_OUTBOX = 1 << 20        # replies queued for a client that does not read
MAX_UNPROVEN = 64           # connections that have not sent their initack yet (the oldest go)
AUTH_TIMEOUT_S = 10.0

_jobs = 0


class _Connection:
    def __init__(self, sock):
        self.sock = sock
        self.opened = time.monotonic()
        self.inbox = bytearray()
        self.outbox = bytearray()
        self.closed = False
        self.rank: Optional[int] = None  # known after cmd=initack pmiid=<its PMI_ID>
        self.finalized = False
        self.spawn_lines: Optional[List[str]] = None  # a multi-line mcmd=spawn


class PmiServer(PmiCommands):
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
        draw = random.SystemRandom()
        self._ids: Dict[int, int] = {}  # PMI_ID -> rank: each rank's proof
        while len(self._ids) < size:
            self._ids.setdefault(draw.randrange(1 << 20, 1 << 31), len(self._ids))
        self._owner: Dict[str, int] = {}  # key -> the rank that put it
        self._ranks: Dict[int, _Connection] = {}
        self._barrier: set = set()
        self._lock = threading.RLock()
        self._done = threading.Event()
        self._selector = selectors.DefaultSelector()
        self._started = time.monotonic()
        self._listener = socket.create_server((host, 0), backlog=max(128, size))
        self.port = self._listener.getsockname()[1]
        self._stop_r, self._stop_w = socket.socketpair()
        self._stop_r.setblocking(False)
        self._stop_w.setblocking(False)
        self._thread = threading.Thread(target=self._serve, name="fuseopt-pmi", daemon=True)
        # Apart from the socket thread, so that nothing a client does can keep it from firing.
        self._start_timer = threading.Timer(connect_timeout, self._start_timed_out) \
            if connect_timeout else None

    # ---- the driver's side --------------------------------------------------
    def start(self) -> "PmiServer":
        self._thread.start()
        if self._start_timer is not None:
            self._start_timer.daemon = True
            self._start_timer.start()
        return self

    def env(self, rank: int) -> Dict[str, str]:
        """What rank ``rank`` needs to reach this server; its PMI_ID is its
        secret (pass it to that rank only)."""
        pmi_id = next(i for i, r in self._ids.items() if r == rank)
        return {"PMI_PORT": "%s:%d" % (self.host, self.port), "PMI_ID": str(pmi_id)}

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
        if self._start_timer is not None:
            self._start_timer.cancel()
        if self._thread.is_alive():
            self._stop_w.send(b"x")
            self._thread.join(5)
        else:
            self._listener.close()

    # ---- the server thread --------------------------------------------------
    def _serve(self):
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._stop_r, selectors.EVENT_READ, "control")
        try:
            while True:
                for key, events in self._selector.select(timeout=0.5):
                    if key.data == "control":
                        if b"x" in self._stop_r.recv(4096):
                            return
                    elif key.data is None:
                        self._accept()
                    else:
                        self._ready_guarded(key.data, events)
                self._close_unproven()
        finally:
            for key in list(self._selector.get_map().values()):
                key.fileobj.close()
            self._selector.close()
            self._stop_w.close()

    def _accept(self):
        try:
            sock, _ = self._listener.accept()
        except OSError as e:  # EMFILE and the like: keep serving the ranks that are in
            log.warning("PMI server cannot accept a connection: %s", e)
            time.sleep(0.05)
            return
        with self._lock:
            unproven = sorted((k.data for k in self._selector.get_map().values()
                               if isinstance(k.data, _Connection) and k.data.rank is None),
                              key=lambda c: c.opened)
            # The oldest goes, not the newcomer: a crowd of silent connections
            # must not keep out a rank, which proves itself at once.
            for conn in unproven[:max(0, len(unproven) - MAX_UNPROVEN + 1)]:
                self._closed(conn)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._selector.register(sock, selectors.EVENT_READ, _Connection(sock))

    def _ready_guarded(self, conn, events):
        try:
            if events & selectors.EVENT_WRITE:
                with self._lock:
                    self._flush(conn)
            if events & selectors.EVENT_READ and not conn.closed:
                self._read(conn)
        except Exception as e:  # a bug here must fail the job, not hang its ranks
            log.exception("PMI server error")
            self.fail("PMI server error: %r" % e, "internal")

    def _close_unproven(self):
        now = time.monotonic()
        with self._lock:
            for key in list(self._selector.get_map().values()):
                conn = key.data
                if isinstance(conn, _Connection) and conn.rank is None \
                        and now - conn.opened > AUTH_TIMEOUT_S:
                    self._closed(conn)

    def _start_timed_out(self):
        with self._lock:
            if self.failure is not None or len(self._ranks) == self.size:
                return
            missing = sorted(set(range(self.size)) - set(self._ranks))
        self.fail("ranks %s did not start MPI within %.0f s" % (missing, self.connect_timeout),
                  "timeout")

    def _read(self, conn):
        try:
            data = conn.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        with self._lock:
            if not data:
                return self._closed(conn)
            conn.inbox += data
            start = 0  # lines are taken from the front, the buffer cut once
            while not conn.closed:
                end = conn.inbox.find(b"\n", start)
                if end < 0:
                    break
                line = conn.inbox[start:end].decode("utf-8", "replace")
                start = end + 1
                self._handle(conn, line)
            del conn.inbox[:start]
            if len(conn.inbox) > MAX_LINE and not conn.closed:  # no PMI-1 line is near this
                self._closed(conn)

    def _closed(self, conn):
        with self._lock:
            if conn.closed:
                return
            conn.closed = True
            self._selector.unregister(conn.sock)
            self._barrier.discard(conn)
            if conn.rank is not None and not conn.finalized:
                self.fail("rank %d ended its PMI connection before MPI_Finalize (its process "
                          "died?)" % conn.rank, "lost")
            self._check_done()
            # Closed last: whoever sees the connection end finds the failure recorded.
            conn.sock.close()

    def _check_done(self):
        if self.failure is not None or sum(c.finalized for c in self._ranks.values()) == self.size:
            self._done.set()

    def _send(self, conn, text):
        log.debug("> rank %s %s", conn.rank, text.rstrip("\n"))
        if conn.closed:
            return
        conn.outbox += text.encode()
        self._flush(conn)

    def _flush(self, conn):
        """Sends what the socket takes now; the rest waits for EVENT_WRITE.
        A client that lets MAX_OUTBOX pile up is not reading: cut it off."""
        if conn.closed:
            return
        try:
            sent = conn.sock.send(conn.outbox) if conn.outbox else 0
        except BlockingIOError:
            sent = 0
        except OSError:
            return self._closed(conn)
        del conn.outbox[:sent]
        if len(conn.outbox) > MAX_OUTBOX:
            log.warning("PMI client (rank %s) does not read its replies: disconnected", conn.rank)
            return self._closed(conn)
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.outbox else 0)
        if self._selector.get_key(conn.sock).events != events:
            self._selector.modify(conn.sock, events, conn)
            try:
                self._stop_w.send(b"w")  # fail() may run in another thread: re-select
            except OSError:
                pass

    def _reply(self, conn, name, rc=0, msg=None, **fields):
        parts = ["cmd=" + name, "rc=%d" % rc]
        if msg is not None:
            parts.append("msg=" + escape(msg))
        parts += ["%s=%s" % kv for kv in fields.items()]
        self._send(conn, " ".join(parts) + "\n")

    def _stop_listening(self):
        """Every rank is in: nobody else has anything to say here."""
        self._selector.unregister(self._listener)
        self._listener.close()
        for key in list(self._selector.get_map().values()):
            if isinstance(key.data, _Connection) and key.data.rank is None:
                self._closed(key.data)
