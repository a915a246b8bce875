"""The PMI-1 commands a rank sends, one line each, as the PMI server
(pmi_server.py) answers them: the first line's proof of identity (initack),
then init, put/get on the job's key-value space, barriers, abort, finalize.
A mixin of PmiServer, which owns the sockets, the lock held around every
command, and the state named here (_ids, _ranks, kvs, _owner, _barrier,
failure); the replies copy Hydra's (src/pm/hydra/proxy/pmip_pmi.c)."""
from __future__ import annotations

import logging

from .pmi_wire import KEYLEN_MAX, KVSNAME_MAX, RESPONSE, VALLEN_MAX, parse_line

log = logging.getLogger("fuseopt.pmi")

# No batch of spawn lines (MPI_Comm_spawn, not served) may grow past this.
MAX_SPAWN_LINES = 256


class PmiCommands:
    """One PMI-1 command per call of _handle, under PmiServer's lock."""

    def _handle(self, conn, line):
        log.debug("< rank %s %s", conn.rank, line[:200])
        if conn.rank is None:
            return self._initack(conn, line)
        if not line:
            return
        if conn.spawn_lines is not None or line.startswith("mcmd="):  # lines until endcmd
            conn.spawn_lines = (conn.spawn_lines or []) + [line]
            if line == "endcmd":
                conn.spawn_lines = None
                self._reply(conn, "spawn_result", rc=1, msg="spawn is not supported")
            elif len(conn.spawn_lines) > MAX_SPAWN_LINES:
                self._closed(conn)
            return
        cmd, fields = parse_line(line)
        if cmd == "initack":  # one rank per connection
            return self._closed(conn)
        if self.failure is not None and cmd == "barrier_in":
            # Only where a rank would block on the lost one: rc=1 on put/get
            # sent MPICH 5.0.2 (UCX) into an assertion (SIGABRT).
            return self._reply(conn, RESPONSE[cmd], rc=1, msg=self.failure)
        handler = _HANDLERS.get(cmd or "")
        if handler is not None:
            return handler(self, conn, fields)
        if cmd in RESPONSE:  # publish/lookup/unpublish: not served
            return self._reply(conn, RESPONSE[cmd], rc=1, msg="%s is not supported" % cmd)
        log.warning("rank %s sent an unknown PMI command: %r", conn.rank, line[:200])

    def _initack(self, conn, line):
        """A connection's first line: ``cmd=initack pmiid=<PMI_ID>``, with the
        PMI_ID of a rank not yet in. Anything else closes it (a client
        without PMI_ID, which MPICH would run as a world of 1, included)."""
        cmd, fields = parse_line(line)
        try:
            rank = self._ids.get(int(fields.get("pmiid") or "")) if cmd == "initack" else None
        except ValueError:
            rank = None
        if rank is None or rank in self._ranks:
            log.warning("PMI server refused a connection: its first line was not the initack "
                        "of a rank still to come")
            if cmd in RESPONSE:
                self._reply(conn, RESPONSE[cmd], rc=1,
                            msg="not a rank of this job (set PMI_ID as the launcher gave it)")
            return self._closed(conn)
        if self.failure is not None:
            self._reply(conn, "initack", rc=1, msg=self.failure)
            return self._closed(conn)
        conn.rank = rank
        self._ranks[rank] = conn
        self._send(conn, "cmd=initack rc=0 rank=%d size=%d appnum=0 debug=0\n"
                   "cmd=set size=%d\ncmd=set rank=%d\ncmd=set debug=0\n"
                   % (rank, self.size, self.size, rank))
        if len(self._ranks) == self.size:
            self._stop_listening()

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
        key = key[:KEYLEN_MAX]
        if self._owner.get(key, conn.rank) != conn.rank:
            return self._reply(conn, "put_result", rc=1,
                               msg="key %s belongs to rank %d" % (key, self._owner[key]))
        if len(self.kvs) >= 1 << 20:
            return self._reply(conn, "put_result", rc=1, msg="the key-value space is full")
        self.kvs[key] = (fields.get("value") or "")[:2 * VALLEN_MAX]
        self._owner[key] = conn.rank
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
    "init": PmiCommands._init, "abort": PmiCommands._abort,
    "finalize": PmiCommands._finalize, "put": PmiCommands._put, "get": PmiCommands._get,
    "barrier_in": PmiCommands._barrier_in,
    "get_maxes": lambda s, c, f: s._reply(c, "maxes", kvsname_max=KVSNAME_MAX,
                                          keylen_max=KEYLEN_MAX, vallen_max=VALLEN_MAX),
    "get_appnum": lambda s, c, f: s._reply(c, "appnum", appnum=0),
    "get_my_kvsname": lambda s, c, f: s._reply(c, "my_kvsname", kvsname=s.kvsname),
    "get_universe_size": lambda s, c, f: s._reply(c, "universe_size", size=s.size),
}
