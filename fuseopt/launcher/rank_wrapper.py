"""Runs one rank's command and records how it ended, for fuseoptrun's summary.

mpiexec starts ``python -m fuseopt.launcher.rank_wrapper CMD...`` per rank.
The wrapper forwards termination signals to the command, makes sure the
command dies with it (PR_SET_PDEATHSIG), and writes rank-N.json into
$FUSEOPT_LAUNCH_DIR with the exit code or signal and the time it ended.
"""
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time


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
        tmp = os.path.join(status_dir, ".rank-%d.json.tmp" % rank)
        with open(tmp, "w") as f:
            json.dump(record, f)
        os.replace(tmp, os.path.join(status_dir, "rank-%d.json" % rank))
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
