"""Horovod's runtime variables (``HOROVOD_*``): honoured or refused, never ignored.

A Horovod job script often sets ``HOROVOD_FUSION_THRESHOLD`` or
``HOROVOD_TIMELINE`` in its environment. Each variable Horovod 0.28 reads at
run time (horovod/common/common.h, logging.cc, the runner's
``HOROVOD_START_TIMEOUT``) is one of:

- *mapped*: it sets its ``FUSEOPT_*`` twin, in the twin's units, unless the
  twin is set too (then the twin wins); a one-line notice says so;
- *same behaviour*: fuseopt always behaves as the value asks (a notice says
  so), or the value asks for what fuseopt cannot do (refused);
- *refused* when set to anything but Horovod's "off": a feature fuseopt does
  not have, so the job stops with a message instead of running differently.

Any other ``HOROVOD_*`` variable gets a line too: one Horovod reads only
when it is built (``HOROVOD_GPU_OPERATIONS``, ``HOROVOD_WITH_PYTORCH``, ...),
one horovodrun sets for its own workers (``HOROVOD_RANK``,
``HOROVOD_GLOO_RENDEZVOUS_ADDR``, ...), or an unknown one, which is most
likely a typo.

fuseoptrun translates once, its flags included, and marks the ranks'
environment (NOTICED_ENV) so that their ``init()`` applies the same settings
without repeating the notices. Pure: the launcher and ``init()`` both use it.
"""
from . import config as _config
from ..base import log as _log
from ..base.errors import InvalidArgumentError

# Set by fuseoptrun in the ranks' environment: it has printed the notices.
NOTICED_ENV = "FUSEOPT_HOROVOD_NOTICED"


def _same(text):
    return text


def _log_level(text):
    index = _log.level_index(text)
    if index is None:
        raise ValueError(text)
    return _log.LEVEL_NAMES[index]


def _truthy(text):
    """Horovod's rule for its boolean variables (env_parser.cc)."""
    text = text.strip().lower()
    if text in ("", "0", "false", "off", "no"):
        return False
    return True


def _seconds(text):
    value = float(text)
    if value != value or value < 0:
        raise ValueError(text)
    return text.strip()


# HOROVOD_X -> (FUSEOPT_X, convert HOROVOD text to FUSEOPT text)
MAPPED = {
    "HOROVOD_FUSION_THRESHOLD": ("FUSEOPT_FUSION_THRESHOLD", _same),         # bytes both
    "HOROVOD_CYCLE_TIME": ("FUSEOPT_CYCLE_TIME_MS", _same),                   # ms both
    "HOROVOD_CACHE_CAPACITY": ("FUSEOPT_CACHE_CAPACITY", _same),
    "HOROVOD_HIERARCHICAL_ALLREDUCE": ("FUSEOPT_HIERARCHICAL_ALLREDUCE",
                                       lambda t: "1" if _truthy(t) else "0"),
    "HOROVOD_AUTOTUNE": ("FUSEOPT_AUTOTUNE", lambda t: "1" if _truthy(t) else "0"),
    "HOROVOD_AUTOTUNE_LOG": ("FUSEOPT_AUTOTUNE_LOG", _same),
    "HOROVOD_TIMELINE": ("FUSEOPT_TIMELINE", _same),
    "HOROVOD_TIMELINE_MARK_CYCLES": ("FUSEOPT_TIMELINE_MARK_CYCLES",
                                     lambda t: "1" if _truthy(t) else "0"),
    "HOROVOD_STALL_CHECK_TIME_SECONDS": ("FUSEOPT_STALL_CHECK_S", _same),
    "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": ("FUSEOPT_STALL_SHUTDOWN_S", _same),
    "HOROVOD_LOG_LEVEL": ("FUSEOPT_LOG_LEVEL", _log_level),
    "HOROVOD_START_TIMEOUT": ("FUSEOPT_INIT_TIMEOUT_S", _seconds),
}

