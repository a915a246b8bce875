"""What every rank of a fuseoptrun job gets in its environment: the FUSEOPT_*
variables of this environment, the HOROVOD_* ones translated, the settings of
the command line's flags (which win), -x exports, and the variables that steer
MPI's data path (MPIR_CVAR_NOLOCAL, --network-interface's)."""
import os

from ..core import config as _config
from ..core import horovod_env
from ..base.launch_records import METRICS_SUMMARY_ENV
from . import horovod_flags
from . import hosts as _hosts
from ..runner.rank_env import INTERFACE_VARIABLES
from .usage import UsageError


def flag_settings(args):
    """{FUSEOPT_X: (value, the flag as given)} for the settings on the command line."""
    out = {}
    if args.timeline_filename:
        out["FUSEOPT_TIMELINE"] = (os.path.abspath(args.timeline_filename),
                                   "--timeline-filename %s" % args.timeline_filename)
    if args.timeline_mark_cycles:
        out["FUSEOPT_TIMELINE_MARK_CYCLES"] = ("1", "--timeline-mark-cycles")
    if args.fusion_threshold_mb is not None:
        out["FUSEOPT_FUSION_THRESHOLD"] = (str(int(args.fusion_threshold_mb * (1 << 20))),
                                           "--fusion-threshold-mb %g" % args.fusion_threshold_mb)
    spelled = getattr(args, horovod_flags.SPELLING, {})
    for knob in _config.KNOBS:
        value = getattr(args, "knob_" + knob.name)
        if value is not None:
            out[knob.env] = (str(value), spelled.get("knob_" + knob.name, knob.env))
    return out


def network_interface(args):
    """--network-interface(s): one interface, or None."""
    interface = args.network_interface or args.network_interfaces
    if interface and "," in interface:
        raise UsageError("--network-interfaces %s: fuseoptrun takes one interface" % interface)
    return interface


def rank_environment(args, total_ranks, host_list, environ, horovod_settings):
    """FUSEOPT_* variables every rank receives. ``horovod_settings``: the
    FUSEOPT_* twins of environ's HOROVOD_* variables (horovod_env.translate)."""
    env = {k: v for k, v in environ.items() if k.startswith("FUSEOPT_")}
    env.pop("FUSEOPT_MPIEXEC", None)
    env.update(horovod_settings)
    env.update({name: value for name, (value, _) in flag_settings(args).items()})  # flags win
    env[horovod_env.NOTICED_ENV] = "1"  # ranks apply HOROVOD_* again, but say nothing
    if args.metrics_summary:
        env[METRICS_SUMMARY_ENV] = "1"
    interface = network_interface(args)
    for name in INTERFACE_VARIABLES if interface else ():
        env[name] = environ.get(name) or interface  # the user's own setting wins
    for item in args.export:
        name, eq, value = item.partition("=")
        if not name or not (name[0].isalpha() or name[0] == "_") or \
                not all(c.isalnum() or c == "_" for c in name):
            raise UsageError("-x %s: %r is not a variable name" % (item, name))
        if not eq:
            if name not in environ:
                raise UsageError("-x %s: %s is not set here (give -x %s=VALUE)"
                                 % (name, name, name))
            value = environ[name]
        env[name] = value
    nolocal = args.nolocal == "on" or (
        args.nolocal == "auto" and _hosts.local_oversubscribed(host_list, total_ranks))
    if nolocal:
        env["MPIR_CVAR_NOLOCAL"] = "1"
    return env
