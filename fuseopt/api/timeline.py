"""Timeline control: a Chrome-trace / Perfetto JSON file of what fuseopt did.

Set ``FUSEOPT_TIMELINE=path`` (``fuseoptrun --timeline-filename path``) to
record from ``init()`` on, or call :func:`start_timeline` / :func:`stop_timeline`
at run time, e.g. around a few steps of interest. By default only rank 0
writes (its rows show when every rank's request reached it); a ``{rank}`` in
the path makes every rank write its own file. Open the file in
https://ui.perfetto.dev or chrome://tracing, or summarize it with
``fuseopt timeline summarize FILE``.
"""
from __future__ import annotations

import os

from ..core import world
from ..base._native import lib
from ..core.config import parse_flag
from ..base.errors import check
from ..base.log import logger

TIMELINE_ENV = "FUSEOPT_TIMELINE"
MARK_CYCLES_ENV = "FUSEOPT_TIMELINE_MARK_CYCLES"


def path_for_rank(path, rank):
    """The file this rank writes, or None if it writes none."""
    if "{rank}" in path:
        return path.replace("{rank}", str(rank))
    return path if rank == 0 else None


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Starts writing the timeline (local call; every rank may make it).

    ``mark_cycles`` adds an instant event per negotiation round with work, on
    a row of its own. Raises InvalidArgumentError if the file cannot be
    written or a timeline is already running."""
    path = path_for_rank(os.fspath(file_path), world.rank())
    if path is None:
        return
    check(lib.fuseopt_start_timeline(world.context(), os.fsencode(path), 1 if mark_cycles else 0))


def stop_timeline() -> None:
    """Flushes and closes the timeline; does nothing if none is running."""
    check(lib.fuseopt_stop_timeline(world.context()))


def start_from_environment(environ=None):
    """Called by ``init()``: honours FUSEOPT_TIMELINE."""
    environ = os.environ if environ is None else environ
    path = environ.get(TIMELINE_ENV, "")
    if not path:
        return
    try:
        start_timeline(path, parse_flag(environ.get(MARK_CYCLES_ENV, "0")))
    except Exception as e:  # the job itself is fine: say so loudly and go on
        logger.warning("%s: no timeline will be written: %s", TIMELINE_ENV, e)
