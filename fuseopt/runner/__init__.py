"""``fuseopt.run``: Horovod's ``horovod.run`` / ``horovod.runner.run``.
Runs a Python function on every rank of a new job and returns the values it
returned, in rank order, from a plain Python session or a notebook::

    def train(lr):
        import fuseopt.torch as hvd
        hvd.init()
        ...
        return hvd.rank(), final_loss

    results = fuseopt.run(train, args=(0.1,), num_proc=2)

The function, its arguments and everything it refers to are pickled with
cloudpickle (a function defined in a notebook travels by value) into a
private temporary directory; the job is an ordinary ``fuseoptrun`` job
(mpiexec) whose ranks run fuseopt/runner/task.py. Every argument maps to the
horovodrun flag of the same meaning, which fuseoptrun honours or refuses
with a reason. The ranks' output is copied to ``sys.stdout`` as it comes.
If a rank raises, ``run`` raises that exception (with a note naming the rank
and holding its traceback); the rank that failed first is blamed, not the
ranks that then lost their peer.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence
import collections
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import warnings

from ..base.errors import RankFailedError, ShutDownError, UnsupportedError

_FAILURES_OF_OTHERS = (RankFailedError.__name__, ShutDownError.__name__)


def run(func: Callable[..., Any], args: Sequence[Any] = (), kwargs: Optional[Dict[str, Any]] = None,
        num_proc: int = 1, min_num_proc: Optional[int] = None,
        max_num_proc: Optional[int] = None, slots: Optional[int] = None,
        reset_limit: Optional[int] = None, cooldown_range: Any = None,
        hosts: Optional[str] = None, hostfile: Optional[str] = None,
        host_discovery_script: Optional[str] = None, start_timeout: Optional[float] = None,
        ssh_port: Optional[int] = None, ssh_identity_file: Optional[str] = None,
        disable_cache: Optional[bool] = None, output_filename: Optional[str] = None,
        verbose: Optional[bool] = None, use_gloo: Optional[bool] = None,
        use_mpi: Optional[bool] = None, mpi_args: Optional[str] = None,
        network_interface: Optional[str] = None,
        network_interfaces: Optional[Sequence[str]] = None,
        executable: Optional[str] = None, np: Optional[int] = None,
        min_np: Optional[int] = None, max_np: Optional[int] = None) -> List[Any]:
    """Runs ``func(*args, **kwargs)`` on ``num_proc`` ranks and returns the
    list of their return values, index = rank (with ``min_num_proc``, an
    elastic job: the first ``min_num_proc`` values, as Horovod). The
    arguments are horovodrun's (see the module docstring); ``use_gloo`` and
    ``cooldown_range`` are refused (fuseopt runs over MPI and keeps a lost
    host out for the rest of the job)."""
    num_proc, min_num_proc, max_num_proc, network_interfaces = _deprecated_spellings(
        num_proc, min_num_proc, max_num_proc, network_interfaces, np, min_np, max_np,
        network_interface)
    if hosts is not None and hostfile is not None:
        raise ValueError("Argument hosts and hostfile only allow one provided.")
    if use_gloo and use_mpi:
        raise ValueError("Argument use_gloo and use_mpi only allow one set True.")
    if use_gloo:
        raise UnsupportedError("fuseopt.run(use_gloo=True): fuseopt always runs over MPI "
                               "(the mpich wheel); leave use_gloo unset")
    if cooldown_range is not None:
        raise UnsupportedError("fuseopt.run(cooldown_range=...): fuseoptrun keeps a lost host "
                               "out for the rest of the job (no cooldown)")
    flags = _launcher_flags(num_proc, min_num_proc, max_num_proc, slots, reset_limit, hosts,
                            hostfile, host_discovery_script, start_timeout, ssh_port,
                            ssh_identity_file, disable_cache, output_filename, verbose, mpi_args,
                            network_interfaces)
    job_dir = tempfile.mkdtemp(prefix="fuseopt-run-")  # private (0700): pickles are trusted
    try:
        _write_function(job_dir, func, tuple(args), dict(kwargs or {}))
        command = [sys.executable, "-m", "fuseopt.launcher.cli", *flags,
                   executable or sys.executable, "-m", "fuseopt.runner.task", job_dir]
        code, tail = _launch(command)
        return _collect(job_dir, code, tail, min_num_proc)
    finally:
        shutil.rmtree(job_dir, ignore_errors=True)


def _deprecated_spellings(num_proc, min_num_proc, max_num_proc, network_interfaces, np, min_np,
                          max_np, network_interface):
    """Horovod's older argument names, with its deprecation warnings."""
    for old, new, value in (("np", "num_proc", np), ("min_np", "min_num_proc", min_np),
                            ("max_np", "max_num_proc", max_np),
                            ("network_interface", "network_interfaces", network_interface)):
        if value is not None:
            warnings.warn("%s is deprecated, use %s instead" % (old, new), DeprecationWarning,
                          stacklevel=3)
    if np is not None:
        num_proc = np
    if min_np is not None:
        min_num_proc = min_np
    if max_np is not None:
        max_num_proc = max_np
    if network_interface:
        network_interfaces = network_interface.split(",")
    return num_proc, min_num_proc, max_num_proc, network_interfaces


