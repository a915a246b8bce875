"""Configuration knobs: each declared once, here, with its environment variable.

Defaults are not repeated here: they come from the native core
(``fuseopt_config_default``). A knob is set, in rising priority, by that
default, by its ``FUSEOPT_*`` environment variable, and by the keyword of the
same name passed to ``fuseopt.init()``. ``fuseoptrun`` flags set the
environment variables of the ranks it starts.
"""
import os
from dataclasses import dataclass
from typing import Callable, Optional

from ..base import log as _log
from ..base._native import ffi, lib
from ..base.errors import InvalidArgumentError


def _parse_log_level(text):
    index = _log.level_index(text)
    return _parse_int(text) if index is None else index


SHM_STORES = ("auto", "cached", "streamed")  # FUSEOPT_SHM_STORES, by its native value


def _parse_shm_stores(value):
    text = str(value).strip().lower()
    return SHM_STORES.index(text) if text in SHM_STORES else _parse_int(value)


def _parse_int(value):
    """An int from a keyword (int, or a float with an integral value) or from
    environment text ("1048576", "64e6"); nan, inf, fractions and bools raise."""
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    number = float(value)
    if not number.is_integer():  # also nan and inf
        raise ValueError(value)
    return int(number)


def _parse_float(value):
    if isinstance(value, bool):
        raise ValueError(value)
    number = float(value)
    if number != number or abs(number) == float("inf"):
        raise ValueError(value)
    return number


def parse_flag(value):
    """A boolean from a keyword or environment text (1/0, true/false, yes/no, on/off)."""
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(value)


@dataclass(frozen=True)
class Knob:
    name: str                 # keyword of fuseopt.init()
    env: str                  # environment variable
    field: str                # fuseopt_config_t member
    parse: Callable           # text or keyword value -> Python value
    to_native: Callable       # Python value -> field value
    from_native: Callable     # field value -> Python value
    doc: str
    test_only: bool = False
    agreed: bool = False      # rank 0's value is used by every rank (loop_lifecycle.cc)
    # Allowed range of the parsed value (None: unbounded). The core's
    # validate_config checks the same bounds at init; test_knob_bounds.py holds
    # the two to agreement. Stated here so that fuseoptrun can refuse a bad
    # value in one line before any rank starts.
    low: Optional[float] = None
    high: Optional[float] = None


def _same(x):
    return x


_keep_alive = []  # C strings handed to fuseopt_config_t must outlive init()


def _c_string(text):
    if not text:
        return ffi.NULL
    buf = ffi.new("char[]", os.fsencode(text))
    _keep_alive.append(buf)
    return buf


def _py_string(ptr):
    return ffi.string(ptr).decode("utf-8", "replace") if ptr != ffi.NULL else ""


KNOBS = (
    Knob("fusion_threshold", "FUSEOPT_FUSION_THRESHOLD", "fusion_threshold_bytes",
         _parse_int, int, _same,
         "Bytes per fused bucket. Tensors ready in the same round share one collective "
         "up to this size; 0 turns fusion off.", agreed=True, low=0),
    Knob("cycle_time_ms", "FUSEOPT_CYCLE_TIME_MS", "cycle_time_us",
         _parse_float, lambda ms: int(round(ms * 1000)), lambda us: us / 1000.0,
         "Extra time the loop waits after a wake-up to collect more tensors before "
         "negotiating. 0 (no delay) is right for almost every job.", agreed=True, low=0),
    Knob("cache_capacity", "FUSEOPT_CACHE_CAPACITY", "cache_capacity", _parse_int, int, _same,
         "Response-cache entries (tensor names negotiated by one bit in steady state); "
         "0 disables the cache.", agreed=True, low=0, high=1 << 20),
    Knob("stall_check_s", "FUSEOPT_STALL_CHECK_S", "stall_check_s", _parse_int, int, _same,
         "Seconds a tensor may wait for other ranks before a warning names it and the "
         "missing ranks; 0 disables.", agreed=True, low=0),
    Knob("stall_shutdown_s", "FUSEOPT_STALL_SHUTDOWN_S", "stall_shutdown_s", _parse_int, int,
         _same,
         "Seconds after which a stalled tensor stops fuseopt on every rank with "
         "RankFailedError instead of waiting forever; 0 (default) waits.", agreed=True, low=0),
    Knob("peer_timeout_s", "FUSEOPT_PEER_TIMEOUT_S", "peer_timeout_s", _parse_float, float,
         _same,
         "Seconds a negotiation round or collective may wait on the other ranks before "
         "this rank decides a peer died or froze and fails every operation with "
         "RankFailedError; 0 waits forever.", low=0),
    Knob("init_timeout_s", "FUSEOPT_INIT_TIMEOUT_S", "init_timeout_s", _parse_float, float,
         _same,
         "Seconds init() waits for every rank to start before it fails with "
         "RankFailedError (a rank died before or during its init()); 0 waits forever. "
         "Under fuseoptrun a rank that failed is reported within a second anyway.", low=0),
    Knob("log_level", "FUSEOPT_LOG_LEVEL", "log_level", _parse_log_level, int,
         lambda v: _log.LEVEL_NAMES[v],
         "trace, debug, info, warning (default) or error. Without it (or init(log_level=)), "
         "the core takes the effective level of Python's 'fuseopt' logger at init() "
         "(logging.basicConfig(level=...) included).",
         low=0, high=len(_log.LEVEL_NAMES) - 1),
    Knob("shm_min_bytes", "FUSEOPT_SHM_MIN_BYTES", "shm_min_bytes", _parse_int, int, _same,
         "Allreduces, reduces, broadcasts, allgathers, reducescatters and alltoalls of "
         "at least this many bytes in all (an alltoall: what all ranks send, agreed "
         "first) go through fuseopt's shared-memory path when every rank runs "
         "on one host (each rank reduces a slice of all ranks' data in place; against "
         "MPICH and the memory roofline: benchmarks/results/collectives.md); 0 (the "
         "default): every size; -1 always uses MPI.", agreed=True,
         low=-1),
    Knob("shm_stores", "FUSEOPT_SHM_STORES", "shm_stores", _parse_shm_stores, int,
         lambda v: SHM_STORES[v],
         "How a rank writes the shared-memory slots the other ranks of its host read: "
         "auto (the default) times both kinds as it goes and uses the faster, cached "
         "plain stores (best where the ranks' cores share a cache), streamed stores "
         "past the caches (best where they do not: two sockets, or vCPUs the host "
         "placed apart).", low=0, high=2),
    Knob("hierarchical_allreduce", "FUSEOPT_HIERARCHICAL_ALLREDUCE", "hierarchical_allreduce",
         parse_flag, int, bool,
         "1: allreduce in three steps (reduce within each node, allreduce among one leader "
         "per node, broadcast within the node), so only one copy per node crosses the "
         "network; used when there are several nodes of several ranks.", agreed=True),
    Knob("autotune", "FUSEOPT_AUTOTUNE", "autotune", parse_flag, int, bool,
         "1: during the first rounds of training, try fusion thresholds and cycle times "
         "(one window of rounds each, scored by bytes reduced per second), then hold the "
         "best; rank 0 decides and every rank switches at the same round.", agreed=True),
    Knob("autotune_window_rounds", "FUSEOPT_AUTOTUNE_WINDOW_ROUNDS", "autotune_window_rounds",
         _parse_int, int, _same,
         "Rounds with collectives per autotune trial (a training step is one to a few).",
         agreed=True, low=1),
    Knob("autotune_log", "FUSEOPT_AUTOTUNE_LOG", "autotune_log", str, _c_string, _py_string,
         "CSV file where rank 0 logs each autotune trial and the chosen setting."),
    Knob("mpi_thread_multiple", "FUSEOPT_MPI_THREAD_MULTIPLE", "mpi_thread_multiple",
         parse_flag, int, bool,
         "1: when fuseopt initialises MPI, it asks for MPI_THREAD_MULTIPLE, so that the "
         "script's own threads may call MPI (mpi4py) while fuseopt runs and "
         "mpi_threads_supported() is True. Off by default: SERIALIZED measured 2-5x "
         "faster here."),
    Knob("emulated_local_size", "FUSEOPT_EMULATED_LOCAL_SIZE", "emulated_local_size",
         _parse_int, int, _same,
         "Test knob: pretend each node holds this many consecutive ranks, to exercise "
         "local/cross topology on one machine; 0 uses the real topology.", test_only=True,
         low=0),
)