# HOROVOD_X -> (values fuseopt always honours, what fuseopt always does)
SAME_BEHAVIOUR = {
    "HOROVOD_MPI_THREADS_DISABLE": (
        None, "fuseopt always initialises MPI at MPI_THREAD_SERIALIZED and calls MPI from "
              "one thread, so mpi4py can run beside it"),
    "HOROVOD_CPU_OPERATIONS": (("mpi",), "fuseopt reduces host memory with MPI"),
    "HOROVOD_CONTROLLER": (("mpi",), "fuseopt negotiates over MPI"),
    "HOROVOD_DYNAMIC_PROCESS_SETS": (
        None, "fuseopt always lets add_process_set/remove_process_set run after init()"),
    "HOROVOD_DISABLE_NVTX_RANGES": (None, "fuseopt emits no NVTX ranges"),
    "HOROVOD_LOG_HIDE_TIME": (None, "fuseopt's log lines carry no timestamp"),
    "HOROVOD_NUM_NCCL_STREAMS": (("1",), "fuseopt uses one NCCL stream per device"),
    "HOROVOD_BATCH_D2D_MEMCOPIES": (
        None, "fuseopt's device path packs each bucket with one copy per tensor"),
}

# HOROVOD_X -> why fuseopt cannot honour any value but Horovod's "off"
REFUSED = {
    "HOROVOD_HIERARCHICAL_ALLGATHER": "fuseopt has no hierarchical allgather",
    "HOROVOD_TORUS_ALLREDUCE": "fuseopt has no torus allreduce "
                               "(FUSEOPT_HIERARCHICAL_ALLREDUCE is the nearest)",
    "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "fuseopt's autotune is not Bayesian; "
                                       "FUSEOPT_AUTOTUNE_WINDOW_ROUNDS sets its trial length",
    "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "use FUSEOPT_AUTOTUNE_WINDOW_ROUNDS",
    "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "fuseopt's autotune is not Bayesian",
    "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE": "fuseopt's autotune is not Bayesian",
    "HOROVOD_THREAD_AFFINITY": "fuseopt does not pin its background thread",
    "HOROVOD_GLOO_TIMEOUT_SECONDS": "fuseopt has no Gloo controller (FUSEOPT_PEER_TIMEOUT_S "
                                    "bounds waits on other ranks)",
    "HOROVOD_GLOO_IFACE": "fuseopt has no Gloo controller (fuseoptrun --network-interface)",
    "HOROVOD_CCL_CACHE": "fuseopt does not use oneCCL",
    "HOROVOD_ADASUM_MPI_CHUNK_SIZE": "fuseopt's Adasum does not chunk",
    "HOROVOD_DISABLE_GROUP_FUSION": "fuseopt fuses a group with other ready tensors",
    "HOROVOD_ENABLE_XLA_OPS": "fuseopt has no XLA ops",
    "HOROVOD_ENABLE_ASYNC_COMPLETION": "fuseopt's device path completes after its stream syncs",
    "HOROVOD_ELASTIC": "fuseopt's elastic mode is started by fuseoptrun's --min-np / "
                       "--host-discovery-script, not by this variable",
}


def translate(environ, flags=None):
    """``({FUSEOPT_X: value}, [notice, ...])`` for the Horovod variables in
    ``environ``; raises InvalidArgumentError for one fuseopt cannot honour or a
    value its knob refuses. ``flags``: {FUSEOPT_X: the launcher flag that sets
    it}; a flag wins over the variable, and the notice says so."""
    flags = flags or {}
    settings, notices = {}, []
    stall_off = _truthy(environ.get("HOROVOD_STALL_CHECK_DISABLE", ""))
    for name in sorted(k for k in environ if k.startswith("HOROVOD_")):
        text = environ[name]
        if name == "HOROVOD_TIMELINE" and text.strip() == "DYNAMIC":
            notices.append("HOROVOD_TIMELINE=DYNAMIC: no timeline file until start_timeline() "
                           "is called, as in Horovod (fuseopt needs no variable for that)")
        elif name in MAPPED:
            if name == "HOROVOD_STALL_CHECK_TIME_SECONDS" and stall_off:
                continue
            twin, value = MAPPED[name][0], _converted(name, text)
            _take(settings, notices, (name, text), (twin, value), environ, flags)
        elif name == "HOROVOD_STALL_CHECK_DISABLE":
            if stall_off:
                _take(settings, notices, (name, text), ("FUSEOPT_STALL_CHECK_S", "0"), environ,
                      flags)
        elif name in SAME_BEHAVIOUR:
            allowed, behaviour = SAME_BEHAVIOUR[name]
            if allowed is not None and text.strip().lower() not in allowed:
                raise InvalidArgumentError("%s=%s cannot be honoured: %s" % (name, text, behaviour))
            notices.append("%s=%s: nothing to change, %s" % (name, text, behaviour))
        elif name in REFUSED:
            if _asks_for(name, text):
                raise InvalidArgumentError("%s=%s cannot be honoured: %s (unset it to run with "
                                           "fuseopt)" % (name, text, REFUSED[name]))
        else:
            notices.append("%s=%s: %s" % (name, text, unclassified(name)))
    if environ.get(NOTICED_ENV) == "1":
        notices = []  # fuseoptrun printed them once for the whole job
    return settings, notices