def _launcher_flags(num_proc, min_num_proc, max_num_proc, slots, reset_limit, hosts, hostfile,
                    host_discovery_script, start_timeout, ssh_port, ssh_identity_file,
                    disable_cache, output_filename, verbose, mpi_args, network_interfaces):
    """fuseoptrun's command line for these arguments (horovodrun's flags)."""
    valued = (("-np", num_proc), ("--min-np", min_num_proc), ("--max-np", max_num_proc),
              ("--slots-per-host", slots), ("--reset-limit", reset_limit), ("-H", hosts),
              ("--hostfile", hostfile), ("--host-discovery-script", host_discovery_script),
              ("--start-timeout", start_timeout), ("--ssh-port", ssh_port),
              ("--ssh-identity-file", ssh_identity_file),
              ("--output-filename", output_filename), ("--mpi-args", mpi_args),
              ("--network-interfaces",
               ",".join(network_interfaces) if network_interfaces else None))
    flags = []
    for flag, value in valued:
        if value is not None:
            flags += [flag, str(value)]
    if disable_cache:
        flags.append("--disable-cache")
    if verbose:
        flags.append("--verbose")
    return flags


def _write_function(job_dir, func, args, kwargs):
    import cloudpickle
    from .task import FUNCTION_FILE
    try:
        data = cloudpickle.dumps((func, args, kwargs))
    except Exception as e:
        raise TypeError("fuseopt.run: the function or its arguments cannot be pickled "
                        "(cloudpickle): %s" % e) from None
    with open(os.path.join(job_dir, FUNCTION_FILE), "wb") as f:
        f.write(data)


def _launch(command):
    """Runs the job, copying its output to sys.stdout line by line (so it
    shows in a notebook too). Returns (exit code, the last lines)."""
    env = dict(os.environ)
    # The caller's modules (a notebook's directory) stay importable on the ranks.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    tail: collections.deque = collections.deque(maxlen=40)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", env=env)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            tail.append(line.rstrip("\n"))
        return proc.wait(), list(tail)
    finally:
        if proc.poll() is None:  # interrupted (KeyboardInterrupt): end the job
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _outcomes(job_dir, kind):
    out = {}
    for name in os.listdir(job_dir):
        prefix, _, rank = name.partition(".")
        if prefix == kind and rank.isdigit():
            with open(os.path.join(job_dir, name), "rb") as f:
                out[int(rank)] = pickle.load(f)
    return out


def _collect(job_dir, code, tail, min_num_proc):
    errors = _outcomes(job_dir, "error")
    if errors:
        raise_rank_error(errors, "fuseopt.run")
    results = _outcomes(job_dir, "result")
    if code != 0 or not results:
        raise RuntimeError("fuseopt.run: the job failed (fuseoptrun exit code %d) before every "
                           "rank returned; its last output:\n%s" % (code, "\n".join(tail)))
    # An elastic job may have restarted on fewer or more ranks: the newest
    # results say how many ranks the last job had.
    size = max(results.values(), key=lambda r: r["time"])["size"]
    missing = [r for r in range(size) if r not in results]
    if missing:
        raise RuntimeError("fuseopt.run: ranks %s of %d returned nothing; the job's last "
                           "output:\n%s" % (missing, size, "\n".join(tail)))
    values = [results[r]["value"] for r in range(size)]
    return values[:min_num_proc] if min_num_proc else values


def add_note(exception: BaseException, note: str) -> None:
    """``exception.add_note(note)``, also on Python 3.10 (which keeps the note
    in ``__notes__`` without printing it)."""
    if hasattr(exception, "add_note"):
        exception.add_note(note)
    else:
        setattr(exception, "__notes__", list(getattr(exception, "__notes__", [])) + [note])


def consequence(error) -> bool:
    """Whether a rank's error payload is only the loss of another rank."""
    return error["type"].rsplit(".", 1)[-1] in _FAILURES_OF_OTHERS


def raise_rank_error(errors, where):
    """Raises the first failure that was not a consequence of another
    rank's. ``errors``: {rank: the error payload fuseopt/runner/task.py
    writes}; ``where``: the caller's name, for the note."""
    own = {r: e for r, e in errors.items() if not consequence(e)}
    rank, error = min((own or errors).items(), key=lambda item: (item[1]["time"], item[0]))
    note = "raised on rank %d of %d in %s; the rank's traceback:\n%s" % (
        rank, error["size"], where, error["traceback"])
    exception = None
    if error["exception"] is not None:
        try:
            exception = pickle.loads(error["exception"])
        except Exception:
            exception = None
    if isinstance(exception, BaseException):
        add_note(exception, note)
        raise exception
    raise RuntimeError("rank %d of %d raised %s: %s\n%s" % (
        rank, error["size"], error["type"], error["message"], note))


__all__ = ["run"]
