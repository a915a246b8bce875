"""fuseoptrun: a horovodrun-style front end to mpiexec.

    fuseoptrun -np 4 python train.py
    fuseoptrun -np 2 -H node1:2,node2:2 python train.py
    fuseoptrun -np 2 python train_torch.py : -np 2 python train_keras.py

It forwards FUSEOPT_* settings (and flags for each knob) to every rank, turns
off MPICH's shared-memory path when this machine would run more ranks than
it has cores, stops every rank on Ctrl-C or SIGTERM, and exits with the code
of the rank that failed first, after saying which one it was. Inside a Slurm
allocation it takes hosts and -np from Slurm (slurm.py); horovodrun's flags
and HOROVOD_* variables are honoured or refused (horovod_flags.py,
fuseopt/core/horovod_env.py).
"""
import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from ..core import config as _config
from ..core import horovod_env
from .._version import version as _version
from ..base.errors import InvalidArgumentError
from .elastic import driver as elastic_driver
from . import failure_summary, horovod_flags, open_mpi, parent_death, rank_wrapper
from . import hosts as _hosts
from . import slurm as _slurm
from . import metrics_summary as _metrics_summary
from . import shm_litter
from .rank_settings import flag_settings, network_interface, rank_environment
from .usage import UsageError
from ..base.launch_records import ended_badly, read_records


def find_mpiexec(explicit=None):
    """mpiexec from --mpiexec / $FUSEOPT_MPIEXEC, else the one installed next
    to this Python (the mpich wheel's), else PATH: Hydra's (MPICH, Intel MPI,
    MVAPICH) or Open MPI's (open_mpi.py)."""
    for candidate in (explicit, os.environ.get("FUSEOPT_MPIEXEC"),
                      os.path.join(os.path.dirname(sys.executable), "mpiexec")):
        if candidate and os.path.exists(candidate):
            return candidate
    found = shutil.which("mpiexec") or shutil.which("mpirun")
    if not found:
        raise SystemExit("fuseoptrun: no mpiexec found; pip install mpich, or pass --mpiexec")
    return found


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def _knob_value(knob):
    """argparse type: the text as given, once the knob accepts it (its type
    and its range, config.KNOBS)."""
    def check(text):
        _, why = _config.parse_checked(knob, text)
        if why:
            raise argparse.ArgumentTypeError(why)
        return text
    check.__name__ = knob.name
    return check


def _megabytes(text):
    """--fusion-threshold-mb: a number of MiB >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("cannot read %r as a number of MiB" % text) from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError("must be a number of MiB >= 0, not %r" % text)
    return value


def _add_knob_flags(p):
    """One flag per knob (--autotune/--no-autotune for on/off knobs, which take
    no value, as in horovodrun), plus horovodrun's other spellings."""
    aliases = {}
    for flag, name in horovod_flags.KNOB_ALIASES.items():
        aliases.setdefault(name, []).append(flag)
    for knob in _config.KNOBS:
        flag, dest = "--" + knob.name.replace("_", "-"), "knob_" + knob.name
        if knob.parse is _config.parse_flag:
            p.add_argument(flag, dest=dest, action=horovod_flags.KnobFlag, const="1",
                           help="%s (sets %s=1)" % (knob.doc, knob.env))
            p.add_argument("--no-" + flag[2:], dest=dest, action=horovod_flags.KnobFlag,
                           const="0", help=argparse.SUPPRESS)
        else:
            p.add_argument(flag, *aliases.get(knob.name, []), dest=dest, type=_knob_value(knob),
                           action=horovod_flags.KnobFlag, metavar="VALUE",
                           help="%s (sets %s)" % (knob.doc, knob.env))


