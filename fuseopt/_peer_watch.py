"""Turns the launcher's news of a lost rank into an error on this rank.

fuseoptrun's rank wrapper records in $FUSEOPT_LAUNCH_DIR how each rank's
process ended. A rank that crashes or is killed (SIGKILL, the OOM killer)
gives the survivors no error from MPI: they would block in their next
collective until the launcher killed them, and die without saying why. This
thread watches for such records and aborts the local runtime with an error
naming the lost rank, so that the training loop raises RankFailedError. The
core's own watchdog (FUSEOPT_PEER_TIMEOUT_S) covers what no record shows: a
frozen process, a lost network, another launcher.
"""
import os
import signal
import threading
import time

from .launcher.records import read_records

POLL_S = 0.2


def _describe(record):
    if record.get("signal"):
        try:
            how = "was killed by %s" % signal.Signals(record["signal"]).name
        except ValueError:
            how = "was killed by signal %d" % record["signal"]
    else:
        how = "exited with code %d" % record["exit_code"]
    return "rank %d (host %s, pid %s) was lost: its process %s %.1f s ago" % (
        record["rank"], record.get("host", "?"), record.get("pid", "?"), how,
        max(0.0, time.time() - record.get("end_time", time.time())))


def lost_rank(directory, my_rank):
    """The record of the first peer whose process ended abnormally, or None."""
    lost = [r for rank, r in read_records(directory).items()
            if rank != my_rank and (r.get("exit_code") != 0 or r.get("signal"))]
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


def start(my_rank, size, abort):
    """A PeerWatch when launched by fuseoptrun with peers to watch, else None."""
    directory = os.environ.get("FUSEOPT_LAUNCH_DIR")
    if size < 2 or not directory or not os.path.isdir(directory):
        return None
    return PeerWatch(directory, my_rank, abort)
