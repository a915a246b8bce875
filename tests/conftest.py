"""Shared fixtures. Multi-rank tests start small worker scripts under
fuseoptrun (and so mpiexec); each worker asserts and exits non-zero on
failure, and the parent checks every rank's exit code. Every launch has a
timeout, so a hang fails in seconds rather than at CI's limit."""
import ast
import functools
import os
import re
import signal
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.join(HERE, "workers")

# fuseopt's TensorFlow kernel is built into a cache of the session's own, so
# each run starts cold as on a fresh machine (the first TensorFlow job's
# ranks build it together) and the user's own cache is left alone.
os.environ.setdefault("FUSEOPT_CACHE_DIR", tempfile.mkdtemp(prefix="fuseopt-test-cache-"))


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


def drive(script, *cases, timeout=240):
    """Runs tests/workers/<script> with plain python, as a user runs a script
    that starts jobs itself (fuseopt.run, Ray, Spark), and returns
    ({case: value} of its ``CASE name: value`` lines, its output)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [WORKERS,
                                                                      os.environ.get("PYTHONPATH")])))
    env.pop("FUSEOPT_MPIEXEC", None)
    proc = subprocess.run([sys.executable, os.path.join(WORKERS, script), *cases],
                          capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = {}
    for line in proc.stdout.splitlines():
        if line.startswith("CASE "):
            name, _, value = line[5:].partition(": ")
            found[name] = ast.literal_eval(value)
    return found, proc.stdout + proc.stderr


@functools.lru_cache(maxsize=None)
def checks_listed(worker, name="CHECKS"):
    """How many checks tests/workers/<worker> lists in its list ``name``, read
    from its source (importing it would import its frameworks here): tests
    that count "N checks, 0 failed" take N from it, so that adding a check
    to a worker does not break them, while a worker that stops early or
    skips one still does."""
    with open(os.path.join(WORKERS, worker)) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            assert isinstance(node.value, ast.List), "%s.%s is not a list literal" % (worker, name)
            return len(node.value.elts)
    raise AssertionError("%s has no list %s" % (worker, name))


@functools.lru_cache(maxsize=None)
def trained_by_fuseoptrun():
    """(rank, size, weights' sha256) of tests/workers/run_train.py's loop run
    as a 2-rank fuseoptrun job, sorted by rank (run once per session: the
    fuseopt.run, Ray and Spark tests each compare with it)."""
    job = launch(2, "run_train.py").output
    # Two ranks' lines may share one line of the job's output.
    return sorted(ast.literal_eval(found)
                  for found in re.findall(r"TRAINED (\(\d+, \d+, '[0-9a-f]+'\))", job))


@pytest.fixture
def run_ranks():
    return launch


@pytest.fixture
def run_mpmd():
    return launch_mpmd