def build_parser():
    p = _Parser(
        prog="fuseoptrun", description="Run a fuseopt job on one or more hosts.",
        epilog="Separate MPMD programs with ':' (each part with its own -np).")
    p.add_argument("-np", "--num-proc", type=int, dest="np",
                   help="number of ranks (default: Slurm's task count in an allocation, else 1)")
    p.add_argument("-v", "--version", action="version", version="fuseoptrun (fuseopt) " + _version())
    p.add_argument("-H", "--hosts", help="host:slots,... (default: Slurm's nodes in an "
                                         "allocation, else this machine)")
    p.add_argument("-hostfile", "--hostfile", help="file with one 'host slots=N' per line")
    p.add_argument("--mpiexec", help="path of the MPI launcher to use")
    p.add_argument("--remote-exec", metavar="CMD",
                   help="command that starts processes on other hosts, called like ssh "
                        "(CMD HOST COMMAND...); default: ssh")
    p.add_argument("--network-interface", metavar="IFACE",
                   help="interface the launcher's processes use to reach each other (e.g. eth0)")
    p.add_argument("--mpi-args", default="", help="extra arguments for mpiexec (quoted)")
    p.add_argument("-x", dest="export", action="append", default=[], metavar="VAR[=VALUE]",
                   help="give every rank VAR (this environment's value, or VALUE), as "
                        "mpirun's and horovodrun's -x; repeatable")
    p.add_argument("--nolocal", choices=("auto", "on", "off"), default="auto",
                   help="set MPIR_CVAR_NOLOCAL=1 (auto: when ranks > cores here)")
    p.add_argument("--dry-run", action="store_true", help="print the mpiexec command only")
    p.add_argument("--verbose", action="store_true", help="print the mpiexec command too")
    p.add_argument("--timeline-filename", metavar="PATH",
                   help="write a Chrome-trace timeline (sets FUSEOPT_TIMELINE; rank 0 writes "
                        "it, or every rank if PATH contains {rank})")
    p.add_argument("--timeline-mark-cycles", action="store_const", const=True,
                   help="mark negotiation rounds in the timeline")
    p.add_argument("--no-timeline-mark-cycles", dest="timeline_mark_cycles",
                   action="store_const", const=False, help=argparse.SUPPRESS)
    p.add_argument("--metrics-summary", action="store_true",
                   help="print a table of each rank's fuseopt metrics when the job ends")
    p.add_argument("--fusion-threshold-mb", type=_megabytes,
                   help="fusion threshold in MiB (sets FUSEOPT_FUSION_THRESHOLD)")
    _add_knob_flags(p)
    elastic_driver.add_flags(p)
    horovod_flags.add_to(p)
    p.add_argument("command", nargs=argparse.REMAINDER)
    return p


def split_mpmd(argv):
    parts, current = [], []
    for a in argv:
        if a == ":":
            parts.append(current)
            current = []
        else:
            current.append(a)
    parts.append(current)
    return parts


def parse_extra_part(argv):
    p = _Parser(prog="fuseoptrun (MPMD part)")
    p.add_argument("-np", "--num-proc", type=int, dest="np", required=True)
    p.add_argument("command", nargs=argparse.REMAINDER)
    return p.parse_args(argv)


def host_list_of(args, environ):
    """(hosts, from_slurm): -H or --hostfile, else the Slurm allocation we
    run in, else [] (this machine)."""
    if args.hostfile:
        return _hosts.parse_hostfile(args.hostfile), False
    if args.hosts:
        return _hosts.parse_host_list(args.hosts), False
    if _slurm.in_allocation(environ):
        return _slurm.hosts(environ), True
    return [], False


def _one_program(command, launch_dir, dry_run):
    """Hydra runs -launcher-exec as one file name, arguments and all (and
    Open MPI's agent is one too): a command with arguments ('ssh -p 2222')
    becomes a script that runs it."""
    words = shlex.split(command)
    if len(words) == 1:
        return words[0]
    path = os.path.join(launch_dir, "remote-exec")
    if not dry_run:
        with open(path, "w") as f:
            f.write("#!/bin/sh\nexec %s \"$@\"\n" % " ".join(shlex.quote(w) for w in words))
        os.chmod(path, 0o700)
    return path


def job_environment(env, launch_dir):
    """What every rank gets beyond fuseoptrun's own environment: fuseopt's
    settings, the ``-x`` exports and the launch directory. They travel in
    mpiexec's environment, named by -genvlist, never as -genv values in
    argv, which every user of the machine can read (ps, /proc/*/cmdline)."""
    return dict(env, FUSEOPT_LAUNCH_DIR=launch_dir)


