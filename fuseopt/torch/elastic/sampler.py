"""Horovod's ElasticSampler: a DistributedSampler that remembers how much of
the epoch has been processed, so that after a reset the survivors (or the
grown world) share only the rest."""
from __future__ import annotations

from typing import Any, Dict, Iterator, List, Set

import torch.utils.data

from ...core import world
from ...training.elastic import epoch_order, share


class ElasticSampler(torch.utils.data.Sampler):
    """Partitions ``dataset`` over the ranks and re-partitions what is left
    of the epoch after a reset.

    Put it in the TorchState, call ``record_batch(batch_idx, batch_size)``
    after each batch and ``set_epoch(epoch)`` when an epoch is done (at its
    end, so that a reset in the middle does not repeat samples). ``seed``
    must be the same on every rank.

    As Horovod 0.28.1's: ``processed_num`` counts the samples the epoch has
    processed on all ranks (``record_batch`` adds ``batch_size *
    num_replicas``: ranks step together), and those are the first
    ``processed_num`` of the epoch's order; ``remaining_indices`` is the rest,
    ``num_samples`` this rank's share of it (padded like DistributedSampler's
    to ``total_size`` over ``num_replicas``). ``state_dict()`` holds ``epoch``
    and ``processed_num``; ``load_state_dict`` also takes Horovod 0.27's
    ``processed_indices``, and ``processed_indices`` reads as the set of
    samples processed so far."""

    def __init__(self, dataset: Any, shuffle: bool = True, seed: int = 0) -> None:
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices: List[int] = []
        self.indices: List[int] = []
        self.num_samples = 0
        self.total_size = 0
        self.reset()

    def set_epoch(self, epoch: int) -> None:
        """Starts ``epoch``: forgets the processed samples, reshuffles."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx: int, batch_size: int) -> None:
        """Counts a batch of ``batch_size`` processed on every rank."""
        self.processed_num += batch_size * self.num_replicas

    def get_indices(self, batch_idx: int, batch_size: int) -> List[int]:
        """The dataset indices of this rank's ``batch_idx``-th batch of this
        pass (Horovod 0.27's)."""
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    @property
    def processed_indices(self) -> Set[int]:
        """The samples of this epoch processed so far, on every rank."""
        return set(self._order()[:self.processed_num])

    def state_dict(self) -> Dict[str, Any]:
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Takes Horovod 0.28's state (``epoch``, ``processed_num``) and 0.27's
        (``epoch``, ``processed_indices``: their number counts)."""
        self.epoch = int(state_dict["epoch"])
        if "processed_num" in state_dict:
            self.processed_num = int(state_dict["processed_num"])
        else:
            self.processed_num = len(set(state_dict["processed_indices"]))
        self.reset()

    def _order(self) -> List[int]:
        return epoch_order(len(self.dataset), self.shuffle, self.seed, self.epoch)

    def reset(self) -> None:
        """Re-shards the rest of the epoch over the current world."""
        initialized = world.is_initialized()
        self.num_replicas = world.size() if initialized else 1
        self.rank = world.rank() if initialized else 0
        self.remaining_indices = self._order()[self.processed_num:]
        self.indices = share(self.remaining_indices, self.rank, self.num_replicas)
        self.num_samples = len(self.indices)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self) -> Iterator[int]:
        return iter(list(self.indices))

    def __len__(self) -> int:
        return self.num_samples
