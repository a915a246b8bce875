"""Runs one rank's command and records how it ended, for fuseoptrun's summary.

mpiexec starts ``python -m fuseopt.launcher.rank_wrapper CMD...`` per rank.
The wrapper gives the command torchrun's variables (rank_env.py), forwards
termination signals to it, makes sure it dies with the wrapper
(PR_SET_PDEATHSIG), and writes start-N.json and rank-N.json into
$FUSEOPT_LAUNCH_DIR (fuseopt/base/launch_records.py).

A command that exits 0 while fuseopt is still running in it (no shutdown():
``os._exit(0)``, a library that ended the process) is a failure: the other
ranks would wait for it in their next collective. The wrapper records it as
unclean and exits 1, so that the job fails and says which rank it was.

When the command failed, the wrapper lingers a moment before exiting: mpiexec
kills the whole job as soon as one rank's process is gone, and the other ranks
need that moment to read the record and raise an error naming this rank
(fuseopt/core/peer_watch.py) rather than die silently. After a clean exit it
waits for the other ranks started on its host to record theirs (_linger).
"""
import os
import signal
import socket
import subprocess
import sys
import time

from ..base import launch_records
from . import parent_death, rank_env

# Long enough for the survivors' watchers (polling every 0.2 s) to see the
# record and report; short enough not to hold up the end of a failed job.
DEFAULT_LINGER_S = 5.0
LINGER_S = float(os.environ.get("FUSEOPT_LOST_RANK_LINGER_S", DEFAULT_LINGER_S))

UNCLEAN_EXIT_CODE = 1


def launch_argv(parts, np_flag):
    """The launcher's argv tail for the (possibly MPMD) job ``parts``, [(ranks,
    command), ...]: each command under this wrapper, parts joined by ":" (Hydra
    and Open MPI alike), ranks given with ``np_flag``."""
    argv = []
    for i, (ranks, command) in enumerate(parts):
        if i:
            argv.append(":")
        argv += [np_flag, str(ranks), sys.executable, "-m", "fuseopt.launcher.rank_wrapper"]
        argv += command
    return argv


def exit_record(rank, pid, code, status_dir):
    """How the command ended, as rank-N.json holds it."""
    state = launch_records.read_records(status_dir, "state-").get(rank, {}).get("fuseopt")
    return {"rank": rank, "host": socket.gethostname(), "pid": pid,
            "exit_code": code if code >= 0 else None, "signal": -code if code < 0 else None,
            "unclean": code == 0 and state == launch_records.RUNNING, "end_time": time.time()}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    # mpiexec's proxy gone (mpiexec killed with fuseoptrun): SIGTERM, which
    # is forwarded to the command below, so that the rank ends too.
    parent_death.signal_on_parent_death(signal.SIGTERM)
    rank = launch_records.env_rank()
    status_dir = launch_records.directory()
    env = dict(os.environ, **rank_env.torchrun_variables(os.environ, rank_env.usable_cpus()))
    # close_fds=False: the rank inherits the PMI connection (PMI_FD) from mpiexec.
    child = subprocess.Popen(argv, preexec_fn=parent_death.signal_on_parent_death,
                             close_fds=False, env=env)
    if status_dir:
        launch_records.write_record(status_dir, "start-", rank, {
            "rank": rank, "host": socket.gethostname(), "pid": child.pid})

    def forward(signum, _frame):
        child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    code = child.wait()
    if not status_dir:
        return code if code >= 0 else 128 - code
    record = exit_record(rank, child.pid, code, status_dir)
    error = launch_records.write_record(status_dir, "rank-", rank, record)
    if error is not None:
        print("fuseoptrun: rank %d could not record its exit: %s" % (rank, error),
              file=sys.stderr)
    if record["unclean"]:
        print("fuseoptrun: rank %d %s" % (rank, launch_records.describe_exit(record)),
              file=sys.stderr, flush=True)
        code = UNCLEAN_EXIT_CODE
    if error is None:
        _linger(status_dir, launch_records.env_size() if code != 0 else None)
    return code if code >= 0 else 128 - code


def _linger(status_dir, size):
    """Waits, at most LINGER_S, until every rank has an exit record (``size``
    of them), or for a clean exit until every rank started here has one.

    The clean case matters after fuseopt skipped MPI_Finalize (its loop
    stopped on an error the script caught): mpiexec takes the first of those
    processes to end for a bad termination and kills the others' wrappers,
    so a rank still exiting would vanish without a record and fail the job.
    The wrapper holds the rank's PMI connection too, so mpiexec sees the
    process end only when the wrapper does."""
    deadline = time.time() + LINGER_S
    while time.time() < deadline:
        ended = launch_records.read_records(status_dir, "rank-")
        if size is not None:
            if size and len(ended) >= size:
                return
        elif set(launch_records.read_records(status_dir, "start-")) <= set(ended):
            return
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
