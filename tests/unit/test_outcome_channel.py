"""The outcome channel (fuseopt/runner/outcome_channel.py) against frames
that do not come from the rank that proved itself: a forged or replayed
frame ends the connection before anything of it is unpickled. Loopback only."""
import pickle
import socket
import threading
import time

import pytest

from fuseopt.runner import outcome_channel
from fuseopt.runner.outcome_channel import OutcomeListener, OutcomeSender

UNPICKLED = []


class Payload:
    """Unpickling it runs code: what an injected pickle would do."""

    def __reduce__(self):
        return (UNPICKLED.append, ("ran",))


def listener():
    got, event = [], threading.Event()

    def on_message(m):
        got.append(m)
        event.set()
    return OutcomeListener("127.0.0.1", on_message), got, event


def wait_for(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_frames_from_the_proven_rank_arrive():
    lis, got, event = listener()
    try:
        sender = OutcomeSender(lis.address, lis.key)
        sender.send("out", 1, "stdout", "hello")
        assert event.wait(5) and got == [("out", 1, "stdout", "hello")]
        stopped = threading.Event()
        sender.watch(stopped.set)
        lis.stop_ranks()
        assert stopped.wait(5)
    finally:
        lis.close()


@pytest.mark.parametrize("forgery", ["no mac", "replayed", "other direction"])
def test_an_injected_frame_is_refused_unread(forgery):
    """Finding 3: after the handshake, frames were plain pickles that the
    driver unpickled: whoever is on the path could run code in it."""
    UNPICKLED.clear()
    lis, got, event = listener()
    try:
        sender = OutcomeSender(lis.address, lis.key)
        sender.send("out", 0, "stdout", "first")
        assert event.wait(5)
        frames = sender._frames
        body = pickle.dumps(("result", 0, Payload()))
        if forgery == "no mac":
            raw = b"\0" * 32 + body
        elif forgery == "replayed":  # a genuine frame, sent again out of sequence
            seq = (0).to_bytes(8, "big")
            raw = outcome_channel._mac(frames.key, b"rank", seq, body) + body
        else:  # MACed as the listener's own direction (a reflection)
            seq = (1).to_bytes(8, "big")
            raw = outcome_channel._mac(frames.key, b"listener", seq, body) + body
        sender._conn.send_bytes(raw)
        wait_for(lambda: lis._connections and lis._connections[0].conn.closed)
        assert UNPICKLED == [] and got == [("out", 0, "stdout", "first")]
    finally:
        lis.close()


def test_a_peer_without_the_key_gets_nothing_unpickled():
    UNPICKLED.clear()
    lis, got, _ = listener()
    try:
        with pytest.raises(Exception):
            OutcomeSender(lis.address, b"not the key" * 3)
        raw = socket.create_connection(lis.address, timeout=5)
        raw.sendall(pickle.dumps(Payload()))
        raw.close()
        time.sleep(0.3)
        assert UNPICKLED == [] and got == []
    finally:
        lis.close()


def test_silent_and_crowding_peers_do_not_keep_ranks_out(monkeypatch):
    monkeypatch.setattr(outcome_channel, "AUTH_TIMEOUT_S", 0.5)
    lis, got, event = listener()
    crowd = []
    try:
        for _ in range(100):
            crowd.append(socket.create_connection(lis.address, timeout=5))
        wait_for(lambda: len(lis._unproven) <= outcome_channel.MAX_UNPROVEN)
        sender = OutcomeSender(lis.address, lis.key)
        sender.send("exit", 0, 0, "host")
        assert event.wait(5)
        wait_for(lambda: not lis._unproven)  # the silent ones were dropped
    finally:
        for c in crowd:
            c.close()
        lis.close()
