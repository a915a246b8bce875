"""DistributedOptimizer(shard=...): the optimizer's state and step split
across ranks (ZeRO stages 1 and 2).

Each parameter has one owning rank, or, where whole parameters would
leave the ranks' shares unbalanced, is split into pieces with one owner each
(fuseopt/training/sharding.py: the plan, and the bound). Its gradient leaves
from its hook while backward runs, as the unsharded optimizer's do, but in a
reduction to its owner only (the core's reduce, fused across tensors like an
allreduce; one per piece): the owner gets the average, the bytes moved are a
reduce-scatter's. ``step()`` runs the wrapped optimizer with only the owned
parameters' gradients visible (torch optimizers skip a parameter whose
gradient is None, and make no state for it), then each parameter is
broadcast from its owner: an all-gather's bytes. Together, what one
allreduce of the gradients moves, with no fusion buffer of the optimizer's
own: the core reads and writes the gradients and parameters in place.

A piece that this rank owns stands in the wrapped optimizer's
``param_groups`` in place of its parameter: a flat view of the parameter's
elements [first, last), whose ``.grad`` is the same view of the averaged
gradient. Pieces are made only for optimizers that update each element on its
own (torch's SGD, Adam, AdamW, ... by exact class; ``split_parameters=True``
says so for another), and only of contiguous parameters.

``shard="optimizer"`` (ZeRO-1) keeps every ``p.grad`` allocated: the owned
ones hold the average, the others this rank's own local gradient.
``shard="gradients"`` (ZeRO-2) frees the others (``p.grad`` None), so a rank
keeps about 1/N of the gradients after the step."""
import contextlib
import functools
from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch

from ...base.errors import InvalidArgumentError, UnsupportedError
from ...core import process_sets as _ps
from ...training import naming, sharding
from ...training.sharding import Piece
from .._wrapper import OptimizerWrapper
from ..compression import Compression
from ..functions import allgather_object
from ..ops import Average, broadcast_async_, reduce_async_
from . import model_grads
from . import state as _state

_WIRE = {id(Compression.none): None, id(Compression.fp16): torch.float16,
         id(Compression.bf16): torch.bfloat16}

# Optimizers whose update of an element reads only that element's gradient and
# state (and the group's settings): a piece of a parameter steps as the whole would.
_ELEMENTWISE = (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW, torch.optim.Adamax,
                torch.optim.NAdam, torch.optim.RAdam, torch.optim.RMSprop, torch.optim.Adagrad,
                torch.optim.Adadelta, torch.optim.ASGD, torch.optim.Rprop)


