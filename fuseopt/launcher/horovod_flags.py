"""horovodrun's flags on fuseoptrun: each one honoured, or refused with a reason.

A command line copied from a horovodrun job must either do what it did there
or stop before anything starts (exit 2, one line). Flags that set a knob are
generated from config.KNOBS by cli.py; this module adds horovodrun's other
spellings of them and its flags that are not knobs.
"""
import argparse
import shlex

from ..core import horovod_env

# horovodrun spelling -> fuseopt knob (its value is the knob's value)
KNOB_ALIASES = {
    "--stall-check-warning-time-seconds": "stall_check_s",
    "--stall-check-time-seconds": "stall_check_s",
    "--stall-check-shutdown-time-seconds": "stall_shutdown_s",
    "--start-timeout": "init_timeout_s",
    "--autotune-log-file": "autotune_log",
}

# horovodrun flags fuseopt cannot honour -> (takes a value, why); the reason
# is horovod_env's for the flag's variable where there is one.
_R = horovod_env.REFUSED
REFUSED = {
    "--hierarchical-allgather": (False, _R["HOROVOD_HIERARCHICAL_ALLGATHER"]),
    "--torus-allreduce": (False, _R["HOROVOD_TORUS_ALLREDUCE"]),
    "--autotune-warmup-samples": (True, _R["HOROVOD_AUTOTUNE_WARMUP_SAMPLES"]),
    "--autotune-steps-per-sample": (True, _R["HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE"]),
    "--autotune-bayes-opt-max-samples": (True, _R["HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES"]),
    "--autotune-gaussian-process-noise": (True, _R["HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE"]),
    "--thread-affinity": (True, _R["HOROVOD_THREAD_AFFINITY"]),
    "--gloo-timeout-seconds": (True, _R["HOROVOD_GLOO_TIMEOUT_SECONDS"]),
    "--gloo": (False, "fuseoptrun always launches with MPI (mpiexec)"),
    "--jsrun": (False, "fuseoptrun launches with mpiexec; under LSF run jsrun yourself"),
    "--tcp": (False, "the MPI library picks its transport; pass its options with --mpi-args"),
    "--binding-args": (True, "pass binding options with --mpi-args (Hydra: '-bind-to core')"),
    "--config-file": (True, "fuseoptrun reads no config file; give flags or FUSEOPT_* "
                            "variables"),
    "--prefix-output-with-timestamp": (False, "fuseoptrun cannot timestamp output lines"),
    "--log-with-timestamp": (False, horovod_env.SAME_BEHAVIOUR["HOROVOD_LOG_HIDE_TIME"][1]),
    "--no-log-hide-timestamp": (False, horovod_env.SAME_BEHAVIOUR["HOROVOD_LOG_HIDE_TIME"][1]),
    # Flags of earlier horovodrun releases (0.19-0.20) for oneCCL / MLSL.
    "--mlsl-bgt-affinity": (True, "fuseopt does not use MLSL and does not pin its thread"),
    "--ccl-bgt-affinity": (True, _R["HOROVOD_CCL_CACHE"] + " and does not pin its thread"),
    "--blacklist-cooldown-range": (True, "fuseoptrun keeps a lost host out for the rest of "
                                          "the job (no cooldown)"),
}
_REFUSED_SHORT = {"--prefix-output-with-timestamp": ["-prefix-timestamp"]}

# horovodrun flags that ask for what fuseoptrun always does -> what it does
ALREADY = {
    "--mpi": "fuseoptrun always launches with MPI",
    "--disable-cache": "fuseoptrun caches no start-up checks",
    "--log-without-timestamp": horovod_env.SAME_BEHAVIOUR["HOROVOD_LOG_HIDE_TIME"][1],
    "--mpi-threads-disable": horovod_env.SAME_BEHAVIOUR["HOROVOD_MPI_THREADS_DISABLE"][1],
    "--no-mpi-threads-disable": horovod_env.SAME_BEHAVIOUR["HOROVOD_MPI_THREADS_DISABLE"][1],
    "--stall-check": "the stall check is on unless FUSEOPT_STALL_CHECK_S=0",
    "--no-hierarchical-allgather": _R["HOROVOD_HIERARCHICAL_ALLGATHER"] + ", so it is off",
    "--no-torus-allreduce": _R["HOROVOD_TORUS_ALLREDUCE"].split(" (")[0] + ", so it is off",
    # horovodrun's older spelling of --log-without-timestamp
    "--log-hide-timestamp": horovod_env.SAME_BEHAVIOUR["HOROVOD_LOG_HIDE_TIME"][1],
}
_NCCL_STREAMS = horovod_env.SAME_BEHAVIOUR["HOROVOD_NUM_NCCL_STREAMS"]


