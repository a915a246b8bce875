"""Picklable Python objects across ranks, built on the byte collectives."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional
import pickle

import numpy as np

from . import ops, world

if TYPE_CHECKING:  # names used only in annotations
    from .process_sets import ProcessSet


def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None,
                     process_set: Optional[ProcessSet] = None) -> Any:
    """Returns root_rank's ``obj`` on every rank (of ``process_set``; pickled;
    root's value wins)."""
    name = name or "broadcast_object"
    payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8) if world.rank() == root_rank \
        else np.zeros(0, dtype=np.uint8)
    length = ops.broadcast(np.array([payload.size], dtype=np.int64), root_rank, name + ".len",
                           process_set=process_set)
    buf = payload if world.rank() == root_rank else np.empty(int(length[0]), dtype=np.uint8)
    data = ops.broadcast(buf, root_rank, name + ".data", process_set=process_set)
    return obj if world.rank() == root_rank else pickle.loads(data.tobytes())


def allgather_object(obj: Any, name: Optional[str] = None,
                     process_set: Optional[ProcessSet] = None) -> List[Any]:
    """A list with every rank's ``obj`` (of ``process_set``), in rank order."""
    name = name or "allgather_object"
    payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    sizes = ops.allgather(np.array([payload.size], dtype=np.int64), name + ".len",
                          process_set=process_set)
    data = ops.allgather(payload, name + ".data", process_set=process_set).tobytes()
    out, offset = [], 0
    for n in sizes:
        out.append(pickle.loads(data[offset:offset + int(n)]))
        offset += int(n)
    return out
