"""Horovod's ElasticSampler: a DistributedSampler that remembers which
samples the epoch has processed, so that after a reset the survivors (or the
grown world) share only the rest."""
from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, List

import torch.utils.data

from ...core import world
from ...training.elastic import remaining_share


class ElasticSampler(torch.utils.data.Sampler):
    """Partitions ``dataset`` over the ranks and re-partitions what is left
    of the epoch after a reset.

    Put it in the TorchState, call ``record_batch(batch_idx, batch_size)``
    after each batch and ``set_epoch(epoch)`` when an epoch is done (at its
    end, so that a reset in the middle does not repeat samples). ``seed``
    must be the same on every rank."""

    def __init__(self, dataset: Any, shuffle: bool = True, seed: int = 0) -> None:
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices: set = set()
        self.num_replicas = 0
        self.rank = 0
        self.indices: List[int] = []
        self.num_samples = 0
        self.reset()

    def set_epoch(self, epoch: int) -> None:
        """Starts ``epoch``: forgets the processed samples, reshuffles."""
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx: int, batch_size: int) -> None:
        """Marks this rank's ``batch_idx``-th batch of this pass processed."""
        self.record_indices(self.get_indices(batch_idx, batch_size))

    def record_indices(self, indices: Iterable[int]) -> None:
        self.processed_indices.update(int(i) for i in indices)

    def get_indices(self, batch_idx: int, batch_size: int) -> List[int]:
        """The dataset indices of this rank's ``batch_idx``-th batch."""
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def state_dict(self) -> Dict[str, Any]:
        return {"epoch": self.epoch, "processed_indices": sorted(self.processed_indices)}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.epoch = int(state_dict["epoch"])
        self.processed_indices = set(int(i) for i in state_dict["processed_indices"])
        self.reset()

    def reset(self) -> None:
        """Re-shards the rest of the epoch over the current world."""
        initialized = world.is_initialized()
        self.num_replicas = world.size() if initialized else 1
        self.rank = world.rank() if initialized else 0
        self.indices = remaining_share(len(self.dataset), self.processed_indices, self.shuffle,
                                       self.seed, self.epoch, self.rank, self.num_replicas)
        self.num_samples = len(self.indices)

    def __iter__(self) -> Iterator[int]:
        return iter(list(self.indices))

    def __len__(self) -> int:
        return self.num_samples
