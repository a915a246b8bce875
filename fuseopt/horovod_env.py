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

Variables Horovod reads only when it is built (``HOROVOD_GPU_OPERATIONS``,
``HOROVOD_WITH_PYTORCH``, ...) mean nothing at run time, to Horovod either,
and are left alone. Pure: the launcher and ``init()`` both use it.
"""
from . import log as _log
from .errors import InvalidArgumentError


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


def translate(environ):
    """``({FUSEOPT_X: value}, [notice, ...])`` for the Horovod variables in
    ``environ``; raises InvalidArgumentError for one fuseopt cannot honour."""
    settings, notices = {}, []
    stall_off = _truthy(environ.get("HOROVOD_STALL_CHECK_DISABLE", ""))
    for name in sorted(k for k in environ if k.startswith("HOROVOD_")):
        text = environ[name]
        if name in MAPPED:
            twin, convert = MAPPED[name]
            if name == "HOROVOD_STALL_CHECK_TIME_SECONDS" and stall_off:
                continue
            try:
                value = convert(text)
            except ValueError:
                raise InvalidArgumentError("%s=%r: not a value Horovod accepts" % (name, text)) \
                    from None
            _take(settings, notices, name, text, twin, value, environ)
        elif name == "HOROVOD_STALL_CHECK_DISABLE":
            if stall_off:
                _take(settings, notices, name, text, "FUSEOPT_STALL_CHECK_S", "0", environ)
        elif name in SAME_BEHAVIOUR:
            allowed, behaviour = SAME_BEHAVIOUR[name]
            if allowed is not None and text.strip().lower() not in allowed:
                raise InvalidArgumentError("%s=%s cannot be honoured: %s" % (name, text, behaviour))
            notices.append("%s=%s: nothing to change, %s" % (name, text, behaviour))
        elif name in REFUSED and _asks_for(name, text):
            raise InvalidArgumentError("%s=%s cannot be honoured: %s (unset it to run with "
                                       "fuseopt)" % (name, text, REFUSED[name]))
    return settings, notices


# Refused variables that are booleans: "0"/"false" is Horovod's off, not a value.
_BOOLEAN = {"HOROVOD_HIERARCHICAL_ALLGATHER", "HOROVOD_TORUS_ALLREDUCE", "HOROVOD_CCL_CACHE",
            "HOROVOD_DISABLE_GROUP_FUSION", "HOROVOD_ENABLE_XLA_OPS",
            "HOROVOD_ENABLE_ASYNC_COMPLETION", "HOROVOD_ELASTIC"}


def _asks_for(name, text):
    """Whether a refused variable asks for its feature."""
    return _truthy(text) if name in _BOOLEAN else text.strip() != ""


def _take(settings, notices, name, text, twin, value, environ):
    own = environ.get(twin, "")
    if own != "":
        if own != value:
            notices.append("%s=%s not used: %s=%s is set too and wins" % (name, text, twin, own))
        return
    settings[twin] = value
    notices.append("%s=%s taken as %s=%s" % (name, text, twin, value))
