"""Horovod's elastic training for PyTorch (``hvd.elastic``)::

    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0)
    state.register_reset_callbacks([on_state_reset])

    @hvd.elastic.run
    def train(state):
        ...
        state.commit()

Run it under ``fuseoptrun --min-np N --max-np M --host-discovery-script S``.
A reset restarts the MPI job (see fuseopt/training/elastic.py and docs/reliability.md).
"""
from typing import Any, Callable

from ...training.elastic import HostsUpdatedInterrupt, ObjectState, State, run_fn
from .sampler import ElasticSampler
from .state import TorchState


def run(func: Callable[..., Any]) -> Callable[..., Any]:
    """Decorates the training function ``func(state, *args, **kwargs)``: on
    every start it restores the newest commit (calling the reset callbacks
    when it does), syncs the state from rank 0 and calls ``func``; a lost
    peer or a change of hosts ends the job for fuseoptrun to restart. Any
    other error propagates and ends the job."""
    return run_fn(func)


__all__ = ["ElasticSampler", "HostsUpdatedInterrupt", "ObjectState", "State", "TorchState", "run"]
