"""Horovod's elastic API, the framework-neutral half: the state object's
commit, restore and sync protocol, host-update checks, reset callbacks and
the ``run`` loop. The bindings (fuseopt/torch/elastic/,
fuseopt/tensorflow/keras/elastic.py) only turn framework objects into a
payload of bytes and back.

How a reset works here (MPI cannot change a running world, so unlike
Horovod's in-place Gloo reset, the job is restarted): every ``commit()``
keeps the state in memory (for ``restore()``) and, under fuseoptrun's
elastic driver, one rank per host writes it to the host's commit store
(fuseopt/training/elastic_protocol.py). When a peer is lost, or the driver announces
new hosts, every rank ends with ``RESET_EXIT_CODE`` and the driver starts a
new job on the hosts it has. In the new job ``run`` restores the newest
surviving commit on every rank, calls the reset callbacks, syncs from rank
0 and calls the training function again. See docs/reliability.md.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional
import abc
import copy
import functools
import json
import random
import socket
import sys

import numpy as np

from . import elastic_protocol as _proto
from ..base import launch_records
from ..api import objects, ops, runtime
from ..core import world
from .checkpoint import CheckpointError, check_plain, encode_header
from ..base.errors import RankFailedError, ShutDownError
from ..base.log import logger


class HostsUpdatedInterrupt(RuntimeError):
    """Raised by ``commit()`` / ``check_host_updates()`` on every rank at the
    same call when the driver has announced a change of hosts."""

    def __init__(self, skip_sync: bool = False) -> None:
        super().__init__("the job's hosts changed")
        self.skip_sync = skip_sync
        self.committed = False


class State(abc.ABC):
    """Horovod's ``horovod.common.elastic.State``: what survives a reset.

    Subclasses implement ``save`` / ``restore`` / ``sync`` (in memory and
    across ranks) and, for the commit store, ``FORMAT``, ``_payload()``
    (bytes of the last saved state) and ``_load_payload(bytes)`` (make it
    the saved state, then ``restore()``). ObjectState is a complete one."""

    FORMAT = "fuseopt.training.elastic/none"

    def __init__(self) -> None:
        self._reset_callbacks: List[Callable[[], Any]] = []
        self._generation = 0
        self._notice_seen = 0.0

    def register_reset_callbacks(self, callbacks: List[Callable[[], Any]]) -> None:
        """Functions called after a reset (a restart that restored a commit),
        before the state is synced: e.g. to scale the learning rate to the
        new ``size()``."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        for callback in self._reset_callbacks:
            callback()

    def commit(self) -> None:
        """Saves the state (in memory, and to this host's commit store under
        the elastic driver), then checks for host updates: may raise
        HostsUpdatedInterrupt, on every rank alike. Collective."""
        self.save()
        failure = self._write_commit()
        try:
            self._check(failure)
        except HostsUpdatedInterrupt as e:
            e.committed = True
            raise

    def check_host_updates(self) -> None:
        """Raises HostsUpdatedInterrupt on every rank if fuseoptrun announced
        new or removed hosts since the last check. Collective."""
        self._check(None)

    @abc.abstractmethod
    def save(self) -> None:
        """Keeps the current state in memory as the one to restore."""

    @abc.abstractmethod
    def restore(self) -> None:
        """Makes the last saved state current again."""

    @abc.abstractmethod
    def sync(self) -> None:
        """Makes every rank's state rank 0's. Collective."""

    @abc.abstractmethod
    def _payload(self) -> bytes:
        """The last saved state as bytes, for the commit store."""

    @abc.abstractmethod
    def _load_payload(self, payload: bytes) -> None:
        """Makes ``payload`` (from ``_payload``) the saved state, then restores it."""

    # ---- the commit store ----
    def _write_commit(self) -> Optional[str]:
        """One rank per host writes the committed state; returns what went
        wrong on this rank, for _check to raise on every rank."""
        self._generation += 1
        root = _proto.store_dir()
        if root is None or world.local_rank() != 0:
            return None
        path = _proto.commit_path(root)
        try:
            data = _proto.encode_commit(self._generation, self.FORMAT, self._payload(),
                                        _proto.job_key())
            _proto.write_commit(path, data)
        except Exception as e:  # whatever fails here, every rank must hear it (_check)
            return "rank %d could not write %s: %s: %s" % (world.rank(), path,
                                                          type(e).__name__, e)
        return None

    def _check(self, failure: Optional[str]) -> None:
        """One allreduce agrees on the newest host notice any rank saw and on
        whether any rank failed to write its commit."""
        if _proto.store_dir() is None:
            if failure:
                raise OSError(failure)
            return
        seen = _proto.notice_time(launch_records.directory())
        agreed = ops.allreduce(np.array([seen, world.rank() + 1 if failure else 0], np.float64),
                               name="fuseopt.training.elastic.check", op=ops.Max)
        if agreed[1]:  # the failing rank (the highest, if several) tells its error
            raise OSError(objects.broadcast_object(failure, int(agreed[1]) - 1,
                                                   name="fuseopt.training.elastic.failure"))
        if agreed[0] > self._notice_seen:
            self._notice_seen = float(agreed[0])
            raise HostsUpdatedInterrupt()

    def _restore_newest(self) -> bool:
        """Collective: finds the newest usable commit any host kept, and makes
        it this state on every rank. Returns whether there was one."""
        root = _proto.store_dir()
        report, payload = (world.rank(), None, None), None
        if root is not None and world.local_rank() == 0:
            try:
                found = _proto.read_commit(_proto.commit_path(root), _proto.job_key())
            except Exception as e:  # a bad copy is reported, and another host's may do
                report = (world.rank(), None, "host %s: %s" % (socket.gethostname(), e))
            else:
                if found is not None:
                    report, payload = (world.rank(), found[0], None), found[2]
        reports = objects.allgather_object(report, name="fuseopt.training.elastic.commits")
        (owner, generation), errors = _proto.choose_newest(reports)
        if errors and owner is None:
            raise CheckpointError("no usable committed state to resume from: "
                                  + "; ".join(errors))
        if errors and world.rank() == 0:
            logger.warning("elastic: ignoring unusable commit copies (%s); resuming from "
                           "generation %d of rank %d", "; ".join(errors), generation, owner)
        if owner is None:
            return False
        payload = objects.broadcast_object(payload if world.rank() == owner else None, owner,
                                           name="fuseopt.training.elastic.payload")
        try:
            self._load_payload(payload)
        except Exception as e:  # every rank parses the same bytes: the same error everywhere
            raise CheckpointError("cannot restore committed generation %d: %s: %s"
                                  % (generation, type(e).__name__, e)) from None
        self._generation = generation
        return True


