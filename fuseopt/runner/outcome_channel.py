"""How ranks started far from the caller (Spark tasks) send back their output
lines and outcomes: one authenticated connection per rank to a listener in
the caller's process.

Messages are pickled, so the listener must trust its peers: each connection
proves it holds the job's random key (multiprocessing.connection's HMAC
challenge) before anything of it is unpickled, and the key travels only
inside the job's own closure. Messages are tuples ``(kind, rank, *data)``:
``("out", rank, stream, text)``, ``("result", rank, payload)``,
``("error", rank, payload)`` (payloads as fuseopt/runner/task.py writes
them), ``("exit", rank, returncode, host)``. The listener's only message
back is ``("stop",)``, when the job has failed elsewhere: the rank's
process is to end at once (so does it when the listener goes away).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Tuple
import os
import threading
from multiprocessing.connection import (AuthenticationError, Client, Listener, answer_challenge,
                                        deliver_challenge)


class OutcomeListener:
    """Accepts the ranks' connections in daemon threads; ``on_message`` is
    called for each message, from those threads."""

    def __init__(self, host: str, on_message: Callable[[tuple], None]):
        self.key = os.urandom(32)
        self._listener = Listener((host, 0))
        self.address: Tuple[str, int] = self._listener.address  # type: ignore[assignment]
        self._on_message = on_message
        self._closed = False
        self._connections: list = []
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
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        with conn:
            try:  # here, not in accept: a peer that never answers holds up only itself
                deliver_challenge(conn, self.key)
                answer_challenge(conn, self.key)
            except (AuthenticationError, EOFError, OSError):
                return
            with self._lock:
                self._connections.append(conn)
            while True:
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    return
                if isinstance(message, tuple) and message:
                    self._on_message(message)

    def stop_ranks(self) -> None:
        """Tells every connected rank to end its process now."""
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.send(("stop",))
            except OSError:
                pass

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            for conn in self._connections:
                conn.close()  # the ranks' watch sees the end


class OutcomeSender:
    """The rank's end: thread-safe ``send`` of one message."""

    def __init__(self, address: Tuple[str, int], key: bytes):
        self._conn = Client(address, authkey=key)
        self._lock = threading.Lock()

    def send(self, *message: Any) -> None:
        with self._lock:
            self._conn.send(message)

    def watch(self, on_stop: Callable[[], None]) -> None:
        """Calls ``on_stop`` (in a daemon thread) when the listener says
        stop or goes away."""
        def wait():
            try:
                self._conn.recv()
            except (EOFError, OSError):
                pass
            on_stop()
        threading.Thread(target=wait, name="fuseopt-stop-watch", daemon=True).start()

    def close(self) -> None:
        self._conn.close()


def by_rank(messages, kind: str) -> Dict[int, Any]:
    """{rank: first data field} of the messages of one kind."""
    return {m[1]: m[2] for m in messages if m[0] == kind}