# Namespace attribute: {dest: the flag as the user spelled it, with its value}.
SPELLING = "knob_flag_spelling"


class KnobFlag(argparse.Action):
    """Stores a knob flag's value (its ``const`` when it takes none) and
    remembers how it was spelled, so that a notice can name the flag that won
    over a HOROVOD_* variable ("--start-timeout 40", not the knob's name)."""

    def __init__(self, option_strings, dest, const=None, **kwargs):
        super().__init__(option_strings, dest, nargs=0 if const is not None else None,
                         const=const, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        value = self.const if self.nargs == 0 else values
        setattr(namespace, self.dest, value)
        spelled = dict(getattr(namespace, SPELLING, None) or {})
        spelled[self.dest] = option_string if self.nargs == 0 else "%s %s" % (option_string, value)
        setattr(namespace, SPELLING, spelled)


class _NcclStreams(argparse.Action):
    """--num-nccl-streams: 1 is what fuseopt does; more is refused."""

    def __call__(self, parser, namespace, values, option_string=None):
        if values.strip() not in _NCCL_STREAMS[0]:
            parser.error("%s %s: %s" % (option_string, values, _NCCL_STREAMS[1]))
        setattr(namespace, self.dest, True)


class _Refuse(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        parser.error("%s: %s" % (option_string, REFUSED[self.dest[len("refused"):]][1]))


def add_to(parser):
    """Adds horovodrun's non-knob flags (the aliases are added by cli.py;
    call this after them: --no-stall-check shares the stall knob's dest)."""
    group = parser.add_argument_group("horovodrun flags")
    group.add_argument("--output-filename", metavar="DIR",
                       help="write each rank's stdout and stderr to DIR/rank.N/{stdout,stderr}")
    group.add_argument("--network-interfaces", metavar="IFACE",
                       help="horovodrun's spelling of --network-interface (one interface)")
    group.add_argument("-p", "--ssh-port", type=int, help="ssh port for other hosts")
    group.add_argument("-i", "--ssh-identity-file", help="ssh identity file for other hosts")
    group.add_argument("--no-stall-check", dest="knob_stall_check_s", action=KnobFlag,
                       const="0", help="no stall warnings (sets FUSEOPT_STALL_CHECK_S=0)")
    group.add_argument("-cb", "--check-build", action="store_true",
                       help="print which frameworks and devices this fuseopt can use, and exit")
    group.add_argument("--num-nccl-streams", dest="already--num-nccl-streams", metavar="1",
                       action=_NcclStreams, help="accepted with 1: " + _NCCL_STREAMS[1])
    for flag in ALREADY:
        group.add_argument(flag, dest="already" + flag, action="store_true",
                           help="accepted: %s" % ALREADY[flag])
    for flag, (takes_value, _why) in REFUSED.items():
        group.add_argument(flag, *_REFUSED_SHORT.get(flag, []), dest="refused" + flag,
                           action=_Refuse, nargs=None if takes_value else 0,
                           help=argparse.SUPPRESS)


def notices(args):
    """Lines saying what the accepted no-op flags mean here."""
    lines = ["%s: %s" % (flag, why) for flag, why in ALREADY.items()
             if getattr(args, "already" + flag)]
    if getattr(args, "already--num-nccl-streams", None):
        lines.append("--num-nccl-streams 1: " + _NCCL_STREAMS[1])
    return lines


def remote_exec(args):
    """The ssh command that -p/-i ask for, or None."""
    if args.ssh_port is None and args.ssh_identity_file is None:
        return None
    cmd = ["ssh"]
    if args.ssh_port is not None:
        cmd += ["-p", str(args.ssh_port)]
    if args.ssh_identity_file:
        cmd += ["-i", args.ssh_identity_file]
    return " ".join(shlex.quote(word) for word in cmd)
