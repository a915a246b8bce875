"""Shared fixtures. Multi-rank tests start small worker scripts under
fuseoptrun (and so mpiexec); each worker asserts and exits non-zero on
failure, and the parent checks every rank's exit code. Every launch has a
timeout, so a hang fails in seconds rather than at CI's limit."""
import os
import signal
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.join(HERE, "workers")


class RunResult:
    def __init__(self, code, output):
        self.code = code
        self.output = output

    def __repr__(self):
        return "RunResult(code=%d)\n%s" % (self.code, self.output)


def launch(nranks, script, *args, timeout=120, env=None, launcher_args=(), expect_ok=True):
    """Runs tests/workers/<script> on nranks ranks and returns a RunResult.

    With expect_ok (the default) every rank must exit 0."""
    return launch_mpmd([(nranks, script) + args], timeout=timeout, env=env,
                       launcher_args=launcher_args, expect_ok=expect_ok)


def launch_mpmd(programs, timeout=120, env=None, launcher_args=(), expect_ok=True,
                command_prefix=()):
    """One job of several programs, each ``(nranks, script, *args)``, joined by
    ``:`` as in ``fuseoptrun -np 2 a.py : -np 2 b.py``. ``command_prefix`` runs
    fuseoptrun under another command (an emulated host's namespaces)."""
    cmd = [*command_prefix, sys.executable, "-m", "fuseopt.launcher.cli", *launcher_args]
    for i, (nranks, script, *args) in enumerate(programs):
        cmd += ([":"] if i else []) + ["-np", str(nranks), sys.executable,
                                       os.path.join(WORKERS, script), *map(str, args)]
    nranks = sum(p[0] for p in programs)
    script = " : ".join(p[1] for p in programs)
    full_env = dict(os.environ)
    full_env.pop("FUSEOPT_MPIEXEC", None)
    full_env["PYTHONPATH"] = WORKERS + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.update(env or {})
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=full_env,
                            start_new_session=True, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail("%s on %d ranks timed out after %d s; output:\n%s"
                    % (script, nranks, timeout, out))
    result = RunResult(proc.returncode, out)
    if expect_ok and result.code != 0:
        pytest.fail("%s on %d ranks exited %d; output:\n%s" % (script, nranks, result.code, out))
    return result


@pytest.fixture
def run_ranks():
    return launch


@pytest.fixture
def run_mpmd():
    return launch_mpmd
