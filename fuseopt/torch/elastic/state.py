"""TorchState: Horovod's elastic state for PyTorch objects.

Models, optimizers, LR schedulers and ElasticSamplers given as keyword
arguments get a handler (as in Horovod) that saves a deep copy of their
``state_dict``, restores it and syncs it from rank 0; everything else is a
plain value (fuseopt.training.elastic.ObjectState). For the commit store the saved
copies become one ``torch.save`` payload, read back with
``torch.load(weights_only=True)``: never code from the file.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple
import copy
import io

import torch

from ...training.checkpoint import CheckpointError
from ...training.compression import shared_part
from ...training.elastic import ObjectState
from ..functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                         broadcast_parameters)
from ..sharded import ShardedOptimizer, merge_shards
from .sampler import ElasticSampler


class StateHandler:
    """Keeps a saved copy of one object's state_dict."""

    def __init__(self, name: str, value: Any) -> None:
        self.name = name
        self.value = value
        self.saved = self.snapshot()

    def snapshot(self) -> Any:
        """A copy of the object's state that later changes do not touch."""
        return copy.deepcopy(self.value.state_dict())

    def save(self) -> None:
        self.saved = self.snapshot()

    def restore(self) -> None:
        self.value.load_state_dict(copy.deepcopy(self.saved))

    def sync(self) -> None:
        self.value.load_state_dict(broadcast_object(self.value.state_dict(), 0,
                                                    name="elastic.%s" % self.name))

    def set_value(self, value: Any) -> None:
        self.value = value
        self.save()

    def from_commit(self, saved: Any) -> Any:
        """What to restore of a commit (written by another rank: local rank 0)."""
        return saved


class ModelStateHandler(StateHandler):
    def sync(self) -> None:
        broadcast_parameters(self.value.state_dict(), 0, prefix="elastic.%s." % self.name)


class OptimizerStateHandler(StateHandler):
    def sync(self) -> None:
        broadcast_optimizer_state(self.value, 0)  # and the compressor's shared state

    def from_commit(self, saved: Any) -> Any:
        # A compressor's error buffers were the writing rank's own: every rank
        # of the new job starts them from zero (Q and step counts are shared).
        compression = saved.get("fuseopt_compression") if isinstance(saved, dict) else None
        if compression is None:
            return saved
        return dict(saved, fuseopt_compression=shared_part(compression))


class ShardedOptimizerStateHandler(OptimizerStateHandler):
    """A sharded optimizer's state is spread over the ranks, and a lost rank
    takes its shard with it: a save gathers every shard (collective, as a
    commit is), so each rank keeps the whole state, as an unsharded
    TorchState does; restoring keeps this rank's share under the current
    plan, so a job restarted on another number of ranks re-shards it."""

    def snapshot(self) -> dict:
        return merge_shards(allgather_object(self.value.sharded_state_dict(),
                                             name="elastic.%s.shards" % self.name,
                                             process_set=self.value._process_set))


LRScheduler = getattr(torch.optim.lr_scheduler, "LRScheduler",
                      torch.optim.lr_scheduler._LRScheduler)
HANDLERS = [
    (torch.nn.Module, ModelStateHandler),
    (ShardedOptimizer, ShardedOptimizerStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (LRScheduler, StateHandler),
    (ElasticSampler, StateHandler),
]


def _split(kwargs: Dict[str, Any]) -> Tuple[Dict[str, StateHandler], Dict[str, Any]]:
    handlers, values = {}, {}
    for name, value in kwargs.items():
        cls = next((h for t, h in HANDLERS if isinstance(value, t)), None)
        if cls is None:
            values[name] = value
        else:
            handlers[name] = cls(name, value)
    return handlers, values


class TorchState(ObjectState):
    """State of a PyTorch training process (Horovod's TorchState):
    ``TorchState(model, optimizer, sampler=..., epoch=0, batch=0)``. Every
    keyword becomes an attribute; assigning a new model or optimizer to it
    replaces what is tracked (and saves it)."""

    FORMAT = "fuseopt.torch.elastic/1"
    VALUE_TYPES = (torch.Tensor,)

    def __init__(self, model: Any = None, optimizer: Any = None, **kwargs: Any) -> None:
        kwargs.update(model=model, optimizer=optimizer)
        handlers, values = _split(kwargs)
        object.__setattr__(self, "_handlers", handlers)
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)
        super().__init__(**values)

    def save(self) -> None:
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self) -> None:
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self) -> None:
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def __setattr__(self, name: str, value: Any) -> None:
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers and hasattr(self, name):
            handlers[name].set_value(value)
        super().__setattr__(name, value)

    def _payload(self) -> bytes:
        buffer = io.BytesIO()
        torch.save({"format": self.FORMAT,
                    "handlers": {n: h.saved for n, h in self._handlers.items()},
                    "values": self._user_values()}, buffer)
        return buffer.getvalue()

    def _load_payload(self, payload: bytes) -> None:
        data = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
        if not isinstance(data, dict) or data.get("format") != self.FORMAT:
            raise CheckpointError("the commit is not a %s payload" % self.FORMAT)
        if sorted(data["handlers"]) != sorted(self._handlers) or \
                sorted(data["values"]) != sorted(self._saved_state):
            raise CheckpointError(
                "the commit holds %s, this TorchState %s" % (
                    sorted(data["handlers"]) + sorted(data["values"]),
                    sorted(self._handlers) + sorted(self._saved_state)))
        for name, handler in self._handlers.items():
            handler.saved = handler.from_commit(data["handlers"][name])
        self._set_user_values(data["values"])
        self.restore()
