"""Horovod's ``horovod.tensorflow.elastic``: elastic training for custom
TensorFlow 2 loops::

    state = hvd.elastic.TensorFlowKerasState(model, optimizer, batch=0, epoch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...
            state.commit()

``TensorFlowState(variables, **values)`` keeps a list of tf.Variables
instead of a model. Variables are kept as NumPy copies; the commit store
gets them as an ``.npz`` archive with a JSON header, read back with
``allow_pickle=False`` (never code from the file), so the state's other
values must be JSON data. fuseopt.tensorflow.keras.elastic adds KerasState
and the Keras callbacks; fuseopt/training/elastic.py tells how a reset works.
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional
import abc
import io
import json

import numpy as np
import tensorflow as tf

from ..training.checkpoint import (CheckpointError, check_plain, compression_from_arrays,
                                   compression_to_arrays, encode_header)
from ..training.compression import keeps_state, shared_part
from ..training.elastic import RESET_ERRORS, HostsUpdatedInterrupt, ObjectState, State, run_fn
from ..base.errors import InvalidArgumentError, UnsupportedError
from ..api.runtime import init, shutdown
from ..core.world import rank
from .functions import (broadcast_object, broadcast_object_fn, broadcast_variables,
                        variable_path)
from .model_variables import split_model_variables


def _is_reset_error(error: BaseException) -> bool:
    """A lost peer, also when it surfaced inside a TensorFlow op (model.fit
    runs fuseopt's collectives in tf.numpy_function, which re-raises them as
    an OpError naming the Python exception)."""
    if isinstance(error, RESET_ERRORS):
        return True
    return isinstance(error, tf.errors.OpError) and any(
        cls.__name__ in str(error.message) for cls in RESET_ERRORS)


def run(func: Callable[..., Any]) -> Callable[..., Any]:
    """Decorates the training function ``func(state, *args, **kwargs)``: on
    every start it restores the newest commit (calling the reset callbacks
    when it does), syncs the state from rank 0 and calls ``func``; a lost
    peer or a change of hosts ends the job for fuseoptrun to restart. Any
    other error propagates and ends the job."""
    return run_fn(func, _is_reset_error)


def _eager_only(what: str) -> None:
    if not tf.executing_eagerly():
        raise UnsupportedError(
            "%s needs eager execution (TensorFlow 2): the state saves and restores variables "
            "directly, without a TF1 session" % what)


class VariablesState(ObjectState):
    """A list of variables plus Horovod's ObjectState values. Subclasses
    say which variables (``_variables``)."""

    @abc.abstractmethod
    def _variables(self) -> List[Any]:
        """The variables to save, restore and sync, in an order that is the
        same on every rank."""

    def _compressing_optimizer(self) -> Any:
        """The optimizer whose compressor keeps state (PowerSGD, ef_sign), or None."""
        return None

    def _save_variables(self) -> None:
        variables = self._variables()
        self._saved_paths = [variable_path(v) for v in variables]
        self._saved_values = [np.array(v) for v in variables]
        optimizer = self._compressing_optimizer()
        self._saved_compression = None if optimizer is None else optimizer.compression_state()

    def _load_variables(self) -> None:
        for v, value in zip(self._variables(), self._saved_values):
            v.assign(value)
        if getattr(self, "_saved_compression", None) is not None:
            self._compressing_optimizer().load_compression_state(self._saved_compression)

    def save(self) -> None:
        self._save_variables()
        super().save()

    def restore(self) -> None:
        self._load_variables()
        super().restore()

    def sync(self) -> None:
        broadcast_variables(self._variables(), 0)
        optimizer = self._compressing_optimizer()
        if optimizer is not None:  # Q and step counts are rank 0's; errors stay each rank's
            shared = broadcast_object(shared_part(optimizer.compression_state())
                                      if rank() == 0 else None, 0,
                                      name="elastic.compression_state")
            optimizer.load_compression_state(shared)
        self._save_variables()
        super().sync()

    def _payload(self) -> bytes:
        arrays = {"v%d" % i: a for i, a in enumerate(self._saved_values)}
        # Without the error buffers: they are this (writing) rank's own, and every
        # rank of the job that restores the commit starts them from zero.
        compression = None if self._saved_compression is None else compression_to_arrays(
            "compression", shared_part(self._saved_compression), arrays)
        header = encode_header({"format": self.FORMAT, "paths": self._saved_paths,
                                "values": self._user_values(), "compression": compression})
        buffer = io.BytesIO()
        np.savez(buffer, header=np.frombuffer(header, np.uint8), **arrays)
        return buffer.getvalue()

    def _load_payload(self, payload: bytes) -> None:
        with np.load(io.BytesIO(payload), allow_pickle=False) as archive:
            header = json.loads(archive["header"].tobytes().decode("utf-8"))
            if not isinstance(header, dict) or header.get("format") != self.FORMAT:
                raise CheckpointError("the commit is not a %s payload" % self.FORMAT)
            variables = self._variables()
            if header["paths"] != [variable_path(v) for v in variables]:
                raise CheckpointError("the commit was saved from other variables (another "
                                      "model or optimizer)")
            values = [archive["v%d" % i] for i in range(len(variables))]
            compression = None
            if header.get("compression") is not None and self._compressing_optimizer():
                compression = compression_from_arrays("compression", header["compression"],
                                                      archive)
        wrong = [variable_path(v) for v, a in zip(variables, values)
                 if tuple(a.shape) != tuple(v.shape)]
        if wrong:
            raise CheckpointError("the commit's variables have other shapes: %s" % wrong[:8])
        check_plain(header["values"], "elastic state values")
        self._saved_values = values
        self._saved_compression = compression
        self._set_user_values(header["values"])
        self.restore()


class TensorFlowKerasState(VariablesState):
    """State of a Keras model and its optimizer (Horovod's
    TensorFlowKerasState): ``TensorFlowKerasState(model, optimizer=None,
    backend=None, **values)``. The model must be built; the optimizer (the
    model's compiled one if not given) is built here if it is not yet.
    ``backend`` (Horovod's, for TF1 sessions) is accepted and not needed."""

    FORMAT = "fuseopt.keras.elastic/1"

    def __init__(self, model: Any, optimizer: Any = None, backend: Any = None,
                 **kwargs: Any) -> None:
        _eager_only(type(self).__name__)
        if not model.built:
            raise ValueError("Model must be built first. Run `model.build(input_shape)`.")
        self.model = model
        # An explicit optimizer may go with a model that was never compiled.
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        self.backend = backend
        self._save_variables()
        super().__init__(**kwargs)

    def _compressing_optimizer(self) -> Any:
        # fuseopt's Keras wrappers hold their compressor as .compression
        stateful = keeps_state(getattr(self.optimizer, "compression", None))
        return self.optimizer if stateful else None

    def _variables(self) -> List[Any]:
        shared, _seeds, opt_vars = split_model_variables(self.model)
        if self.optimizer is not None and self.optimizer is not getattr(self.model, "optimizer",
                                                                           None):
            if not self.optimizer.built:
                self.optimizer.build(self.model.trainable_variables)
            opt_vars = list(self.optimizer.variables)
        return shared + opt_vars


class TensorFlowState(VariablesState):
    """State of a list of tf.Variables (Horovod's TensorFlowState):
    ``TensorFlowState(variables, session=None, **values)``. Under TF2 there
    are no global variables to default to, so ``variables`` is required;
    ``session`` (TF1) is accepted and not needed."""

    FORMAT = "fuseopt.tensorflow.elastic/1"

    def __init__(self, variables: Optional[List[Any]] = None, session: Any = None,
                 **kwargs: Any) -> None:
        _eager_only("TensorFlowState")
        if not variables:
            raise InvalidArgumentError(
                "TensorFlowState(variables=...) needs the variables to keep: under TensorFlow 2 "
                "there are no global variables to default to (pass e.g. model.variables + "
                "optimizer.variables)")
        # Kept and restored by position (unnamed tf.Variables share the name
        # "Variable"); a commit must come from the same list: names and shapes
        # are compared at restore.
        self.variables = list(variables)
        self.session = session
        self._save_variables()
        super().__init__(**kwargs)

    def _variables(self) -> List[Any]:
        return self.variables


__all__ = ["HostsUpdatedInterrupt", "ObjectState", "State", "TensorFlowKerasState",
           "TensorFlowState", "broadcast_object", "broadcast_object_fn", "broadcast_variables",
           "init", "rank", "run", "shutdown"]
