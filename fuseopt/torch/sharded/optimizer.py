"""DistributedOptimizer(shard=...): the optimizer's state and step split
across ranks (ZeRO stages 1 and 2).

Each parameter has one owning rank (fuseopt/training/sharding.py). A
bucket's gradients leave from the gradient hooks while backward runs, as the
unsharded optimizer's do, but through an alltoall that gives each owner its
slice of every rank's gradients: the bytes of a reduce-scatter. The owner
sums them; ``step()`` runs the wrapped optimizer with only the owned
parameters' gradients visible (torch optimizers skip a parameter whose
gradient is None, and make no state for it), then one fused allgather of
the owners' updated slices rebuilds every parameter on every rank: the bytes
of an all-gather. Together, what one allreduce of the gradients moves.

``shard="optimizer"`` (ZeRO-1) keeps every ``p.grad`` allocated: the owned
ones hold the average, the others this rank's own local gradient.
``shard="gradients"`` (ZeRO-2) frees the others (``p.grad`` None), so a rank
keeps about 1/N of the gradients after the step."""
import contextlib
import functools
from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch

from ...base.errors import InvalidArgumentError, MismatchError, UnsupportedError
from ...core import process_sets as _ps
from ...training import buckets as _buckets
from ...training import naming, sharding
from .. import ragged_ops
from .._wrapper import OptimizerWrapper
from ..compression import Compression
from ..functions import allgather_object
from ..ops import Max, Sum, allreduce
from . import state as _state

_WIRE = {id(Compression.none): None, id(Compression.fp16): torch.float16,
         id(Compression.bf16): torch.bfloat16}


