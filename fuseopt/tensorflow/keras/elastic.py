"""Horovod's elastic training for Keras (``hvd.elastic``)::

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    callbacks = [hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.CommitStateCallback(state)]

    @hvd.elastic.run
    def train(state):
        state.model.fit(dataset, epochs=epochs - state.epoch, callbacks=callbacks)

KerasState is fuseopt.tensorflow.elastic's TensorFlowKerasState (how
variables are kept and committed is told there); this module adds the
callbacks that keep ``state.batch`` and ``state.epoch`` and commit.
"""
from __future__ import annotations

from typing import Any

import keras

from ...training.elastic import HostsUpdatedInterrupt, ObjectState, State
from ..elastic import TensorFlowKerasState, run


class KerasState(TensorFlowKerasState):
    """State of a Keras model and its optimizer (Horovod's KerasState):
    ``KerasState(model, optimizer=None, **values)``; the model must be built
    (the optimizer is built here if it is not yet)."""

    def __init__(self, model: Any, optimizer: Any = None, **kwargs: Any) -> None:
        super().__init__(model, optimizer=optimizer, **kwargs)


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
