"""The launch directory: what a job's processes leave for each other and for
fuseoptrun in $FUSEOPT_LAUNCH_DIR. Native-free, so that the rank wrapper and
the launcher use it without loading the core.

Files, one per rank N, each written whole (temporary file, then rename):

- ``start-N.json``  the rank wrapper, before it starts the rank's command
  (host, pid): a rank with a start record and no exit record was killed with
  its wrapper (by mpiexec, or the OOM killer);
- ``rank-N.json``   the rank wrapper, when the command has ended: exit code or
  signal, end time, and ``unclean`` when the command exited 0 while fuseopt
  was still running in it (``os._exit``, a crash in a C extension that
  exited 0): the other ranks would otherwise wait for it forever;
- ``state-N.json``  the fuseopt runtime: ``running`` after init(),
  ``shut_down`` after shutdown() (what tells a clean exit from an unclean one);
- ``note-N.json``   the runtime, about why it is failing (fuseopt.base.launch_notes);
- ``metrics-N.json`` the runtime, for ``fuseoptrun --metrics-summary``.

On another host than fuseoptrun's the directory exists only if the ranks there
create it; ranks on one host still read each other's records.

Native-free and below everything else, so that the launcher, the rank wrapper
and the runtime all use it without loading the core or each other.
"""
import json
import os
import signal

from .atomic_file import write_atomically

RUNNING = "running"
SHUT_DOWN = "shut_down"
METRICS_SUMMARY_ENV = "FUSEOPT_METRICS_SUMMARY"

# Where each launcher puts a rank's place in the job.
RANK_SOURCES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")
SIZE_SOURCES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS")


def first_int(environ, names):
    """The first of ``names`` set to a non-negative integer, or None."""
    for name in names:
        value = environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def directory(environ=None):
    """The job's launch directory, or None outside fuseoptrun."""
    environ = os.environ if environ is None else environ
    return environ.get("FUSEOPT_LAUNCH_DIR") or None


def env_rank(environ=None):
    """This process's rank as the launcher told it (before fuseopt.init), or 0."""
    return first_int(os.environ if environ is None else environ, RANK_SOURCES) or 0


def env_size(environ=None):
    """The job's number of ranks as the launcher told it, or 0 if unknown."""
    return first_int(os.environ if environ is None else environ, SIZE_SOURCES) or 0


def write_record(status_dir, prefix, rank, record):
    """Writes ``<prefix>N.json`` whole (readers never see half a file).
    Returns the OSError instead of raising: a record must never be what
    fails a rank."""
    path = os.path.join(status_dir, "%s%d.json" % (prefix, rank))
    try:
        write_atomically(path, lambda f: f.write(json.dumps(record).encode("utf-8")),
                         durable=False, private=True)
    except OSError as e:
        return e
    return None


def write_rank_metrics(rank, metrics, environ=None):
    """Called by fuseopt.shutdown() with fuseopt.metrics() plus the overlap
    meter's totals, for ``fuseoptrun --metrics-summary``; does nothing unless
    fuseoptrun asked."""
    environ = os.environ if environ is None else environ
    status_dir = directory(environ)
    if environ.get(METRICS_SUMMARY_ENV) != "1" or not status_dir or not os.path.isdir(status_dir):
        return
    write_record(status_dir, "metrics-", rank, dict(metrics, rank=rank))


def read_records(status_dir, prefix="rank-"):
    """{rank: record} of the ``<prefix>N.json`` files in status_dir. A missing
    directory or a file being written is skipped: callers that poll see it
    next time."""
    out = {}
    try:
        names = os.listdir(status_dir)
    except OSError:
        return out
    for name in names:
        if not (name.startswith(prefix) and name.endswith(".json")):
            continue
        try:
            with open(os.path.join(status_dir, name)) as f:
                out[int(name[len(prefix):-len(".json")])] = json.load(f)
        except (OSError, ValueError):
            continue
    return out


def ended_badly(record):
    """Whether an exit record says the rank failed: a non-zero code, a
    signal, or an exit 0 that left fuseopt running."""
    return bool(record.get("exit_code") != 0 or record.get("signal") or record.get("unclean"))


def describe_exit(record):
    """'exited with code 1', 'was killed by SIGKILL', 'exited with code 0
    without shutting fuseopt down (...)'."""
    if record.get("signal"):
        try:
            return "was killed by %s" % signal.Signals(record["signal"]).name
        except ValueError:
            return "was killed by signal %d" % record["signal"]
    if record.get("unclean"):
        return ("exited with code 0 while fuseopt was still running in it (no shutdown(): "
                "os._exit, or a library that ended the process)")
    return "exited with code %d" % record["exit_code"]
