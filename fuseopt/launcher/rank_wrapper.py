"""Runs one rank's command and records how it ended, for fuseoptrun's summary.

mpiexec starts ``python -m fuseopt.launcher.rank_wrapper CMD...`` per rank.
The wrapper forwards termination signals to the command, makes sure the
command dies with it (PR_SET_PDEATHSIG), and writes rank-N.json into
$FUSEOPT_LAUNCH_DIR with the exit code or signal and the time it ended.

When the command failed, the wrapper lingers a moment before exiting: mpiexec
kills the whole job as soon as one rank's process is gone, and the other ranks
need that moment to read the record and raise an error naming this rank
(fuseopt/_peer_watch.py) rather than die silently.
"""
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time

# Long enough for the survivors' watchers (polling every 0.2 s) to see the
# record and report; short enough not to hold up the end of a failed job.
LINGER_S = float(os.environ.get("FUSEOPT_LOST_RANK_LINGER_S", "5"))


def _die_with_parent():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    rank = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    # close_fds=False: the rank inherits the PMI connection (PMI_FD) from mpiexec.
    child = subprocess.Popen(argv, preexec_fn=_die_with_parent, close_fds=False)

    def forward(signum, _frame):
        child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    code = child.wait()
    status_dir = os.environ.get("FUSEOPT_LAUNCH_DIR")
    if status_dir:
        record = {"rank": rank, "host": socket.gethostname(), "pid": child.pid,
                  "exit_code": code if code >= 0 else None,
                  "signal": -code if code < 0 else None, "end_time": time.time()}
        try:
            # On another host than fuseoptrun's the directory does not exist
            # yet; ranks there still read each other's records.
            os.makedirs(status_dir, exist_ok=True)
            tmp = os.path.join(status_dir, ".rank-%d.json.tmp" % rank)
            with open(tmp, "w") as f:
                json.dump(record, f)
            os.replace(tmp, os.path.join(status_dir, "rank-%d.json" % rank))
        except OSError as e:
            print("fuseoptrun: rank %d could not record its exit: %s" % (rank, e), file=sys.stderr)
        else:
            if code != 0:
                _linger(status_dir, int(os.environ.get("PMI_SIZE", "0")))
    return code if code >= 0 else 128 - code


def _linger(status_dir, size):
    """Waits until every rank has a record, or LINGER_S."""
    deadline = time.time() + LINGER_S
    while time.time() < deadline:
        if size and sum(n.startswith("rank-") for n in os.listdir(status_dir)) >= size:
            return
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
