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

import torch

from .. import buckets, naming, optimizer_args, overlap
from ..errors import InvalidArgumentError, MismatchError, UnsupportedError
from ..log import logger
from .. import requests as _rq
from . import _tensors as _t
from . import ops, row_ops
from .. import process_sets as _ps
from ._wrapper import OptimizerWrapper
from .adasum import AdasumOptimizer
from ..compression import as_compressor, reducing_over
from .compression import Compression


DEFAULT_BUCKET_CAP_MB = buckets.DEFAULT_BUCKET_CAP_MB


# In-flight marker of a gradient reduced in place in p.grad (_submit_plain);
# its bucket's handle is in _in_place_buckets.
_IN_PLACE = object()


class _Sparse:
    """A sparse gradient in flight: the callable of sparse_allreduce_async."""
    __slots__ = ("handle",)

    def __init__(self, handle):
        self.handle = handle

_MAX_PLANS = 1024  # per optimizer; see _submit_plain

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
    """

    def __new__(cls, *args, **kwargs):
        # As Horovod: Adasum combines updates, not gradients (fuseopt/torch/adasum.py);
        # on one rank there is nothing to combine.
        if cls is not DistributedOptimizer:
            return super().__new__(cls)
        a = _INIT_SIGNATURE.bind(None, *args, **kwargs)
        a.apply_defaults()
        a = a.arguments
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

    def __init__(self, optimizer, named_parameters=None, compression=Compression.none,
                 backward_passes_per_step=1, op=ops.Average, gradient_predivide_factor=1.0,
                 num_groups=0, groups=None, sparse_as_dense=False, process_set=None,
                 name_map=None, bucket_cap_mb=None):
        # No Optimizer.__init__: the wrapped optimizer owns parameters and state.
        self._process_set, self._set_id = process_set, _ps.id_of(process_set)
        self._member = self._set_id == 0 or process_set.included()
        self._set_size = _ps.size_of(process_set)  # ranks a compressor's sum is over
        self._optimizer = optimizer
        self._compression = as_compressor(compression)
        optimizer_args.check(backward_passes_per_step, op, gradient_predivide_factor)
        self.backward_passes_per_step = backward_passes_per_step
        self._op = op
        self._sparse_as_dense = sparse_as_dense
        self._predivide = gradient_predivide_factor
        # Parameters are numbered once; the per-step bookkeeping is keyed by
        # that index (hashing a tensor costs a Python call, dozens per step).
        self._params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
        local_names = self._local_names(named_parameters)
        self._names = [naming.GRADIENT_PREFIX + n for n in local_names]
        self._perms = {}  # index -> Shared, for parameters stored in another layout
        if name_map is not None:
            if named_parameters is None:
                raise InvalidArgumentError("name_map needs named_parameters (its keys are those "
                                           "names)")
            for i, shared in enumerate(naming.resolve(name_map, local_names)):
                self._names[i] = naming.GRADIENT_PREFIX + shared.name
                if shared.perm is not None:
                    self._perms[i] = shared
        self._group_of = buckets.group_of(self._params, num_groups, groups)
        self._group_size = {}
        for g in self._group_of:
            if g is not None:
                self._group_size[g] = self._group_size.get(g, 0) + 1
        self._passes = [0] * len(self._params)  # backward passes since the last allreduce
        # Bucket sizes from the parameters (a gradient has its parameter's
        # size), not read from tensors in every hook.
        self._nbytes = [p.numel() * p.element_size() for p in self._params]
        self._plans = {}  # (indices, op, scales) -> _submit_plain's request fields
        self._plan_token = object()  # this optimizer's part of the request-cache key
        self._in_place_buckets = []  # handles whose results land in p.grad itself
        self._ready = {}        # group -> indices of the group's ready parameters
        # index -> (bucket handle, first, count, compression ctx), or _IN_PLACE
        self._in_flight = {}
        # Ready gradients not yet submitted (an ordered set of indices), and their bytes.
        self._bucket = {}
        self._bucket_bytes = 0
        self._bucket_cap = buckets.cap_bytes(bucket_cap_mb)
        self._should_synchronize = True
        self._synchronized = False
        self._phase = 0  # of the requests being submitted: see synchronize()
        self._hook_handles = [
            p.register_post_accumulate_grad_hook(functools.partial(self._on_grad_ready, i))
            for i, p in enumerate(self._params)]

    def add_param_group(self, param_group):
        self._optimizer.add_param_group(param_group)
        known = set(self._params)
        for p in self._optimizer.param_groups[-1]["params"]:
            if p not in known and p.requires_grad:
                i = len(self._params)
                self._params.append(p)
                self._names.append("grad.group%d.%d" % (len(self.param_groups) - 1, i))
                self._group_of.append(None)
                self._passes.append(0)
                self._nbytes.append(p.numel() * p.element_size())
                self._hook_handles.append(p.register_post_accumulate_grad_hook(
                    functools.partial(self._on_grad_ready, i)))

    def register_step_pre_hook(self, hook):
        return self._optimizer.register_step_pre_hook(hook)

    def register_step_post_hook(self, hook):
        return self._optimizer.register_step_post_hook(hook)

    def __repr__(self):
        return "DistributedOptimizer(%r)" % (self._optimizer,)

    def __getattr__(self, name):
        # Attributes of the wrapped optimizer (e.g. of a user subclass).
        if name.startswith("__") or name == "_optimizer":
            raise AttributeError(name)
        return getattr(self._optimizer, name)

    # -- naming and grouping ---------------------------------------------------
    def _local_names(self, named_parameters):
        if named_parameters is None:
            return ["param.%d" % i for i in range(len(self._params))]
        named = list(named_parameters)
        names = [n for n, _ in named]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise InvalidArgumentError("named_parameters has duplicate names: %s" % dup)
        by_param = {p: n for n, p in named}
        missing = [i for i, p in enumerate(self._params) if p not in by_param]
        if missing:
            raise InvalidArgumentError(
                "%d optimizer parameter(s) are not in named_parameters (positions %s); pass "
                "model.named_parameters() of the model this optimizer trains" % (
                    len(missing), missing[:5]))
        return [by_param[p] for p in self._params]

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
        if i in self._in_flight or i in self._bucket:
            raise InvalidArgumentError(
                "gradient of %s was computed again before step()/synchronize(); for several "
                "backward passes per step, pass backward_passes_per_step" % self._names[i])
        self._passes[i] += 1
        if self._passes[i] < self.backward_passes_per_step:
            return
        group = self._group_of[i]
        if group is not None:
            ready = self._ready.setdefault(group, [])
            ready.append(i)
            if len(ready) == self._group_size[group]:
                self._submit(ready)
                del self._ready[group]
            return
        self._bucket[i] = None
        self._bucket_bytes += self._nbytes[i]
        if self._bucket_bytes >= self._bucket_cap:
            self._flush_bucket()

    def _flush_bucket(self):
        if self._bucket:
            self._submit(list(self._bucket))
        self._bucket.clear()
        self._bucket_bytes = 0

    def _submit(self, indices):
        """Starts the allreduces of these parameters in one native call."""
        op = self._compression.reduce_op if self._compression.reduce_op is not None else self._op
        scales = optimizer_args.scales(op, self._predivide)
        if self._compression is Compression.none and not self._perms:
            grads = [self._params[i].grad for i in indices]
            if all(g is not None and g.is_cpu and not g.is_sparse and g.is_contiguous()
                   for g in grads):
                return self._submit_plain(indices, grads, op, scales)
        batch = _rq.Batch()
        started = []
        plain = self._compression is Compression.none
        for i in indices:
            p = self._params[i]
            grad = p.grad
            if grad is None:  # unused on this rank: take part with zeros
                grad = p.grad = torch.zeros_like(p)
            if grad.is_sparse and not self._sparse_as_dense:
                self._in_flight[i] = _Sparse(row_ops.sparse_allreduce_async(
                    grad, self._names[i], op, self._process_set))
                continue
            if grad.is_sparse:  # reduced dense, written back sparse
                grad = grad.to_dense()
            name = self._names[i]
            shared = self._perms.get(i)
            if shared is not None:  # travels in the shared layout (a copy, made contiguous below)
                grad = grad.permute(shared.perm)
            if plain:
                payloads, ctx = (grad,), None
            else:
                with reducing_over(self._set_size):
                    payloads, ctx = self._compression.compress(grad, name)
            for k, payload in enumerate(payloads):
                args, kwargs = ops.allreduce_op(payload.contiguous(),
                                                name if k == 0 else "%s.%d" % (name, k), op,
                                                scales[0], scales[1], True, self._process_set)
                batch.add(*args, phase=self._phase, **kwargs)
            started.append((i, len(payloads), ctx))
        if not started:  # sparse gradients only
            return
        # One handle per bucket: waiting on each gradient separately costs a
        # native call each (~0.6 ms per step for 200 small gradients).
        bucket = batch.submit_group()
        first = 0
        for i, count, ctx in started:
            self._in_flight[i] = (bucket, first, count, ctx)
            first += count

    def _submit_plain(self, indices, grads, op, scales):
        """The common case (host gradients in place, no compression or shared
        layout) from a plan made once per bucket: a step checks each
        gradient's shape and dtype against it and passes one pointer each."""
        plan_key = (tuple(indices), op, scales, self._phase)
        plan = self._plans.get(plan_key)
        if plan is None or any(g.shape != shape or g.dtype != dtype
                               for g, shape, dtype in zip(grads, plan[3], plan[4])):
            if len(self._plans) >= _MAX_PLANS:  # bucket compositions that keep changing
                self._plans.clear()
            plan = self._plans[plan_key] = self._plan(plan_key, indices, grads)
        key, names, dtype_names, shapes, _ = plan
        ptrs = [_t.ptr(g) for g in grads]
        bucket = _rq.submit_group(_rq.ALLREDUCE, names, dtype_names, shapes, ptrs, ptrs,
                                  reduce_op=op, prescale=scales[0], postscale=scales[1],
                                  keepalive=grads, key=key, phase=self._phase,
                                  process_set=self._set_id)
        self._in_place_buckets.append(bucket)
        for i in indices:
            self._in_flight[i] = _IN_PLACE

    def _plan(self, plan_key, indices, grads):
        """(request-cache key, names, dtype names, shapes, torch dtypes)."""
        shapes = [tuple(g.shape) for g in grads]
        dtype_names = [_t.dtype_name(g) for g in grads]
        key = (self._plan_token,) + plan_key + (tuple(shapes), tuple(dtype_names))
        return (key, [self._names[i] for i in indices], dtype_names, shapes,
                [g.dtype for g in grads])

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
        if not (self._in_flight or self._bucket or self._ready or any(self._passes)):
            self._phase = int(any(p.grad is not None for p in self._params))
        for i in range(len(self._params)):  # late ones: unused parameters, incomplete groups
            if i not in self._in_flight:
                self._bucket[i] = None
        self._ready.clear()
        try:
            self._flush_bucket()
            self._wait_and_write_back()
        except MismatchError as e:
            if " phase=" not in str(e):
                raise
            raise MismatchError(_OUT_OF_PHASE + str(e)) from None
        finally:
            self._phase = 0
            self._in_flight.clear()
            self._in_place_buckets.clear()
            self._passes = [0] * len(self._params)
        self._synchronized = True

    def _wait_and_write_back(self):
        plain = self._compression is Compression.none
        with overlap.GRADIENTS.waiting():
            for bucket in self._in_place_buckets:  # the averages are already in p.grad
                bucket.wait()
            for i, entry in self._in_flight.items():
                if entry is _IN_PLACE:
                    continue
                if isinstance(entry, _Sparse):
                    self._params[i].grad = entry.handle()
                    continue
                bucket, first, count, ctx = entry
                reduced = bucket.wait()[first:first + count]
                result = reduced[0] if plain else self._compression.decompress(reduced, ctx)
                shared = self._perms.get(i)
                if shared is not None:
                    result = result.permute(shared.inverse)
                grad = self._params[i].grad
                if grad.is_sparse:
                    self._params[i].grad = result.to_sparse()
                elif result.data_ptr() != grad.data_ptr():  # decompressed, or copied on the way
                    grad.copy_(result)

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
        if self._should_synchronize:
            if self._synchronized:
                logger.warning("optimizer.step() after optimizer.synchronize() without "
                               "optimizer.skip_synchronize(): gradients are reduced twice")
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
        if self._in_flight or self._bucket:
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


_INIT_SIGNATURE = inspect.signature(DistributedOptimizer.__init__)
# What help() and inspect show: __init__'s parameters (Horovod's, then
# fuseopt's), not __new__'s (*args, **kwargs).
DistributedOptimizer.__signature__ = _INIT_SIGNATURE.replace(
    parameters=list(_INIT_SIGNATURE.parameters.values())[1:])