class ObjectState(State):
    """Horovod's ObjectState: keyword arguments become attributes; their
    values are committed (deep copies, so later in-place changes do not alter
    the commit), restored, and synced from rank 0. Committed values must be
    plain data (numbers, strings, lists, dicts; the commit store keeps them
    as JSON, so a tuple comes back as a list). That is checked when the state
    is made, when a value is assigned and at every commit, on every rank and
    with or without the elastic driver, so that a value the commit store
    cannot keep fails in a local run, not at the first reset in production.

    Horovod's ``bcast_object`` (a function giving rank 0's object on every
    rank) is used to sync when given, fuseopt's broadcast otherwise;
    ``get_rank`` is accepted and not needed (Horovod's coordinator uses it to
    relay host updates, which fuseoptrun's driver sends every rank)."""

    FORMAT = "fuseopt.training.elastic.objects/1"
    VALUE_TYPES: tuple = ()  # leaf types kept besides plain data (TorchState: tensors)

    def __init__(self, bcast_object: Optional[Callable[[Any], Any]] = None,
                 get_rank: Optional[Callable[[], int]] = None, **kwargs: Any) -> None:
        self._bcast_object = bcast_object or (
            lambda obj: objects.broadcast_object(obj, 0, name="fuseopt.training.elastic.values"))
        check_plain(kwargs, "elastic state values", self.VALUE_TYPES)
        self._saved_state = copy.deepcopy(kwargs)
        self._set_attrs()
        super().__init__()

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__dict__.get("_saved_state", ()):
            check_plain(value, "elastic state value %r" % name, self.VALUE_TYPES)
        super().__setattr__(name, value)

    def save(self) -> None:
        values = {k: getattr(self, k) for k in self._saved_state}
        check_plain(values, "elastic state values", self.VALUE_TYPES)  # changed in place?
        self._saved_state = copy.deepcopy(values)

    def restore(self) -> None:
        self._set_attrs()

    def sync(self) -> None:
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self) -> None:
        for attr, value in self._saved_state.items():
            setattr(self, attr, copy.deepcopy(value))

    def _user_values(self) -> Dict[str, Any]:
        return self._saved_state

    def _set_user_values(self, values: Dict[str, Any]) -> None:
        self._saved_state = dict(values)
        self._set_attrs()

    def _payload(self) -> bytes:
        return encode_header({"format": self.FORMAT, "values": self._user_values()})

    def _load_payload(self, payload: bytes) -> None:
        data = json.loads(payload.decode("utf-8"))
        if not isinstance(data, dict) or data.get("format") != self.FORMAT:
            raise CheckpointError("the commit is not a %s payload" % self.FORMAT)
        if not isinstance(data.get("values"), dict) or \
                sorted(data["values"]) != sorted(self._saved_state):
            raise CheckpointError("the commit holds values %s, this state %s" % (
                sorted(data.get("values") or ()), sorted(self._saved_state)))
        check_plain(data["values"], "elastic state values")
        self._set_user_values(data["values"])
        self.restore()


