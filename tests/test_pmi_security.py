"""The PMI server (fuseopt/runner/pmi_server.py, used by the Ray and Spark
integrations) against clients that are not ranks of its job: on a live
server with raw sockets (each finding of the security review, named in its
test), and while a real 2-rank MPI job starts through it. Every socket stays
on loopback; every wait is bounded."""
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from fuseopt.runner import pmi_server
from fuseopt.runner.pmi_server import PmiServer
from fuseopt.runner.rank_env import rank_environment


def connect(server):
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def request(sock, line):
    """Sends one line, returns the first reply line ('' if closed)."""
    sock.sendall(line.encode() + b"\n")
    data = b""
    while not data.endswith(b"\n"):
        try:
            chunk = sock.recv(4096)
        except (ConnectionResetError, socket.timeout):
            return ""
        if not chunk:
            break
        data += chunk
    return data.decode().split("\n")[0]


def closed_by_server(sock, timeout=5.0):
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def proven(server, rank):
    sock = connect(server)
    reply = request(sock, "cmd=initack pmiid=%s" % server.env(rank)["PMI_ID"])
    assert reply.startswith("cmd=initack rc=0 rank=%d" % rank), reply
    return sock


@pytest.fixture
def server():
    failures = []
    s = PmiServer(3, on_failure=lambda reason, kind: failures.append((kind, reason))).start()
    s.failures = failures
    yield s
    s.close()


def test_pmi_ids_are_not_ranks_and_a_claim_of_rank_0_is_refused(server):
    """Finding 2: a peer could claim a free rank by sending its number."""
    ids = [int(server.env(r)["PMI_ID"]) for r in range(3)]
    assert len(set(ids)) == 3 and not set(ids) & {0, 1, 2}
    for guess in ("0", "1", str(ids[0] + 1), "x", ""):
        sock = connect(server)
        assert "rc=1" in request(sock, "cmd=initack pmiid=" + guess)
        assert closed_by_server(sock)
    assert not server._ranks and not server.failures


def test_nothing_is_served_before_the_initack(server):
    """Finding 1: get, put, abort and mcmd lines were served to anyone."""
    for line in ("cmd=get key=x", "cmd=put key=k value=v", "cmd=abort exitcode=9",
                 "mcmd=spawn", "cmd=get_my_kvsname"):
        sock = connect(server)
        sock.sendall(line.encode() + b"\n")
        assert closed_by_server(sock), line
    assert not server.kvs and server.failure is None


def test_one_rank_per_connection_and_keys_stay_their_owners(server):
    """Finding 2: one connection could hold several ranks and overwrite
    other ranks' keys."""
    first = proven(server, 0)
    assert request(first, "cmd=put key=card0 value=mine") == "cmd=put_result rc=0"
    second = proven(server, 1)
    reply = request(second, "cmd=put key=card0 value=theirs")
    assert reply.startswith("cmd=put_result rc=1") and "belongs\\ to\\ rank\\ 0" in reply, reply
    assert request(second, "cmd=get key=card0") == "cmd=get_result rc=0 value=mine"
    second.sendall(b"cmd=initack pmiid=%s\n" % server.env(2)["PMI_ID"].encode())
    assert closed_by_server(second)  # a second initack on one connection
    assert server.failure_kind == "lost"  # rank 1 was in, then dropped: the job fails


def test_a_client_that_never_reads_does_not_stall_the_server(server):
    """Finding 1: sendall under the lock blocked the only server thread."""
    flooder = proven(server, 0)
    flooder.settimeout(None)  # it blocks as long as the server does not read
    done = threading.Event()

    def flood():
        try:
            while not done.is_set():
                flooder.sendall(b"cmd=get_maxes\n" * 1000)
        except OSError:
            pass  # the server cut it off
    threading.Thread(target=flood, daemon=True).start()
    try:
        other = proven(server, 1)
        started = time.monotonic()
        for _ in range(20):
            assert request(other, "cmd=get_appnum").startswith("cmd=appnum rc=0")
        assert time.monotonic() - started < 5
        deadline = time.monotonic() + 60
        while not server._ranks[0].closed:
            assert time.monotonic() < deadline, "the flooder was never cut off"
            time.sleep(0.05)
        assert server.failure_kind == "lost"  # a rank that stops reading is lost
    finally:
        done.set()


@pytest.mark.parametrize("payload", [b"x" * (1 << 20), b"\n" * (1 << 20)],
                         ids=["1 MiB line", "1 MiB of newlines"])
