"""DistributedOptimizer: averages gradients across ranks while backward runs.

Each parameter gets a post-accumulate-grad hook. When a parameter's gradient
is final for this step (after ``backward_passes_per_step`` local passes), the
hook enqueues its allreduce at once, so communication overlaps the rest of
backward. ``step()`` waits for all of them, writes the averaged gradients
back, and steps the wrapped optimizer.

The wrapper is composition, not a generated subclass: it holds the user's
optimizer and shares its ``param_groups``, ``state`` and ``defaults``, so LR
schedulers, GradScaler, state_dict round trips and subclasses of the wrapped
optimizer all behave as without fuseopt, and DistributedOptimizer itself can
be subclassed.
"""
import contextlib
import functools
import inspect
import warnings
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple, Union

import torch

from ..training import buckets, naming, optimizer_args
from ..core import process_sets as _ps
from ..training.compression import as_compressor, state_of
from ..base.errors import InvalidArgumentError, MismatchError, UnsupportedError
from . import ops
from ._reducer import GradientReducer
from ._wrapper import OptimizerWrapper
from .adasum import AdasumOptimizer
from .compression import Compression


DEFAULT_BUCKET_CAP_MB = buckets.DEFAULT_BUCKET_CAP_MB


_OUT_OF_PHASE = (
    "steps out of phase across ranks: some ranks called optimizer.step() (or synchronize()) "
    "with no backward pass since their previous step, and so resubmitted gradients that were "
    "already averaged (phase=1), while other ranks computed new ones. Every rank must run the "
    "same sequence of backward passes and steps. Detail: ")


