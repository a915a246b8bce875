"""Turns the launcher's news of a lost rank into an error on this rank.

fuseoptrun's rank wrapper records in $FUSEOPT_LAUNCH_DIR how each rank's
process ended (fuseopt/base/launch_records.py). A rank that crashes, is killed
(SIGKILL, the OOM killer), exits 0 without shutting fuseopt down, or fails
before it ever reached init() gives the survivors no error from MPI: they
would block in their next collective, or in init(), until something killed
them, and die without saying why. This thread watches for such records from
before init() on, and calls ``abort(message)`` with an error naming the lost
rank, so that init() or the training loop raises RankFailedError. The core's
own watchdog (FUSEOPT_PEER_TIMEOUT_S) covers what no record shows: a frozen
process, a lost network, another launcher.
"""
import threading
import time

from ..base import launch_records

POLL_S = 0.2


def _describe(record):
    return "rank %d (host %s, pid %s) was lost: its process %s %.1f s ago" % (
        record["rank"], record.get("host", "?"), record.get("pid", "?"),
        launch_records.describe_exit(record),
        max(0.0, time.time() - record.get("end_time", time.time())))


def lost_rank(directory, my_rank):
    """The record of the first peer whose process ended badly, or None."""
    lost = [r for rank, r in launch_records.read_records(directory).items()
            if rank != my_rank and launch_records.ended_badly(r)]
    return min(lost, key=lambda r: r.get("end_time", 0)) if lost else None


class PeerWatch:
    """Polls the launch directory until stopped or a lost rank is found; then
    calls ``abort(message)`` once."""

    def __init__(self, directory, my_rank, abort):
        self._directory = directory
        self._rank = my_rank
        self._abort = abort
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fuseopt-peer-watch", daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(POLL_S):
            record = lost_rank(self._directory, self._rank)
            if record is not None:
                self._abort(_describe(record) + "; fuseopt on this rank has stopped: restart "
                            "the job, from a checkpoint")
                return

    def stop(self):
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()


def start(abort, environ=None):
    """A PeerWatch when launched by fuseoptrun with peers to watch, else None.
    Started before init(): a peer may fail before it reaches init()."""
    directory = launch_records.directory(environ)
    if launch_records.env_size(environ) < 2 or not directory:
        return None
    return PeerWatch(directory, launch_records.env_rank(environ), abort)