def build_command(args, parts, env, launch_dir, host_list, from_slurm=False):
    """The full mpiexec argv for the (possibly MPMD) job; the values of
    ``job_environment(env, launch_dir)`` go in its process environment."""
    mpiexec = find_mpiexec(args.mpiexec)
    remote_exec = args.remote_exec or horovod_flags.remote_exec(args)
    if open_mpi.is_open_mpi(mpiexec):
        why_not = open_mpi.unsupported(args)
        if why_not:
            raise UsageError(why_not)
        return open_mpi.command(mpiexec, args, parts, job_environment(env, launch_dir),
                                host_list, network_interface(args), remote_exec and
                                _one_program(remote_exec, launch_dir, args.dry_run))
    cmd = [mpiexec]
    if host_list:
        cmd += ["-hosts", ",".join("%s:%d" % h for h in host_list)]
    if remote_exec:  # hydra calls it exactly as it would call ssh
        cmd += ["-launcher", "ssh", "-launcher-exec",
                _one_program(remote_exec, launch_dir, args.dry_run)]
    elif from_slurm:  # proxies started by srun inside the allocation: no ssh needed
        cmd += ["-launcher", "slurm"]
    interface = network_interface(args)
    if interface:
        cmd += ["-iface", interface]  # Hydra's own connections; the data path: rank_environment
    if args.output_filename:
        pattern = os.path.join(os.path.abspath(args.output_filename), "rank.%r")
        cmd += ["-outfile-pattern", pattern + "/stdout", "-errfile-pattern", pattern + "/stderr"]
    cmd += ["-genvlist", ",".join(sorted(job_environment(env, launch_dir)))]
    cmd += shlex.split(args.mpi_args)
    return cmd + rank_wrapper.launch_argv(parts, "-n")


# After a rank has failed, how long the job may take to end on its own (the
# failed rank's wrapper lingers LINGER_S so that the others can report; then
# mpiexec stops them) before fuseoptrun stops it. mpiexec does not always:
# ranks still inside MPI_Init when a rank fails are left waiting.
FAILED_JOB_GRACE_S = 10.0
KILL_AFTER_TERM_S = 5.0


def wait_for_job(proc, launch_dir, stopping, watch=None):
    """Waits for mpiexec to end; ends the job itself when a rank has failed
    and the job outlives FAILED_JOB_GRACE_S. Returns mpiexec's exit code."""
    failed_at = terminated_at = None
    while True:
        try:
            return proc.wait(timeout=0.25)
        except subprocess.TimeoutExpired:
            pass
        now = time.time()
        if stopping:
            continue  # the signal handler is stopping the job
        if watch is not None:
            watch(launch_dir)
        if failed_at is None:
            if any(ended_badly(r) for r in read_records(launch_dir, "rank-").values()):
                failed_at = now
        elif terminated_at is None and now - failed_at > FAILED_JOB_GRACE_S:
            print("fuseoptrun: a rank failed %.0f s ago and the job is still running: stopping "
                  "it" % (now - failed_at), file=sys.stderr)
            _signal_job(proc, signal.SIGTERM)
            terminated_at = now
        elif terminated_at is not None and now - terminated_at > KILL_AFTER_TERM_S:
            _signal_job(proc, signal.SIGKILL)


def _signal_job(proc, signum):
    try:
        os.killpg(proc.pid, signum)
    except ProcessLookupError:
        pass


def _job_parts(args, extra_parts, host_list, from_slurm):
    """[(ranks, command), ...]: the first part's, then each MPMD part's."""
    default_np = sum(n for _, n in host_list) if from_slurm else 1
    parts = [(default_np if args.np is None else args.np, args.command)]
    for extra in extra_parts:
        e = parse_extra_part(extra)
        if not e.command:
            raise UsageError("an MPMD part has no command")
        parts.append((e.np, e.command))
    if any(n < 1 for n, _ in parts):
        raise UsageError("-np must be at least 1")
    return parts


# Notices already printed: an elastic job launches once per reset.
_noticed = set()


def _checked_environment(args, total, host_list):
    """The ranks' environment, every knob in it read as init() would (a bad
    value: one line here, not a traceback per rank), and the notices printed
    once for the job."""
    flags = {name: flag for name, (_, flag) in flag_settings(args).items()}
    horovod_settings, horovod_notices = horovod_env.translate(os.environ, flags)
    env = rank_environment(args, total, host_list, os.environ, horovod_settings)
    _config.check_environment(env)
    for line in horovod_flags.notices(args) + horovod_notices:
        if line not in _noticed:
            _noticed.add(line)
            print("fuseoptrun: %s" % line, file=sys.stderr)
    return env


