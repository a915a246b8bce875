"""Horovod's elastic training for Keras (``hvd.elastic``)::

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    callbacks = [hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.CommitStateCallback(state)]

    @hvd.elastic.run
    def train(state):
        state.model.fit(dataset, epochs=epochs - state.epoch, callbacks=callbacks)

The model's and optimizer's variables are kept as NumPy copies; the commit
store gets them as an ``.npz`` archive with a JSON header, read back with
``allow_pickle=False`` (never code from the file), so the state's other
values must be JSON data. See fuseopt/elastic.py for how a reset works.
"""
from __future__ import annotations

from typing import Any, Callable
import io
import json

import keras
import numpy as np
import tensorflow as tf

from ...checkpoint import CheckpointError, check_plain, encode_header
from ...elastic import RESET_ERRORS, HostsUpdatedInterrupt, ObjectState, State, run_fn
from ..functions import broadcast_variables
from .checkpoint import _split


def _is_reset_error(error: BaseException) -> bool:
    """A lost peer, also when it surfaced inside a TensorFlow op (model.fit
    runs fuseopt's collectives in tf.numpy_function, which re-raises them as
    an OpError naming the Python exception)."""
    if isinstance(error, RESET_ERRORS):
        return True
    return isinstance(error, tf.errors.OpError) and any(
        cls.__name__ in str(error.message) for cls in RESET_ERRORS)


def run(func: Callable[..., Any]) -> Callable[..., Any]:
    """Decorates the training function ``func(state, *args, **kwargs)``; see
    fuseopt.torch.elastic.run."""
    return run_fn(func, _is_reset_error)


class KerasState(ObjectState):
    """State of a Keras model and its optimizer (Horovod's KerasState):
    ``KerasState(model, optimizer=None, **values)``; the model must be built
    (the optimizer is built here if it is not yet)."""

    FORMAT = "fuseopt.keras.elastic/1"

    def __init__(self, model: Any, optimizer: Any = None, **kwargs: Any) -> None:
        if not model.built:
            raise ValueError("Model must be built first. Run `model.build(input_shape)`.")
        self.model = model
        # An explicit optimizer may go with a model that was never compiled.
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        self._save_model()
        super().__init__(**kwargs)

    def _variables(self) -> list:
        shared, _seeds, opt_vars = _split(self.model)
        if self.optimizer is not None and self.optimizer is not getattr(self.model, "optimizer",
                                                                           None):
            if not self.optimizer.built:
                self.optimizer.build(self.model.trainable_variables)
            opt_vars = list(self.optimizer.variables)
        return shared + opt_vars

    def _save_model(self) -> None:
        variables = self._variables()
        self._saved_paths = [v.path for v in variables]
        self._saved_values = [np.array(v) for v in variables]

    def _load_model(self) -> None:
        for v, value in zip(self._variables(), self._saved_values):
            v.assign(value)

    def save(self) -> None:
        self._save_model()
        super().save()

    def restore(self) -> None:
        self._load_model()
        super().restore()

    def sync(self) -> None:
        broadcast_variables(self._variables(), 0)
        self._save_model()
        super().sync()

    def _payload(self) -> bytes:
        values = self._user_values()
        header = encode_header({"format": self.FORMAT, "paths": self._saved_paths,
                                "values": values})
        buffer = io.BytesIO()
        np.savez(buffer, header=np.frombuffer(header, np.uint8),
                 **{"v%d" % i: a for i, a in enumerate(self._saved_values)})
        return buffer.getvalue()

    def _load_payload(self, payload: bytes) -> None:
        with np.load(io.BytesIO(payload), allow_pickle=False) as archive:
            header = json.loads(archive["header"].tobytes().decode("utf-8"))
            if not isinstance(header, dict) or header.get("format") != self.FORMAT:
                raise CheckpointError("the commit is not a %s payload" % self.FORMAT)
            variables = self._variables()
            if header["paths"] != [v.path for v in variables]:
                raise CheckpointError("the commit was saved from another model or optimizer "
                                      "(its variables differ)")
            values = [archive["v%d" % i] for i in range(len(variables))]
        wrong = [v.path for v, a in zip(variables, values) if tuple(a.shape) != tuple(v.shape)]
        if wrong:
            raise CheckpointError("the commit's variables have other shapes: %s" % wrong[:8])
        check_plain(header["values"], "elastic state values")
        self._saved_values = values
        self._set_user_values(header["values"])
        self.restore()


class CommitStateCallback(keras.callbacks.Callback):
    """Commits ``state`` every ``batches_per_commit`` batches and at the end
    of every epoch."""

    def __init__(self, state: State, batches_per_commit: int = 1) -> None:
        super().__init__()
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_begin(self, logs: Any = None) -> None:
        self.batches_remaining = self.batches_per_commit  # the same count on every rank

    def on_batch_end(self, batch: int, logs: Any = None) -> None:
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.state.commit()


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keeps ``state.batch`` at the batch just done; an epoch resumed after a
    reset runs only its remaining steps (as far as Keras lets ``params``
    change it)."""

    def __init__(self, state: State) -> None:
        super().__init__()
        self.state = state
        self.steps_per_epoch = None

    def on_train_begin(self, logs: Any = None) -> None:
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        if self.params.get("steps"):
            if self.steps_per_epoch is None:
                self.steps_per_epoch = self.params.get("steps")
            self.params["steps"] = self.steps_per_epoch - self.state.batch

    def on_batch_end(self, batch: int, logs: Any = None) -> None:
        self.state.batch = batch

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.state.batch = 0


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Keeps ``state.epoch`` at the number of epochs done over all resets
    (Keras counts each ``fit`` call's epochs from 0)."""

    def __init__(self, state: State) -> None:
        super().__init__()
        self.state = state
        self.initial_epoch = state.epoch

    def on_train_begin(self, logs: Any = None) -> None:
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        # +1: a reset after state.batch went back to 0 must not repeat this epoch.
        self.state.epoch = self.initial_epoch + epoch + 1


__all__ = ["CommitStateCallback", "HostsUpdatedInterrupt", "KerasState", "ObjectState", "State",
           "UpdateBatchStateCallback", "UpdateEpochStateCallback", "run"]