class ShardedOptimizer(OptimizerWrapper):
    """See the module docstring; made by ``DistributedOptimizer(shard=...)``
    and by ``ZeroRedundancyOptimizer``. ``reduce_gradients=False``: the
    gradients arrive averaged already (DDP), only state and step are sharded."""

    def __init__(self, optimizer: torch.optim.Optimizer,
                 named_parameters: Optional[Iterable[Tuple[str, torch.Tensor]]] = None,
                 shard: str = sharding.OPTIMIZER, compression: Any = Compression.none,
                 backward_passes_per_step: int = 1, process_set: Optional[_ps.ProcessSet] = None,
                 reduce_gradients: bool = True, split_parameters: Optional[bool] = None) -> None:
        sharding.check_stage(shard)
        if id(compression) not in _WIRE:
            raise UnsupportedError("a sharded optimizer compresses with Compression.none, .fp16 "
                                   "or .bf16 only: each gradient travels whole to its owner in "
                                   "a reduction, which the other compressors' payloads cannot")
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
        self._names = ["shard.%s" % n for n in names]
        self._take_plan(split_parameters)
        self._passes = [0] * len(params)
        self._in_flight: Dict[int, Tuple[List[Any], torch.Tensor]] = {}  # i -> (handles, sent)
        self._synchronized = False
        self._should_synchronize = True
        self._loaded: Optional[dict] = None  # a full state_dict not yet broadcast (state.py)
        self._consolidated: Optional[dict] = None
        self._hooks = []
        if reduce_gradients and self._member and self.size > 1:
            self._hooks = [p.register_post_accumulate_grad_hook(
                functools.partial(self._on_grad_ready, i)) for i, p in enumerate(params)]

    # -- what a rank holds --------------------------------------------------------
    def _take_plan(self, split_parameters):
        """Owners (and pieces) for every parameter; this rank's pieces take
        their parameters' places in the wrapped optimizer's groups."""
        params, optimizer = self._params, self._optimizer
        if split_parameters is None:
            split_parameters = type(optimizer) in _ELEMENTWISE
        self.pieces: List[List[Piece]] = sharding.plan(
            [p.numel() for p in params], [p.element_size() for p in params], self.size,
            [bool(split_parameters) and p.is_contiguous() for p in params])
        # The owner of each whole parameter (None: split, see pieces).
        self.owner = [ps[0].rank if len(ps) == 1 else None for ps in self.pieces]
        ranks = self._process_set.ranks if self._process_set is not None \
            else list(range(self.size))
        self._global = ranks if self._member else []
        self._owned = {i for i, r in enumerate(self.owner) if r == self.rank}
        self._views: Dict[int, Tuple[int, int, torch.Tensor]] = {}  # i -> (first, last, view)
        for i, ps in enumerate(self.pieces):
            for piece in ps:
                if self.owner[i] is None and piece.rank == self.rank:
                    self._views[i] = (piece.first, piece.last,
                                      params[i].detach().view(-1)[piece.first:piece.last])
        index = {id(p): i for i, p in enumerate(params)}
        self._position = {}  # i -> its position in the groups (a state_dict key)
        k = 0
        for group in optimizer.param_groups:
            for j, p in enumerate(group["params"]):
                i = index.get(id(p))
                if i is not None:
                    self._position[i] = k
                    if i in self._views:
                        group["params"][j] = self._views[i][2]
                k += 1
        # What a wrapped optimizer that stepped before holds: its own share.
        for i, p in enumerate(params):
            held = optimizer.state.pop(p, None)
            if i in self._owned and held is not None:
                optimizer.state[p] = held
            elif i in self._views and held is not None:
                first, last, view = self._views[i]
                optimizer.state[view] = _state.part_of(held, first, last, p.numel())

    def owned_parameters(self) -> List[torch.Tensor]:
        """The parameters whose state and step this rank holds: whole ones,
        and the flat views that stand for the pieces it owns of split ones."""
        return [p if i in self._owned else self._views[i][2] for i, p in enumerate(self._params)
                if i in self._owned or i in self._views]

    def state_bytes(self) -> int:
        """Bytes of optimizer state (tensors) on this rank."""
        return sum(v.numel() * v.element_size() for s in self.state.values()
                   for v in s.values() if torch.is_tensor(v))

    # -- gradients ------------------------------------------------------------------
    @property
    def param_groups(self):
        """The wrapped optimizer's groups. Whoever reads the gradients through
        them (a GradScaler's ``unscale_``/``step``) must see them averaged, not
        in flight: reaching them while gradients travel waits for them first."""
        if self._in_flight:
            self.synchronize()
        return self._optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value):
        self._optimizer.param_groups = value

    def _on_grad_ready(self, i, p):
        self._synchronized = False
        if i in self._in_flight:
            raise InvalidArgumentError(
                "gradient of %s was computed again before step()/synchronize(); for several "
                "backward passes per step, pass backward_passes_per_step" % self._names[i])
        self._passes[i] += 1
        if self._passes[i] >= self.backward_passes_per_step:
            self._start(i)

    def _start(self, i):
        """Sends parameter i's gradient to its owner (each piece to its own),
        averaged there."""
        p = self._params[i]
        if p.grad is None:  # unused on this rank: take part with zeros
            p.grad = torch.zeros_like(p)
        elif p.grad.is_sparse:
            raise UnsupportedError("a sharded optimizer takes dense gradients only (%s)"
                                   % self._names[i])
        sent = p.grad
        if self._wire is not None and sent.is_floating_point() and sent.dtype != self._wire:
            sent = sent.to(self._wire)  # a 16-bit copy travels; the owner widens the average
        pieces = self.pieces[i]
        if len(pieces) == 1:
            handles = [reduce_async_(sent, self._global[pieces[0].rank], name=self._names[i],
                                     op=Average, process_set=self._process_set)]
        else:
            sent = sent.contiguous()
            flat = sent.view(-1)
            handles = [reduce_async_(flat[c.first:c.last], self._global[c.rank],
                                     name="%s.%d" % (self._names[i], k), op=Average,
                                     process_set=self._process_set)
                       for k, c in enumerate(pieces)]
        self._in_flight[i] = (handles, sent)

    def synchronize(self):
        """Waits for every gradient and leaves this rank's owned gradients
        averaged in ``p.grad`` (ZeRO-2: the others None)."""
        if not self._member or self.size == 1 or not self._hooks or self._synchronized:
            return
        for i in range(len(self._params)):  # unused parameters, incomplete accumulation
            if i not in self._in_flight:
                self._start(i)
        try:
            for i, (handles, sent) in sorted(self._in_flight.items()):
                for handle in handles:
                    handle.wait()
                p = self._params[i]
                if i in self._owned:
                    if sent is not p.grad:
                        p.grad.copy_(sent)
                elif i in self._views:
                    if sent is not p.grad:
                        first, last, _ = self._views[i]
                        _write_flat(p.grad, first, last, sent.view(-1)[first:last])
                elif self.shard == sharding.GRADIENTS:
                    p.grad = None
        finally:
            self._in_flight.clear()
            self._passes = [0] * len(self._params)
        self._show_piece_grads()
        self._agree_on_finiteness()
        self._synchronized = True  # until the next backward or step: no second reduction

    def _agree_on_finiteness(self):
        """See model_grads.agree_on_finiteness (GradScaler: every rank skips alike)."""
        model_grads.agree_on_finiteness(self.owned_parameters(), self._optimizer.param_groups,
                                        self._process_set)

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
        return model_grads.clip_grad_norm(self.owned_parameters(), max_norm, norm_type,
                                          self._process_set)

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
        if not self._hooks:  # gradients averaged by the caller (ZeroRedundancyOptimizer)
            self._show_piece_grads()
        hidden = {}
        for i, p in enumerate(self._params):
            if i not in self._owned and i not in self._views and p.grad is not None:
                hidden[i], p.grad = p.grad, None
        try:
            self._optimizer.step()
        finally:
            for i, g in hidden.items():
                self._params[i].grad = g
        self._gather_parameters()
        self._synchronized = False
        return loss

    def _show_piece_grads(self):
        """Each owned piece's gradient: the view of its parameter's (ZeRO-2:
        a copy, and the parameter's gradient is freed)."""
        for i, (first, last, view) in self._views.items():
            g = self._params[i].grad
            if g is None:
                continue
            whole = g.is_contiguous()
            part = g.view(-1)[first:last] if whole else g.reshape(-1)[first:last].clone()
            if self.shard == sharding.GRADIENTS and self._hooks:
                view.grad, self._params[i].grad = part.clone() if whole else part, None
            else:
                view.grad = part

    def _gather_parameters(self):
        """Every parameter (or piece) from its owner, in place (broadcasts
        fused per owner)."""
        handles = []
        for i, p in enumerate(self._params):
            name = "shard.param.%s" % self._names[i]
            pieces = self.pieces[i]
            if len(pieces) == 1:
                handles.append(broadcast_async_(p.data, self._global[pieces[0].rank], name=name,
                                                process_set=self._process_set))
                continue
            flat = p.data.view(-1)
            handles += [broadcast_async_(flat[c.first:c.last], self._global[c.rank],
                                         name="%s.%d" % (name, k), process_set=self._process_set)
                        for k, c in enumerate(pieces)]
        for handle in handles:
            handle.wait()

    def zero_grad(self, set_to_none=True):
        """The wrapped optimizer's; refused while gradients are in flight."""
        if self._in_flight:
            raise InvalidArgumentError(
                "optimizer.zero_grad() was called after loss.backward() but before "
                "optimizer.step() or optimizer.synchronize(): gradients are still being "
                "reduced")
        for i in self._views:  # their parameters stand in the groups as pieces only
            p = self._params[i]
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.zero_()
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


def _write_flat(grad, first, last, values):
    """grad's elements [first, last), in its logical order, from values."""
    if grad.is_contiguous():
        grad.view(-1)[first:last].copy_(values)
    else:
        whole = grad.contiguous()
        whole.view(-1)[first:last].copy_(values)
        grad.copy_(whole)


def _check_same_parameters(names, params, process_set):
    """Collective, once: every rank must plan with the same parameters. The
    reductions would catch a differing shape name by name, but only at the
    first step, with a message about one tensor: this says it at once, for
    the whole model, and catches a plan that differs by parameter order."""
    mine = [(n, tuple(p.shape), str(p.dtype)) for n, p in zip(names, params)]
    sharding.check_same_plan(mine, allgather_object(mine, name="shard.plan",
                                                    process_set=process_set), "parameters")
