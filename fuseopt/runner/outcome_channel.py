"""How ranks started far from the caller (Spark tasks) send back their output
lines and outcomes: one authenticated connection per rank to a listener in
the caller's process.

Messages are pickled, so the listener must trust what it unpickles: each
connection proves it holds the job's random key (multiprocessing.connection's
HMAC challenge, both ways) before anything of it is read, and the key travels
only inside the job's own closure. The handshake alone would let someone on
the path inject frames afterwards, so every frame carries an HMAC-SHA256 of
(its connection's key, its sequence number, its bytes), checked before it is
unpickled: a forged, replayed, reordered or truncated frame ends the
connection unread. A connection's key is derived from the job key and a
random id the listener sends (itself MACed). Connections still proving
themselves are capped (the oldest goes) and given AUTH_TIMEOUT_S. Messages are tuples ``(kind, rank, *data)``:
``("out", rank, stream, text)``, ``("result", rank, payload)``,
``("error", rank, payload)`` (payloads as fuseopt/runner/task.py writes
them), ``("exit", rank, returncode, host, stopped)`` (stopped: the process was
still running when the listener said stop). The listener's only message
back is ``("stop",)``, when the job has failed elsewhere: the rank's
process is to end at once (so does it when the listener goes away).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple
import hashlib
import hmac
import os
import pickle
import socket
import threading
import time
from multiprocessing.connection import (AuthenticationError, Client, Listener, answer_challenge,
                                        deliver_challenge)

MAX_UNPROVEN = 64       # connections in their handshake at once (the oldest goes)
AUTH_TIMEOUT_S = 10.0
_MAC = 32               # bytes of HMAC-SHA256


def _mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()


def _drop(conn) -> None:
    """Ends a connection that another thread is blocked reading: shutting
    the socket down wakes that read (closing the fd would not)."""
    try:
        sock = socket.socket(fileno=os.dup(conn.fileno()))
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class FrameError(Exception):
    """A frame whose HMAC does not check: not from the peer that proved itself."""


class _Frames:
    """Sequence-numbered, MACed frames over a multiprocessing Connection."""

    def __init__(self, conn, key: bytes, sending: bytes, receiving: bytes):
        self.conn, self.key = conn, key
        self._out, self._in = sending, receiving  # direction labels: no reflection
        self._sent = self._received = 0

    def send(self, message: Any) -> None:
        body = pickle.dumps(message)
        seq = self._sent.to_bytes(8, "big")
        self._sent += 1
        self.conn.send_bytes(_mac(self.key, self._out, seq, body) + body)

    def recv(self) -> Any:
        frame = self.conn.recv_bytes()
        seq = self._received.to_bytes(8, "big")
        body = frame[_MAC:]
        if len(frame) < _MAC or not hmac.compare_digest(frame[:_MAC],
                                                        _mac(self.key, self._in, seq, body)):
            raise FrameError("a frame failed its HMAC check")
        self._received += 1
        return pickle.loads(body)  # only now: it is the peer's


class OutcomeListener:
    """Accepts the ranks' connections in daemon threads; ``on_message`` is
    called for each message, from those threads."""

    def __init__(self, host: str, on_message: Callable[[tuple], None]):
        self.key = os.urandom(32)
        self._listener = Listener((host, 0), backlog=128)
        self.address: Tuple[str, int] = self._listener.address  # type: ignore[assignment]
        self._on_message = on_message
        self._closed = False
        self._connections: List[_Frames] = []
        self._unproven: List[Tuple[float, Any]] = []  # (accepted at, connection)
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="fuseopt-outcomes", daemon=True).start()

    def _accept(self):
        while not self._closed:
            try:
                conn = self._listener.accept()
            except OSError:
                if self._closed:
                    return
                continue
            with self._lock:
                while len(self._unproven) >= MAX_UNPROVEN:
                    _drop(self._unproven.pop(0)[1])  # its handshake fails in its thread
                self._unproven.append((time.monotonic(), conn))
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        timer = threading.Timer(AUTH_TIMEOUT_S, _drop, (conn,))  # a silent peer is dropped
        timer.daemon = True
        timer.start()
        with conn:
            try:  # here, not in accept: a peer that never answers holds up only itself
                deliver_challenge(conn, self.key)
                answer_challenge(conn, self.key)
                conn_id = os.urandom(16)
                conn.send_bytes(conn_id + _mac(self.key, b"id", conn_id))
            except (AuthenticationError, EOFError, OSError):
                return
            finally:
                timer.cancel()
                with self._lock:
                    self._unproven = [(t, c) for t, c in self._unproven if c is not conn]
            frames = _Frames(conn, _mac(self.key, b"connection", conn_id), b"listener", b"rank")
            with self._lock:
                self._connections.append(frames)
            while True:
                try:
                    message = frames.recv()
                except (EOFError, OSError, FrameError):
                    return
                if isinstance(message, tuple) and message:
                    self._on_message(message)

    def stop_ranks(self) -> None:
        """Tells every connected rank to end its process now."""
        with self._lock:
            connections = list(self._connections)
        for frames in connections:
            try:
                frames.send(("stop",))
            except OSError:
                pass

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            for frames in self._connections:
                frames.conn.close()  # the ranks' watch sees the end


class OutcomeSender:
    """The rank's end: thread-safe ``send`` of one message."""

    def __init__(self, address: Tuple[str, int], key: bytes):
        self._conn = Client(address, authkey=key)
        hello = self._conn.recv_bytes(256)
        conn_id, mac = hello[:16], hello[16:]
        if not hmac.compare_digest(mac, _mac(key, b"id", conn_id)):
            self._conn.close()
            raise AuthenticationError("the outcome listener's connection id failed its HMAC check")
        self._frames = _Frames(self._conn, _mac(key, b"connection", conn_id), b"rank", b"listener")
        self._lock = threading.Lock()

    def send(self, *message: Any) -> None:
        with self._lock:
            self._frames.send(message)

    def watch(self, on_stop: Callable[[], None]) -> None:
        """Calls ``on_stop`` (in a daemon thread) when the listener says
        stop or goes away."""
        def wait():
            try:
                self._frames.recv()  # "stop", or anything: a bad frame ends it too
            except (EOFError, OSError, FrameError):
                pass
            on_stop()
        threading.Thread(target=wait, name="fuseopt-stop-watch", daemon=True).start()

    def close(self) -> None:
        self._conn.close()


def by_rank(messages, kind: str) -> Dict[int, Any]:
    """{rank: first data field} of the messages of one kind."""
    return {m[1]: m[2] for m in messages if m[0] == kind}