_BY_NAME = {k.name: k for k in KNOBS}
_BY_ENV = {k.env: k for k in KNOBS}


def read(knob, raw, where):
    """``raw`` (environment text or a keyword's value) parsed for ``knob`` and
    checked against its range; InvalidArgumentError names ``where`` otherwise."""
    value, why = parse_checked(knob, raw)
    if why:
        raise InvalidArgumentError("%s: %s" % (where, why))
    return value


def parse_checked(knob, raw):
    """(value, None), or (None, why ``raw`` is not a value of ``knob``)."""
    try:
        value = knob.parse(raw)
    except (TypeError, ValueError, OverflowError):
        return None, "cannot read %r as a %s value" % (raw, knob.name)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        # Both names: a value may come from init() or from the variable.
        named = "%s (%s)" % (knob.name, knob.env)
        if knob.low is not None and value < knob.low:
            return None, "%s must be >= %s, not %r" % (named, _number(knob.low), raw)
        if knob.high is not None and value > knob.high:
            return None, "%s must be <= %s, not %r" % (named, _number(knob.high), raw)
    return value, None


def _number(bound):
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def knob_for_env(name):
    """The knob that environment variable ``name`` sets, or None."""
    return _BY_ENV.get(name)


def check_environment(environ):
    """Reads every knob variable set in ``environ`` as init() would, so that a
    launcher can refuse a bad value before any rank starts."""
    for knob in KNOBS:
        if environ.get(knob.env, "") != "":
            read(knob, environ[knob.env], knob.env)


def build_config(overrides=None, environ=None):
    """A filled ``fuseopt_config_t*``: native defaults, then environment, then overrides."""
    environ = os.environ if environ is None else environ
    overrides = dict(overrides or {})
    unknown = set(overrides) - set(_BY_NAME)
    if unknown:
        raise InvalidArgumentError("unknown fuseopt setting(s): %s (known: %s)"
                                   % (", ".join(sorted(unknown)), ", ".join(sorted(_BY_NAME))))
    cfg = ffi.new("fuseopt_config_t*")
    lib.fuseopt_config_default(cfg)
    for knob in KNOBS:
        if knob.name in overrides and overrides[knob.name] is not None:
            raw, where = overrides[knob.name], "init(%s=...)" % knob.name
        elif environ.get(knob.env, "") != "":
            raw, where = environ[knob.env], knob.env
        elif knob.name == "log_level":  # the level Python's records of fuseopt obey
            raw, where = _log.core_level(_log.effective_level()), "the 'fuseopt' logger's level"
        else:
            continue
        value = read(knob, raw, where)
        try:
            setattr(cfg, knob.field, knob.to_native(value))
        except OverflowError:
            raise InvalidArgumentError("%s: %r is out of range for %s"
                                       % (where, raw, knob.name)) from None
    return cfg


def describe(cfg):
    """The knobs of a config as a {name: value} dict (for logs and metrics)."""
    return {k.name: k.from_native(getattr(cfg, k.field)) for k in KNOBS}