class ShardedOptimizer(OptimizerWrapper):
    """See the module docstring; made by ``DistributedOptimizer(shard=...)``
    and by ``ZeroRedundancyOptimizer``. ``reduce_gradients=False``: the
    gradients arrive averaged already (DDP), only state and step are sharded."""

    def __init__(self, optimizer: torch.optim.Optimizer,
                 named_parameters: Optional[Iterable[Tuple[str, torch.Tensor]]] = None,
                 shard: str = sharding.OPTIMIZER, compression: Any = Compression.none,
                 backward_passes_per_step: int = 1, process_set: Optional[_ps.ProcessSet] = None,
                 bucket_cap_mb: Optional[float] = None, reduce_gradients: bool = True) -> None:
        sharding.check_stage(shard)
        if id(compression) not in _WIRE:
            raise UnsupportedError("a sharded optimizer compresses with Compression.none, .fp16 "
                                   "or .bf16 only: its gradients travel in an alltoall, which "
                                   "the other compressors' payloads cannot")
        if backward_passes_per_step < 1:
            raise InvalidArgumentError("backward_passes_per_step must be >= 1")
        _ps.id_of(process_set)
        self._optimizer = optimizer
        self.shard = shard
        self._process_set = process_set
        self._member = process_set is None or process_set.included()
        self.rank = _ps.rank_in(process_set) if self._member else 0
        self.size = _ps.size_of(process_set) if self._member else 1
        self._wire = _WIRE[id(compression)]
        self.backward_passes_per_step = backward_passes_per_step
        params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
        if len(set(params)) != len(params):
            raise InvalidArgumentError("a parameter appears twice in the optimizer's groups")
        self._params = params
        names = naming.local_names(params, named_parameters)
        if self._member and self.size > 1:
            _check_same_parameters(names, params, process_set)
        nbytes = [p.numel() * p.element_size() for p in params]
        self.owner = sharding.owners(nbytes, self.size)
        ready_order = list(reversed(range(len(params))))  # backward meets the last layer first
        self._buckets = sharding.buckets(
            ready_order, [p.numel() for p in params], [p.element_size() for p in params],
            [(p.dtype, p.device) for p in params], self.owner, self.size,
            _buckets.cap_bytes(bucket_cap_mb))
        self._names = ["shard.%s" % names[b.params[0]] for b in self._buckets]
        self._bucket_of = {i: k for k, b in enumerate(self._buckets) for i in b.params}
        self._owned = {i for i, r in enumerate(self.owner) if r == self.rank}
        # What a wrapped optimizer that stepped before holds for others' parameters goes.
        for i, p in enumerate(params):
            if i not in self._owned:
                optimizer.state.pop(p, None)
        self._passes = [0] * len(params)
        self._waiting = [len(b.params) for b in self._buckets]
        self._in_flight: Dict[int, Any] = {}  # bucket -> alltoall handle
        self._buffers: Dict[Any, torch.Tensor] = {}  # fusion buffers (_fusion_buffer)
        self._should_synchronize = True
        self._loaded: Optional[dict] = None  # a full state_dict not yet broadcast (state.py)
        self._consolidated: Optional[dict] = None
        self._hooks = []
        if reduce_gradients and self._member and self.size > 1:
            self._hooks = [p.register_post_accumulate_grad_hook(
                functools.partial(self._on_grad_ready, i)) for i, p in enumerate(params)]

    # -- what a rank holds --------------------------------------------------------
    def owned_parameters(self) -> List[torch.Tensor]:
        """The parameters whose state and step this rank holds."""
        return [p for i, p in enumerate(self._params) if i in self._owned]

    def state_bytes(self) -> int:
        """Bytes of optimizer state (tensors) on this rank."""
        return sum(v.numel() * v.element_size() for s in self.state.values()
                   for v in s.values() if torch.is_tensor(v))

    # -- gradients ------------------------------------------------------------------
    def _on_grad_ready(self, i, p):
        k = self._bucket_of[i]
        if k in self._in_flight:
            raise InvalidArgumentError(
                "gradient of %s was computed again before step()/synchronize(); for several "
                "backward passes per step, pass backward_passes_per_step" % self._names[k])
        self._passes[i] += 1
        if self._passes[i] < self.backward_passes_per_step:
            return
        self._waiting[k] -= 1
        if self._waiting[k] == 0:
            self._start(k)

    def _start(self, k):
        """Sends each owner its slice of bucket k's gradients."""
        bucket = self._buckets[k]
        grads = []
        for i in bucket.params:
            p = self._params[i]
            if p.grad is None:  # unused on this rank: take part with zeros
                p.grad = torch.zeros_like(p)
            elif p.grad.is_sparse:
                raise UnsupportedError("a sharded optimizer takes dense gradients only (%s)"
                                       % self._names[k])
            grads.append(p.grad.reshape(-1))
        first = grads[0]
        wire = self._wire if self._wire is not None and first.is_floating_point() else first.dtype
        flat = self._fusion_buffer(("send", k), sum(g.numel() for g in grads), wire,
                                   first.device)
        offset = 0
        for g in grads:  # copy_ casts to the wire dtype on the way
            flat[offset:offset + g.numel()].copy_(g)
            offset += g.numel()
        self._in_flight[k] = ragged_ops.alltoall_async(flat, bucket.splits, self._names[k],
                                                       self._process_set)

    def _fusion_buffer(self, key, numel, dtype, device):
        """A flat buffer kept from step to step: at hundreds of MB a fresh one
        costs a page fault per 4 KiB every step."""
        buf = self._buffers.get(key)
        if buf is None or buf.numel() != numel or buf.dtype != dtype or buf.device != device:
            buf = self._buffers[key] = torch.empty(numel, dtype=dtype, device=device)
        return buf

    def synchronize(self):
        """Waits for every bucket and leaves this rank's owned gradients
        averaged in ``p.grad`` (ZeRO-2: the others None)."""
        if not self._member or self.size == 1 or not self._hooks:
            return
        for k in range(len(self._buckets)):  # unused parameters, incomplete accumulation
            if k not in self._in_flight:
                self._start(k)
        try:
            for k, handle in sorted(self._in_flight.items()):
                received, _ = handle.wait()
                self._write_owned(k, received)
        finally:
            self._in_flight.clear()
            self._passes = [0] * len(self._params)
            self._waiting = [len(b.params) for b in self._buckets]

    def _write_owned(self, k, received):
        bucket = self._buckets[k]
        mine = bucket.splits[self.rank]
        parts = received.view(self.size, mine)
        first = self._params[bucket.params[0]]
        if parts.dtype != first.dtype:  # 16 bits on the wire: sum in the gradient's dtype
            parts = parts.to(first.dtype)
        average = torch.mean(parts, 0, out=self._fusion_buffer(("average", k), mine, first.dtype,
                                                                first.device))
        offset = 0
        for i in bucket.params:
            p = self._params[i]
            if i in self._owned:
                view = average[offset:offset + p.numel()].view_as(p)
                if self.shard == sharding.GRADIENTS:
                    p.grad = view
                else:
                    p.grad.copy_(view)
                offset += p.numel()
            elif self.shard == sharding.GRADIENTS:
                p.grad = None

    @contextlib.contextmanager
    def skip_synchronize(self):
        """``step()`` inside this block does not synchronize: call
        ``synchronize()`` yourself first (e.g. to clip gradients)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        """``torch.nn.utils.clip_grad_norm_`` over the whole model's averaged
        gradients, each rank holding its owned ones: call after
        ``synchronize()``, inside ``skip_synchronize()``. Returns the total norm."""
        grads = [p.grad for p in self.owned_parameters() if p.grad is not None]
        norm_type = float(norm_type)
        zero = torch.zeros(1, dtype=torch.float64)
        if norm_type == float("inf"):
            local = torch.stack([g.detach().abs().max().double() for g in grads] + [zero[0]])
            total = allreduce(local.max().reshape(1), name="shard.clip.max", op=Max,
                              process_set=self._process_set)[0]
        else:
            local = torch.stack([g.detach().double().norm(norm_type) ** norm_type
                                 for g in grads] + [zero[0]])
            total = allreduce(local.sum().reshape(1), name="shard.clip.sum", op=Sum,
                              process_set=self._process_set)[0] ** (1.0 / norm_type)
        scale = float(max_norm) / (float(total) + 1e-6)
        if scale < 1.0:
            for g in grads:
                g.mul_(scale)
        return total.to(torch.float32)

    # -- the step -------------------------------------------------------------------
    def step(self, closure=None):
        """Synchronizes (unless inside skip_synchronize()), steps the owned
        parameters, and gathers every parameter from its owner."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._should_synchronize:
            self.synchronize()
        self._loaded = None
        if not self._member or self.size == 1:
            self._optimizer.step()
            return loss
        hidden = {}
        for i, p in enumerate(self._params):
            if i not in self._owned and p.grad is not None:
                hidden[i], p.grad = p.grad, None
        try:
            self._optimizer.step()
        finally:
            for i, g in hidden.items():
                self._params[i].grad = g
        self._gather_parameters()
        return loss

    def _gather_parameters(self):
        """One fused allgather of every bucket's owned slices."""
        flats = []
        for k, bucket in enumerate(self._buckets):
            first = self._params[bucket.params[0]]
            owned = [self._params[i].detach().reshape(-1) for i in bucket.params
                     if i in self._owned]
            flat = self._fusion_buffer(("owned", k), sum(p.numel() for p in owned),
                                       first.dtype, first.device)
            if owned:
                torch.cat(owned, out=flat)
            flats.append(flat)
        gathered = ragged_ops.grouped_allgather_async(
            flats, name="shard.params", process_set=self._process_set).wait()
        with torch.no_grad():
            for bucket, flat in zip(self._buckets, gathered):
                offset = 0
                for i in bucket.params:
                    p = self._params[i]
                    if i not in self._owned:
                        p.copy_(flat[offset:offset + p.numel()].view_as(p))
                    offset += p.numel()

    def zero_grad(self, set_to_none=True):
        """The wrapped optimizer's; refused while gradients are in flight."""
        if self._in_flight:
            raise InvalidArgumentError(
                "optimizer.zero_grad() was called after loss.backward() but before "
                "optimizer.step() or optimizer.synchronize(): gradients are still being "
                "reduced")
        return self._optimizer.zero_grad(set_to_none=set_to_none)

    # -- state ------------------------------------------------------------------------
    def consolidate_state_dict(self, to: int = 0) -> None:
        """Collective: gathers every rank's shard of the state on rank ``to``,
        where ``state_dict()`` then returns the whole (torch's
        ZeroRedundancyOptimizer's protocol)."""
        self._consolidated = _state.consolidate(self, to)

    def state_dict(self):
        """The whole optimizer state, world-size independent, on the rank that
        ``consolidate_state_dict(to=...)`` named (a plain optimizer's format)."""
        if self._consolidated is None:
            raise InvalidArgumentError(
                "a sharded optimizer's state is spread over the ranks: call "
                "optimizer.consolidate_state_dict(to=rank) on every rank first, then "
                "state_dict() on that rank (or sharded_state_dict() on every rank)")
        out, self._consolidated = self._consolidated, None
        return out

    def sharded_state_dict(self) -> dict:
        """This rank's shard of the state (not collective; for
        fuseopt.torch.save_checkpoint and load_sharded_state_dict)."""
        return _state.local_shard(self)

    def load_state_dict(self, state_dict):
        """Loads a whole state (state_dict(), or a plain optimizer's, from
        any number of ranks) and keeps this rank's shard of it."""
        _state.load_whole(self, state_dict)

    def broadcast_state(self, root_rank: int = 0) -> None:
        """What broadcast_optimizer_state does for a sharded optimizer: every
        rank takes its shard of root_rank's state (the whole one root loaded,
        or else the state spread over the ranks) and root's hyper-parameters."""
        _state.broadcast(self, root_rank)

    def remove_hooks(self):
        """Detaches from the model's parameters (gradients stop travelling)."""
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def __repr__(self):
        return "DistributedOptimizer(%r, shard=%r)" % (self._optimizer, self.shard)

    def __getattr__(self, name):
        if name.startswith("__") or name == "_optimizer":
            raise AttributeError(name)
        return getattr(self._optimizer, name)