class DistributedOptimizer(OptimizerWrapper):
    """Wraps ``optimizer`` so that ``step()`` uses gradients averaged over ranks.

    Args:
        optimizer: any torch optimizer (or subclass).
        named_parameters: ``model.named_parameters()``; names become the
            negotiation keys (recommended). Without it, parameters are named
            by their position in ``param_groups``, which must then be the
            same on every rank.
        compression: ``Compression.none`` / ``.fp16`` / ``.bf16`` /
            ``.ef_sign()`` or your own ``Compressor``.
        backward_passes_per_step: local backward passes accumulated before
            one allreduce. As in Horovod, gradients are summed over passes;
            scale each micro-batch loss by 1/N to get the gradient of the
            whole batch.
        op: ``Average`` (default), ``Sum``, or ``Adasum``: each rank then
            steps locally and the ranks combine the parameter changes with
            Adasum, as Horovod does (fuseopt/torch/adasum.py).
        gradient_predivide_factor: divide by this before the sum and by
            size()/factor after (guards float16 sums against overflow).
        num_groups / groups: submit these parameters together (once all of a
            group's gradients are ready), so they fuse into one bucket.
            ``groups`` is a list of lists of parameters; ``num_groups`` splits
            the parameters into that many groups in order.
        sparse_as_dense: as Horovod: sparse gradients (``nn.Embedding(sparse=
            True)``) are reduced as dense tensors when True, and otherwise by
            allgathering their indices and values (``sparse_allreduce_async``);
            either way ``p.grad`` stays sparse, so ``SparseAdam`` works.
        name_map: for mixed PyTorch/TensorFlow jobs: maps each name in
            ``named_parameters`` to a framework-neutral name or
            ``fuseopt.Shared(name, perm)`` (see docs/mixed.md).
        bucket_cap_mb: ready gradients are handed to the core together once
            this many MiB of them are waiting (one native call and one
            wake-up of the background thread per bucket instead of per
            gradient); the rest go at ``step()``/``synchronize()``. 0 hands
            each gradient over the moment it is ready; ``float("inf")`` (or
            ``"inf"``) waits for the end of backward: no overlap, which is
            faster when compute already uses every core (see
            docs/benchmarks.md). Default: ``FUSEOPT_BUCKET_CAP_MB`` or 4.
        shard: ``"optimizer"`` (ZeRO-1) or ``"gradients"`` (ZeRO-2): each
            rank keeps and steps the state of its share of the parameters
            (fuseopt/torch/sharded/, docs/torch.md "Sharded optimizer").
        split_parameters: with ``shard``: whether a parameter may be split
            into pieces owned by different ranks when whole parameters would
            leave the shares more than 5% apart. Default: for torch's
            optimizers that update each element on its own (SGD, Adam, AdamW,
            ...); pass True for another such optimizer, False to keep every
            parameter whole (an optimizer that reads a whole parameter: LAMB).
    """

    def __new__(cls, *args, **kwargs):
        # As Horovod: Adasum combines updates, not gradients (fuseopt/torch/adasum.py);
        # on one rank there is nothing to combine.
        if cls is not DistributedOptimizer:
            return super().__new__(cls)
        a = _INIT_SIGNATURE.bind(None, *args, **kwargs)
        a.apply_defaults()
        a = a.arguments
        if a["shard"] is not None:
            return _sharded(a)
        if a["op"] != ops.Adasum or _ps.size_of(a["process_set"]) == 1:
            return super().__new__(cls)
        optimizer_args.check(a["backward_passes_per_step"], a["op"], a["gradient_predivide_factor"])
        # Horovod's Adasum ignores the fusion groups and sparse_as_dense too
        # (each update is combined whole); fuseopt's own options have no
        # meaning there and are refused rather than ignored.
        for extra in ("name_map", "bucket_cap_mb"):
            if a[extra] is not None:
                raise UnsupportedError("DistributedOptimizer(op=Adasum) does not take %s"
                                       % extra)
        return AdasumOptimizer(a["optimizer"], a["named_parameters"], a["compression"],
                               a["backward_passes_per_step"], a["process_set"])

    def __init__(self, optimizer: torch.optim.Optimizer,
                 named_parameters: Optional[Iterable[Tuple[str, torch.Tensor]]] = None,
                 compression: Any = Compression.none, backward_passes_per_step: int = 1,
                 op: int = ops.Average, gradient_predivide_factor: float = 1.0,
                 num_groups: int = 0,
                 groups: Optional[Union[int, Sequence[Sequence[torch.Tensor]]]] = None,
                 sparse_as_dense: bool = False, process_set: Optional[_ps.ProcessSet] = None,
                 name_map: Optional[Dict[str, Any]] = None,
                 bucket_cap_mb: Optional[Union[float, str]] = None,
                 shard: Optional[str] = None, split_parameters: Optional[bool] = None) -> None:
        # No Optimizer.__init__: the wrapped optimizer owns parameters and state.
        if split_parameters is not None:
            raise InvalidArgumentError("split_parameters applies to a sharded optimizer only "
                                       "(shard=\"optimizer\" or \"gradients\")")
        self._process_set, set_id = process_set, _ps.id_of(process_set)
        self._member = set_id == 0 or (process_set is not None and process_set.included())
        self._optimizer = optimizer
        optimizer_args.check(backward_passes_per_step, op, gradient_predivide_factor)
        self.backward_passes_per_step = backward_passes_per_step
        # Parameters are numbered once; the per-step bookkeeping is keyed by
        # that index (hashing a tensor costs a Python call, dozens per step).
        params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
        if name_map is not None and named_parameters is None:
            raise InvalidArgumentError("name_map needs named_parameters (its keys are those "
                                       "names)")
        local_names = naming.local_names(params, named_parameters)
        # Horovod's attribute, which scripts and its tests read: parameter -> name.
        self._parameter_names = dict(zip(params, local_names))
        self._reducer = GradientReducer(
            params, local_names, name_map, as_compressor(compression),
            op, gradient_predivide_factor, sparse_as_dense, process_set, set_id,
            _ps.size_of(process_set), bucket_cap_mb)
        self._params = params
        self._group_of = buckets.group_of(params, num_groups, groups)
        self._group_size: Dict[int, int] = {}
        for g in self._group_of:
            if g is not None:
                self._group_size[g] = self._group_size.get(g, 0) + 1
        self._passes = [0] * len(params)  # backward passes since the last allreduce
        self._ready: Dict[int, list] = {}  # group -> indices of the group's ready parameters
        self._should_synchronize = True
        self._synchronized = False
        self._hook_handles = [
            p.register_post_accumulate_grad_hook(functools.partial(self._on_grad_ready, i))
            for i, p in enumerate(params)]

    def add_param_group(self, param_group):
        """Adds a group to the wrapped optimizer; its gradients are averaged too
        (every rank must add the same groups in the same order)."""
        self._optimizer.add_param_group(param_group)
        known = set(self._params)
        for p in self._optimizer.param_groups[-1]["params"]:
            if p not in known and p.requires_grad:
                i = len(self._params)
                self._reducer.add_param(p, "grad.group%d.%d" % (len(self.param_groups) - 1, i))
                self._group_of.append(None)
                self._passes.append(0)
                self._hook_handles.append(p.register_post_accumulate_grad_hook(
                    functools.partial(self._on_grad_ready, i)))

    def state_dict(self):
        """The wrapped optimizer's state_dict, plus this rank's compressor
        state under ``"fuseopt_compression"`` when the compressor keeps one
        (PowerSGD's Q and error buffers, ef_sign's residuals)."""
        state = self._optimizer.state_dict()
        compression = self.compression_state()
        return state if compression is None else dict(state, fuseopt_compression=compression)

    def load_state_dict(self, state_dict):
        """Loads what state_dict gave (a plain optimizer's state_dict too)."""
        state_dict = dict(state_dict)
        compression = state_dict.pop("fuseopt_compression", None)
        self._optimizer.load_state_dict(state_dict)
        if compression is not None:
            self.load_compression_state(compression)

    def compression_state(self):
        """The compressor's state on this rank, or None if it keeps none."""
        return state_of(self._reducer.compression)

    def load_compression_state(self, state):
        """Restores what compression_state gave (names it lacks keep their state)."""
        self._reducer.compression.load_state_dict(state)

    def register_step_pre_hook(self, hook):
        """The wrapped optimizer's: ``hook`` runs before each step."""
        return self._optimizer.register_step_pre_hook(hook)

    def register_step_post_hook(self, hook):
        """The wrapped optimizer's: ``hook`` runs after each step."""
        return self._optimizer.register_step_post_hook(hook)

    def __repr__(self):
        return "DistributedOptimizer(%r)" % (self._optimizer,)

    def __getattr__(self, name):
        # Attributes of the wrapped optimizer (e.g. of a user subclass).
        if name.startswith("__") or name == "_optimizer":
            raise AttributeError(name)
        return getattr(self._optimizer, name)

    def set_backward_passes_per_step(self, passes):
        """Horovod's setter: local passes per allreduce from the next step on."""
        if passes < 1:
            raise InvalidArgumentError("backward_passes_per_step must be >= 1")
        self.backward_passes_per_step = passes
        self._passes = [0] * len(self._params)

    # -- communication -----------------------------------------------------------
    def _on_grad_ready(self, i, p):
        if not self._member:  # as Horovod: outside the process set, a plain local optimizer
            return
        if self._reducer.busy(i):
            raise InvalidArgumentError(
                "gradient of %s was computed again before step()/synchronize(); for several "
                "backward passes per step, pass backward_passes_per_step"
                % self._reducer.names[i])
        self._passes[i] += 1
        if self._passes[i] < self.backward_passes_per_step:
            return
        group = self._group_of[i]
        if group is not None:
            ready = self._ready.setdefault(group, [])
            ready.append(i)
            if len(ready) == self._group_size[group]:
                self._reducer.submit(ready)
                del self._ready[group]
            return
        self._reducer.ready(i)

    def synchronize(self):
        """Waits for every gradient's allreduce and writes the averages into
        ``p.grad``. Parameters whose gradient never arrived on this rank (an
        unused branch) take part with zeros, so no rank waits forever.

        A rank that synchronizes with no backward pass since its last step
        while gradients are still set would resubmit gradients already
        averaged, to be mixed with the other ranks' next ones. Its requests
        carry phase 1, so that this fails with MismatchError on every rank
        (steps out of phase) unless every rank does the same."""
        if not self._member:
            self._synchronized = True
            return
        reducer = self._reducer
        if not (reducer.in_flight or reducer.bucket or self._ready or any(self._passes)):
            reducer.phase = int(any(p.grad is not None for p in self._params))
        for i in range(len(self._params)):  # late ones: unused parameters, incomplete groups
            if i not in reducer.in_flight:
                reducer.bucket.hold(i)
        self._ready.clear()
        try:
            reducer.flush()
            reducer.wait_and_write_back()
        except MismatchError as e:
            if " phase=" not in str(e):
                raise
            raise MismatchError(_OUT_OF_PHASE + str(e)) from None
        finally:
            reducer.clear()
            self._passes = [0] * len(self._params)
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """``step()`` inside this block does not synchronize: call
        ``synchronize()`` yourself first (e.g. to clip or unscale gradients)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        """Waits for the averaged gradients (unless inside skip_synchronize()),
        then steps the wrapped optimizer. With a closure, the closure's
        backward pass is averaged before the step."""
        if self._should_synchronize:
            if self._synchronized:
                # A Python warning that opens as Horovod's does (scripts and
                # tests match its first words).
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(): the gradients are "
                              "averaged again, which slows training; wrap step() in "
                              "optimizer.skip_synchronize() when you call synchronize() "
                              "yourself", UserWarning, stacklevel=2)
            if closure is None:
                self.synchronize()
        self._synchronized = False
        if closure is not None:
            def synchronized_closure():
                loss = closure()
                self.synchronize()
                return loss
            return self._optimizer.step(synchronized_closure)
        return self._optimizer.step()

    def zero_grad(self, set_to_none=True):
        """The wrapped optimizer's; refused while gradients are being averaged."""
        if self._reducer.in_flight or self._reducer.bucket:
            raise InvalidArgumentError(
                "optimizer.zero_grad() was called after loss.backward() but before "
                "optimizer.step() or optimizer.synchronize(): gradients are still being "
                "averaged")
        return self._optimizer.zero_grad(set_to_none=set_to_none)

    def remove_hooks(self):
        """Detaches from the model's parameters (the optimizer stops reducing)."""
        for h in self._hook_handles:
            h.remove()
        self._hook_handles = []


def _sharded(a):
    """DistributedOptimizer(shard=...): the options that apply to it."""
    from .sharded import ShardedOptimizer
    refused = [name for name, default in (("op", ops.Average), ("gradient_predivide_factor", 1.0),
                                          ("num_groups", 0), ("groups", None),
                                          ("sparse_as_dense", False), ("name_map", None),
                                          ("bucket_cap_mb", None))
               if a[name] != default]
    if refused:
        raise UnsupportedError("DistributedOptimizer(shard=%r) does not take %s"
                               % (a["shard"], ", ".join(refused)))
    return ShardedOptimizer(a["optimizer"], a["named_parameters"], a["shard"], a["compression"],
                            a["backward_passes_per_step"], a["process_set"],
                            split_parameters=a["split_parameters"])


_INIT_SIGNATURE = inspect.signature(DistributedOptimizer.__init__)
# What help() and inspect show: __init__'s parameters (Horovod's, then
# fuseopt's), not __new__'s (*args, **kwargs).
setattr(DistributedOptimizer, "__signature__", _INIT_SIGNATURE.replace(
    parameters=list(_INIT_SIGNATURE.parameters.values())[1:]))