def _converted(name, text):
    """HOROVOD text -> its twin's text, checked as the twin's knob checks it."""
    twin, convert = MAPPED[name]
    try:
        value = convert(text)
    except ValueError:
        raise InvalidArgumentError("%s=%r: not a value Horovod accepts" % (name, text)) from None
    knob = _config.knob_for_env(twin)
    if knob is not None:
        _config.read(knob, value, name)
    return value


# Variables Horovod reads only when it is built (setup.py, CMakeLists.txt).
_BUILD_TIME_PREFIXES = ("HOROVOD_WITH_", "HOROVOD_WITHOUT_", "HOROVOD_GPU", "HOROVOD_CUDA_",
                        "HOROVOD_ROCM_", "HOROVOD_NCCL_", "HOROVOD_BUILD_")
_BUILD_TIME = {"HOROVOD_CMAKE", "HOROVOD_MPICXX_SHOW", "HOROVOD_DEBUG",
               "HOROVOD_ALLOW_MIXED_GPU_IMPL"}
# Variables horovodrun sets for the workers it starts (runner/gloo_run.py,
# runner/common/util/secret.py); fuseoptrun and MPI give fuseopt its own.
_LAUNCHER_PREFIXES = ("HOROVOD_GLOO_",)
_LAUNCHER = {"HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
             "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE", "HOROVOD_HOSTNAME",
             "HOROVOD_SECRET_KEY"}


def unclassified(name):
    """What a HOROVOD_* variable outside the tables above means here."""
    if name in _BUILD_TIME or name.startswith(_BUILD_TIME_PREFIXES):
        return "build-time setting, nothing to do in fuseopt"
    if name in _LAUNCHER or name.startswith(_LAUNCHER_PREFIXES):
        return ("set by horovodrun for its own workers; fuseopt takes ranks and sizes from "
                "MPI, so it is ignored")
    return "unknown HOROVOD_ variable, ignored (a typo?)"


# Refused variables that are booleans: "0"/"false" is Horovod's off, not a value.
_BOOLEAN = {"HOROVOD_HIERARCHICAL_ALLGATHER", "HOROVOD_TORUS_ALLREDUCE", "HOROVOD_CCL_CACHE",
            "HOROVOD_DISABLE_GROUP_FUSION", "HOROVOD_ENABLE_XLA_OPS",
            "HOROVOD_ENABLE_ASYNC_COMPLETION", "HOROVOD_ELASTIC"}


def _asks_for(name, text):
    """Whether a refused variable asks for its feature."""
    return _truthy(text) if name in _BOOLEAN else text.strip() != ""


def _take(settings, notices, variable, setting, environ, flags):
    """Sets the twin from the variable unless a flag or the twin itself wins."""
    (name, text), (twin, value) = variable, setting
    if twin in flags:
        notices.append("%s=%s not used: %s wins" % (name, text, flags[twin]))
        return
    own = environ.get(twin, "")
    if own != "":
        if own != value:
            notices.append("%s=%s not used: %s=%s is set too and wins" % (name, text, twin, own))
        return
    settings[twin] = value
    notices.append("%s=%s taken as %s=%s" % (name, text, twin, value))