RESET_ERRORS = (RankFailedError, ShutDownError)


def run_fn(func: Callable[..., Any], is_reset_error: Callable[[BaseException], bool]
           = lambda e: isinstance(e, RESET_ERRORS)) -> Callable[..., Any]:
    """Horovod's ``run`` decorator. ``is_reset_error`` tells a lost peer
    (the binding may wrap fuseopt's error in a framework error) from an error
    of the training script, which propagates and ends the job."""
    @functools.wraps(func)
    def wrapper(state: State, *args: Any, **kwargs: Any) -> Any:
        runtime.init()  # nothing when the script already called it
        try:
            if state._restore_newest():
                state.on_reset()
            state.sync()
            return func(state, *args, **kwargs)
        except HostsUpdatedInterrupt as e:
            if not e.committed:
                state.save()
                failure = state._write_commit()
                if failure:
                    raise OSError(failure) from None
            _end_for_reset(state, "the hosts changed; committed generation %d"
                           % state._generation)
        except BaseException as e:
            if _proto.store_dir() is None or not is_reset_error(e):
                raise
            _end_for_reset(state, _first_line(e))
    return wrapper


def _first_line(error: BaseException) -> str:
    """The line that says what happened (a TensorFlow error wraps fuseopt's
    in a traceback)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    named = [line for line in lines if any(c.__name__ + ":" in line for c in RESET_ERRORS)]
    return (named or ["%s: %s" % (type(error).__name__, lines[0] if lines else "")])[0][:400]


def _end_for_reset(state: State, why: str) -> None:
    """Ends this rank so that fuseoptrun starts the job anew."""
    if world.is_initialized() and world.local_rank() == 0:
        print("fuseopt: elastic: rank %d: %s; ending this job for a reset"
              % (world.rank(), why), file=sys.stderr, flush=True)
    try:
        runtime.shutdown()
    except Exception:
        pass  # after a lost peer the context is aborted: nothing to agree on
    raise SystemExit(_proto.RESET_EXIT_CODE)


def epoch_order(num_samples: int, shuffle: bool, seed: int, epoch: int) -> List[int]:
    """ElasticSampler's arithmetic, rank-free: the epoch's order of the
    sample indices, a shuffle seeded by ``seed + epoch`` (the same on every
    rank and every job). The first ``processed_num`` of it are processed."""
    order = list(range(num_samples))
    if shuffle:  # the stdlib's generator: the same sequence in every process
        random.Random(seed + epoch).shuffle(order)
    return order


def share(remaining: List[int], rank: int, size: int) -> List[int]:
    """This rank's part of ``remaining``: padded with its own head to a
    multiple of ``size`` and dealt round-robin, as DistributedSampler does."""
    if not remaining:
        return []
    per_rank = -(-len(remaining) // size)
    padded = (remaining * (per_rank * size // len(remaining) + 1))[:per_rank * size]
    return padded[rank::size]