def test_huge_lines_and_newline_floods_are_cut_off(server, payload):
    """Finding 1: the buffer was split per line (quadratic) and unbounded."""
    sock = connect(server)
    try:
        sock.sendall(payload)
    except OSError:
        pass
    assert closed_by_server(sock)
    rank = proven(server, 0)
    started = time.monotonic()
    try:
        rank.sendall(b"\n" * (1 << 20))  # a proven client: empty lines, quietly ignored
    except OSError:
        pass
    assert request(rank, "cmd=get_appnum").startswith("cmd=appnum rc=0")
    assert time.monotonic() - started < 10


def test_500_connections_do_not_keep_ranks_out(server):
    """Finding 1: no cap on connections; EMFILE killed the accept thread."""
    crowd = []
    for _ in range(500):
        try:
            crowd.append(connect(server))
        except OSError:
            break
    try:
        time.sleep(0.5)
        open_ones = sum(1 for c in server._selector.get_map().values()
                        if isinstance(c.data, pmi_server._Connection))
        assert open_ones <= pmi_server.MAX_UNPROVEN
        ranks = [proven(server, rank) for rank in range(3)]
        # Every rank is in: the listener is closed, and so is the crowd.
        deadline = time.monotonic() + 5
        while True:
            try:
                connect(server).close()
            except OSError:
                break
            assert time.monotonic() < deadline, "still listening with every rank in"
            time.sleep(0.05)
        assert all(closed_by_server(c, 5) for c in crowd)
        assert server.failure is None and len(ranks) == 3
    finally:
        for c in crowd:
            c.close()


def test_silent_connections_are_closed_and_the_start_timeout_has_its_own_timer(monkeypatch):
    """Finding 1: the start timeout ran in the server thread, which a client
    could freeze; a silent connection was kept for ever."""
    monkeypatch.setattr(pmi_server, "AUTH_TIMEOUT_S", 0.5)
    failures = []
    s = PmiServer(2, connect_timeout=1.5,
                  on_failure=lambda reason, kind: failures.append(kind)).start()
    try:
        silent = connect(s)
        assert closed_by_server(silent, 5)
        with s._lock:  # the server thread cannot even take its lock: the timer fires anyway
            time.sleep(2.0)
        deadline = time.monotonic() + 5
        while not failures and time.monotonic() < deadline:
            time.sleep(0.05)
        assert failures == ["timeout"] and "did not start MPI" in s.failure
    finally:
        s.close()


RANK = """
import numpy as np, fuseopt
fuseopt.init()
out = fuseopt.allreduce(np.full(4, fuseopt.rank() + 1.0), name="x", op=fuseopt.Sum)
assert np.allclose(out, 3.0), out
print("rank", fuseopt.rank(), "ok", flush=True)
fuseopt.shutdown()
"""


def hostile_clients(server, stop):
    """What the review found, all at once, until stop is set."""
    def never_reads():
        try:
            s = connect(server)
            while not stop.is_set():
                s.sendall(b"cmd=get key=x\n" * 100)
        except OSError:
            pass

    def claims_rank_0():
        while not stop.is_set():
            try:
                request(connect(server), "cmd=initack pmiid=0")
            except OSError:
                pass

    def floods(payload):
        try:
            connect(server).sendall(payload)
        except OSError:
            pass

    def crowd():
        socks = []
        for _ in range(500):
            try:
                socks.append(connect(server))
            except OSError:
                break
        stop.wait(30)
        for s in socks:
            s.close()

    threads = [threading.Thread(target=f, args=a, daemon=True) for f, a in
               ((never_reads, ()), (claims_rank_0, ()), (floods, (b"\n" * (1 << 20),)),
                (floods, (b"y" * (1 << 20),)), (crowd, ()))]
    for t in threads:
        t.start()
    return threads


def test_a_real_job_starts_through_a_server_under_attack():
    failures = []
    server = PmiServer(2, connect_timeout=60,
                       on_failure=lambda reason, kind: failures.append(reason)).start()
    stop = threading.Event()
    attackers = hostile_clients(server, stop)
    try:
        time.sleep(0.5)  # the attack is under way before the ranks come
        ranks = [subprocess.Popen([sys.executable, "-c", RANK], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True,
                                  env=rank_environment(dict(os.environ), server.env(r), r, 2,
                                                       oversubscribed=False))
                 for r in range(2)]
        outputs = [p.communicate(timeout=120)[0] for p in ranks]
        assert [p.returncode for p in ranks] == [0, 0], outputs
        assert all("rank %d ok" % r in outputs[r] for r in range(2)), outputs
        assert server.wait(10) and not failures, failures
    finally:
        stop.set()
        server.close()
        for t in attackers:
            t.join(10)