def run(argv):
    parts_argv = split_mpmd(argv)
    args = build_parser().parse_args(parts_argv[0])
    if args.check_build:
        from ..tools import check_build
        print(check_build.render(_version()))
        return 0
    if args.command[:1] == ["--"]:  # fuseoptrun -np 2 -- python train.py
        args.command = args.command[1:]
    if not args.command:
        raise UsageError("no command given (e.g. fuseoptrun -np 2 python train.py)")
    if elastic_driver.is_elastic(args):
        if len(parts_argv) > 1:
            raise UsageError("elastic jobs run one program: no ':' MPMD parts")
        return elastic_driver.ElasticDriver(args, launch).run()
    host_list, from_slurm = host_list_of(args, os.environ)
    parts = _job_parts(args, parts_argv[1:], host_list, from_slurm)
    total = sum(n for n, _ in parts)

    def summarize(launch_dir, code, stopping, started):
        # Stopped on request, the ranks ended by our signal: nobody is to blame.
        return None if stopping else failure_summary.summarize(launch_dir, total, code, started)

    return launch(args, parts, host_list, from_slurm, summarize)


def launch(args, parts, host_list, from_slurm, on_end, extra_env=None, watch=None):
    """Runs one mpiexec job and waits for it. ``on_end(launch_dir, code,
    stopping, started)`` reads the launch records before they are removed
    and gives the result; ``watch(launch_dir)`` is called while the job
    runs; ``extra_env`` goes to every rank."""
    total = sum(n for n, _ in parts)
    env = _checked_environment(args, total, host_list)
    env.update(extra_env or {})
    launch_dir = "FUSEOPT_LAUNCH_DIR" if args.dry_run else tempfile.mkdtemp(prefix="fuseoptrun-")
    try:
        cmd = build_command(args, parts, env, launch_dir, host_list, from_slurm)
    except BaseException:
        if not args.dry_run:
            shutil.rmtree(launch_dir, ignore_errors=True)
        raise
    if args.output_filename and not args.dry_run:
        for rank in range(total):
            os.makedirs(os.path.join(args.output_filename, "rank.%d" % rank), exist_ok=True)
    job_env = job_environment(env, launch_dir)
    if args.dry_run:  # as a shell line that runs it; --verbose shows names only
        print(" ".join([shlex.quote("%s=%s" % kv) for kv in sorted(job_env.items())]
                       + [shlex.quote(c) for c in cmd]))
        return 0
    if args.verbose:
        print(" ".join(shlex.quote(c) for c in cmd), file=sys.stderr)
    shm_before = shm_litter.snapshot()
    started = time.time()
    # Own process group, so that our signal handling decides how ranks stop;
    # SIGTERM to mpiexec (which stops the ranks) if fuseoptrun dies unannounced.
    proc = subprocess.Popen(cmd, start_new_session=True, env=dict(os.environ, **job_env),
                            preexec_fn=lambda: parent_death.signal_on_parent_death(signal.SIGTERM))
    stopping = []

    def stop(signum, _frame):
        stopping.append(signum)
        _signal_job(proc, signal.SIGTERM if len(stopping) == 1 else signal.SIGKILL)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    try:
        code = wait_for_job(proc, launch_dir, stopping, watch)
        result = on_end(launch_dir, code, stopping, started)
        if args.metrics_summary:
            metrics = read_records(launch_dir, "metrics-")
            if metrics:
                print(_metrics_summary.format_table(metrics), file=sys.stderr)
    finally:
        shutil.rmtree(launch_dir, ignore_errors=True)
        shm_litter.remove_new(shm_before)
    if stopping:
        print("fuseoptrun: stopped by %s" % signal.Signals(stopping[0]).name, file=sys.stderr)
        return 128 + stopping[0]
    return result


def main():
    try:
        code = run(sys.argv[1:])
    except (UsageError, _hosts.HostError, InvalidArgumentError) as e:
        print("fuseoptrun: error: %s" % e, file=sys.stderr)
        code = 2
    sys.exit(code)


if __name__ == "__main__":
    main()
