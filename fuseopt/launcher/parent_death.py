"""Processes of a job that must not outlive the process that started them.

fuseoptrun starts mpiexec in a session of its own (so that its own signal
handling decides how the ranks stop), which also means that nothing stops
mpiexec and the ranks when fuseoptrun itself is killed (kill -9, the OOM
killer, a test harness's timeout): they ran on, holding the job's output
pipe open. Linux's PR_SET_PDEATHSIG sends a signal when the parent dies."""
import ctypes
import signal

_PR_SET_PDEATHSIG = 1


def signal_on_parent_death(sig=signal.SIGKILL):
    """In the calling process: receive ``sig`` when the parent dies (Linux;
    elsewhere nothing). Safe in a ``preexec_fn``."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig))
    except Exception:
        pass
