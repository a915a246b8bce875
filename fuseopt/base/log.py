"""Python-side messages go through the standard ``logging`` module.

Every record comes from the ``fuseopt`` logger or a child of it and carries
the rank in ``record.rank`` (-1 before ``init()``), so a user's own logging
configuration can show it (``%(rank)s``). The level follows
``FUSEOPT_LOG_LEVEL``, the same variable that sets the native core's level.
Without the variable (or ``init(log_level=)``) the core takes the ``fuseopt``
logger's effective level at ``init()`` (config.py): a level set on it, or on the
root logger by ``logging.basicConfig(level=...)``, so both sides print the same
things. The core's own lines go to stderr in the same format; it reads its
level once, at ``init()``.

Until the program configures logging itself (a handler on the root logger),
records print to stderr as the core prints its lines:
``[fuseopt rank 1] WARNING: ...``. Once it does, they reach its handlers
instead, never both.

Reports the user asked for (``log_metrics()``, Keras callbacks with
``verbose=1``) are INFO records of ``fuseopt.report``, shown by default;
``logging.getLogger("fuseopt.report").setLevel(logging.WARNING)`` hides them.
"""
import logging
import os
import sys

from ._native import lib

# FUSEOPT_LOG_LEVEL's words: the header's fuseopt_log_level_t, in its order.
LEVEL_NAMES = tuple(n[len("FUSEOPT_LOG_"):].lower() for n in sorted(
    (n for n in dir(lib) if n.startswith("FUSEOPT_LOG_") and n != "FUSEOPT_LOG_LEVEL_COUNT"),
    key=lambda n: getattr(lib, n)))
assert len(LEVEL_NAMES) == lib.FUSEOPT_LOG_LEVEL_COUNT
_PYTHON_LEVELS = {"trace": 5, "debug": logging.DEBUG, "info": logging.INFO,
                  "warning": logging.WARNING, "error": logging.ERROR}
_FORMAT = "[fuseopt rank %(rank)s] %(levelname)s: %(message)s"


def level_index(word):
    """The core level (0 trace .. 4 error) that a level word names, or None.
    Horovod's "fatal" is "error" here: the core has nothing above it."""
    word = str(word).strip().lower()
    word = "error" if word == "fatal" else word
    return LEVEL_NAMES.index(word) if word in LEVEL_NAMES else None


def python_level(core_level):
    """The ``logging`` level of a core level (0..4)."""
    return _PYTHON_LEVELS[LEVEL_NAMES[core_level]]


def core_level(python_level_value):
    """The core level (0..4) that shows what a ``logging`` level shows."""
    for index, name in enumerate(LEVEL_NAMES):
        if python_level_value <= _PYTHON_LEVELS[name]:
            return index
    return len(LEVEL_NAMES) - 1


_rank = -1  # set by runtime.init(); kept after shutdown() for late messages


def set_rank(rank):
    global _rank
    _rank = rank


class _RankFilter(logging.Filter):
    def filter(self, record):
        if not hasattr(record, "rank"):
            record.rank = _rank
        return True


class _UntilConfigured(logging.StreamHandler):
    """stderr, unless the root logger has handlers (then propagation shows
    the record there; printing it here too would show it twice)."""

    def emit(self, record):
        if not logging.getLogger().handlers:
            super().emit(record)


def get_logger(name="fuseopt"):
    """The ``fuseopt`` logger or a child, with the rank filter."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, _RankFilter) for f in logger.filters):
        logger.addFilter(_RankFilter())
    return logger


def _level_from_environment():
    text = os.environ.get("FUSEOPT_LOG_LEVEL", "").strip()
    index = level_index(text)
    if index is None and text.isdigit() and int(text) < len(LEVEL_NAMES):
        index = int(text)
    return None if index is None else python_level(index)


def apply_environment_level():
    """Sets the loggers' levels from FUSEOPT_LOG_LEVEL (at import, and again
    in init(), which may have taken it from HOROVOD_LOG_LEVEL)."""
    level = _level_from_environment()
    if level is not None:
        logging.getLogger("fuseopt").setLevel(level)
        logging.getLogger("fuseopt.report").setLevel(
            logging.ERROR if level >= logging.ERROR else logging.INFO)


def _setup():
    handler = _UntilConfigured(sys.stderr)
    handler.setFormatter(logging.Formatter(_FORMAT))
    get_logger("fuseopt").addHandler(handler)
    logging.getLogger("fuseopt.report").setLevel(logging.INFO)
    apply_environment_level()


def effective_level():
    """The level the ``fuseopt`` logger's records obey: its own (the program's,
    or FUSEOPT_LOG_LEVEL's), else its ancestors' (``logging.basicConfig``'s).
    init() gives it to the core, which has no setter after that: a level set
    later reaches Python's records only."""
    return logging.getLogger("fuseopt").getEffectiveLevel()


logger = get_logger("fuseopt")
report_logger = get_logger("fuseopt.report")
_setup()
