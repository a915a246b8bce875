"""Picklable Python objects across ranks, built on the byte collectives, and
work done by one rank whose outcome every rank shares.

A rank that cannot serialize its object (or whose work fails) still takes
part in every collective, sending its error instead of its bytes: every rank
then raises that error (fuseopt/base/portable_errors.py), so no rank is left
waiting for bytes that never come."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, List, Optional
import pickle

import numpy as np

from . import ops
from ..core import world
from ..base.portable_errors import describe, rebuild

if TYPE_CHECKING:  # names used only in annotations
    from ..core.process_sets import ProcessSet

# What a rank's bytes hold: its serialized object, or its failure.
_OBJECT, _FAILURE = 0, 1


def _serialized(obj, dumps, what):
    """``(kind, bytes)``: the object's bytes, or this rank's failure as bytes."""
    try:
        return _OBJECT, dumps(obj)
    except Exception as e:  # an object that cannot be serialized: every rank must hear it
        kind, message = describe(e, "rank %d could not serialize %s" % (world.rank(), what))
        return _FAILURE, ("%s\n%s" % (kind, message)).encode("utf-8")


def _raise_failure(data):
    kind, _, message = data.decode("utf-8", "replace").partition("\n")
    raise rebuild((kind, message))


def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None,
                     process_set: Optional[ProcessSet] = None,
                     dumps: Callable[[Any], bytes] = pickle.dumps,
                     loads: Callable[[bytes], Any] = pickle.loads) -> Any:
    """Returns root_rank's ``obj`` on every rank (of ``process_set``;
    serialized with ``dumps``, read back with ``loads``; root's value wins).
    If the root cannot serialize it, every rank raises the root's error."""
    name = name or "broadcast_object"
    root = world.rank() == root_rank
    kind, data = _serialized(obj, dumps, "the object of %s" % name) if root else (0, b"")
    header = ops.broadcast(np.array([kind, len(data)], dtype=np.int64), root_rank,
                           name + ".len", process_set=process_set)
    buf = np.frombuffer(data, dtype=np.uint8) if root else np.empty(int(header[1]), np.uint8)
    data = ops.broadcast(buf, root_rank, name + ".data", process_set=process_set).tobytes()
    if header[0] == _FAILURE:
        _raise_failure(data)
    return obj if root else loads(data)


def allgather_object(obj: Any, name: Optional[str] = None,
                     process_set: Optional[ProcessSet] = None) -> List[Any]:
    """A list with every rank's ``obj`` (of ``process_set``), in rank order.
    If any rank cannot pickle its object, every rank raises the first such
    rank's error."""
    name = name or "allgather_object"
    kind, data = _serialized(obj, pickle.dumps, "its object for %s" % name)
    headers = ops.allgather(np.array([[kind, len(data)]], dtype=np.int64), name + ".len",
                            process_set=process_set)
    gathered = ops.allgather(np.frombuffer(data, dtype=np.uint8), name + ".data",
                             process_set=process_set).tobytes()
    pieces, offset = [], 0
    for kind, size in headers:
        pieces.append((kind, gathered[offset:offset + int(size)]))
        offset += int(size)
    for kind, piece in pieces:
        if kind == _FAILURE:
            _raise_failure(piece)
    return [pickle.loads(piece) for _, piece in pieces]


def on_root(work: Callable[[], Any], root_rank: int, name: str, what: str,
            process_set: Optional[ProcessSet] = None) -> Any:
    """Collective: ``work()`` runs on root_rank alone. Whatever it raises
    there is raised on every rank as the same error, its message beginning
    ``rank <root> <what>``; returns work()'s result on the root, None on the
    others, once the root is done."""
    failure, result, original = None, None, None
    if world.rank() == root_rank:
        try:
            result = work()
        except Exception as e:  # whatever the work raises, the other ranks must hear it
            failure, original = describe(e, "rank %d %s" % (root_rank, what)), e
    failure = broadcast_object(failure, root_rank, name=name, process_set=process_set)
    if failure:
        raise rebuild(failure) from original
    return result