def _check_same_parameters(names, params, process_set):
    """Collective, once: every rank must plan with the same parameters. An
    alltoall takes a different size from every rank by design, so a rank
    whose model differs would otherwise reach its owners unnoticed."""
    mine = [(n, tuple(p.shape), str(p.dtype)) for n, p in zip(names, params)]
    every = allgather_object(mine, name="shard.plan", process_set=process_set)
    for rank, theirs in enumerate(every):
        if theirs != mine:
            differ = next(((a, b) for a, b in zip(mine, theirs) if a != b), None)
            raise MismatchError(
                "ranks disagree about the parameters of a sharded optimizer: rank %d has %d "
                "(first difference: %s), this rank %d" % (
                    rank, len(theirs),
                    "%s against %s here" % (differ[1], differ[0]) if differ
                    else "a different count", len(mine)))


class ZeroRedundancyOptimizer(ShardedOptimizer):
    """torch.distributed.optim.ZeroRedundancyOptimizer's signature over
    fuseopt: the state and step of ``optimizer_class(params, **defaults)``
    sharded across ranks, for gradients that arrive averaged already (DDP,
    or your own allreduce). For fuseopt's own overlapped gradient reduction
    use ``DistributedOptimizer(opt, shard="gradients")``."""

    def __init__(self, params, optimizer_class, process_group=None,
                 parameters_as_bucket_view=False, overlap_with_ddp=False, **defaults):
        if process_group is not None and not isinstance(process_group, _ps.ProcessSet):
            raise UnsupportedError("ZeroRedundancyOptimizer takes a fuseopt ProcessSet as "
                                   "process_group, or None for every rank")
        if overlap_with_ddp:
            raise UnsupportedError("overlap_with_ddp needs DDP's communication hook; use "
                                   "DistributedOptimizer(opt, shard=...) for overlap")
        super().__init__(optimizer_class(params, **defaults), shard=sharding.OPTIMIZER,
                         process_set=process_group, reduce_gradients=False)
