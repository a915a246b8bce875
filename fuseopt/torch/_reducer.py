"""The communication half of DistributedOptimizer: buckets of ready
gradients handed to the core in one native call each, and the averaged
results written back into ``p.grad``.

The optimizer decides *when* a gradient is ready (hooks, accumulation,
groups, phase); the reducer decides *how* it travels (in place from a cached
plan, or compressed / permuted through a request batch) and keeps what is in
flight until ``wait_and_write_back``."""
import functools

import torch

from ..training import buckets, naming, optimizer_args
from ..api import overlap
from ..core import requests as _rq
from ..training.compression import on_wire, reducing_over, results_in_place
from ..training.powersgd import finish_rounds, regroup
from . import _tensors as _t
from . import ops, ragged_ops
from .compression import Compression

# In-flight marker of a gradient reduced in place in p.grad (submit_plain);
# its bucket's handle is in in_place_buckets.
_IN_PLACE = object()

_MAX_PLANS = 1024  # per optimizer; see submit_plain


class _Sparse:
    """A sparse gradient in flight: the callable of sparse_allreduce_async."""
    __slots__ = ("handle",)

    def __init__(self, handle):
        self.handle = handle


class GradientReducer:
    """Owns the parameters' wire names and everything in flight for them.
    ``phase`` is stamped on every request (see DistributedOptimizer.synchronize)."""

    def __init__(self, params, local_names, name_map, compression, op, predivide,
                 sparse_as_dense, process_set, set_id, set_size, bucket_cap_mb):
        self.params = params
        self.names = [naming.GRADIENT_PREFIX + n for n in local_names]
        self._perms = {}  # index -> Shared, for parameters stored in another layout
        if name_map is not None:
            for i, shared in enumerate(naming.resolve(name_map, local_names)):
                self.names[i] = naming.GRADIENT_PREFIX + shared.name
                if shared.perm is not None:
                    self._perms[i] = shared
        self.compression = compression
        # Cast to 16 bits by the core on its copies instead (float32 host
        # gradients; WIRE_AS_IS for any other compressor).
        self._wire = on_wire(compression)
        self._op, self._predivide = op, predivide
        self._sparse_as_dense = sparse_as_dense
        self._process_set, self._set_id, self._set_size = process_set, set_id, set_size
        # Bucket sizes from the parameters (a gradient has its parameter's
        # size), not read from tensors in every hook.
        self._nbytes = [p.numel() * p.element_size() for p in params]
        self._plans = {}  # (indices, op, scales, phase, wire) -> submit_plain's request fields
        self._plan_token = object()  # this optimizer's part of the request-cache key
        self._in_place_buckets = []  # handles whose results land in p.grad itself
        # index -> (bucket handle, first, count, compression ctx), _IN_PLACE or _Sparse
        self.in_flight = {}
        # Ready gradients not yet submitted.
        self.bucket = buckets.OpenBucket(buckets.cap_bytes(bucket_cap_mb))
        self.phase = 0

    def add_param(self, p, name):
        self.params.append(p)
        self.names.append(name)
        self._nbytes.append(p.numel() * p.element_size())

    def busy(self, i):
        return i in self.in_flight or i in self.bucket

    def ready(self, i):
        """Adds gradient ``i`` to the open bucket; submits it once full."""
        closed = self.bucket.add(i, self._nbytes[i])
        if closed:
            self.submit(closed)

    def flush(self):
        indices = self.bucket.take()
        if indices:
            self.submit(indices)

    def submit(self, indices):
        """Starts the allreduces of these parameters in one native call."""
        op = self.compression.reduce_op if self.compression.reduce_op is not None else self._op
        scales = optimizer_args.scales(op, self._predivide)
        # In place from a plan: uncompressed, or cast by the core (_wire).
        wire = self._wire
        if (wire or self.compression is Compression.none) and not self._perms:
            grads = [self.params[i].grad for i in indices]
            if all(g is not None and g.is_cpu and not g.is_sparse and g.is_contiguous()
                   and (not wire or g.dtype is torch.float32) for g in grads):
                return self._submit_plain(indices, grads, op, scales, wire)
        batch = _rq.Batch()
        started = []
        for i in indices:
            payloads, ctx = self._payloads(i)
            self._add(batch, payloads, [self.names[i]] + ["%s.%d" % (self.names[i], k)
                                                          for k in range(1, len(payloads))],
                      op, scales)
            if payloads:
                started.append((i, len(payloads), ctx))
        if not started:  # sparse gradients only
            return
        # One handle per bucket: waiting on each gradient separately costs a
        # native call each (~0.6 ms per step for 200 small gradients).
        bucket = batch.submit_group()
        first = 0
        for i, count, ctx in started:
            self.in_flight[i] = (bucket, first, count, ctx)
            first += count

    def _add(self, batch, payloads, names, op, scales):
        """Adds the allreduces of these payloads, under these names, to batch."""
        for payload, name in zip(payloads, names):
            args, kwargs = ops.allreduce_op(payload.contiguous(), name, op, scales[0], scales[1],
                                            True, self._process_set)
            batch.add(*args, phase=self.phase, **kwargs)

    def _payloads(self, i):
        """What gradient ``i`` sends, and the compression context to decode
        it; no payloads when it travels on its own (sparse, allgathered:
        uncompressed, so with the optimizer's op, not a compressor's Sum)."""
        p = self.params[i]
        grad = p.grad
        if grad is None:  # unused on this rank: take part with zeros
            grad = p.grad = torch.zeros_like(p)
        if grad.is_sparse and not self._sparse_as_dense:
            self.in_flight[i] = _Sparse(ragged_ops.sparse_allreduce_async(
                grad, self.names[i], self._op, self._process_set))
            return (), None
        if grad.is_sparse:  # reduced dense, written back sparse
            grad = grad.to_dense()
        shared = self._perms.get(i)
        if shared is not None:  # travels in the shared layout (a copy, made contiguous later)
            grad = grad.permute(shared.perm)
        if self.compression is Compression.none:
            return (grad,), None
        with reducing_over(self._set_size), results_in_place():
            return self.compression.compress_payloads(grad, self.names[i])

    def _submit_plain(self, indices, grads, op, scales, wire):
        """The common case (host gradients in place, no compression but the
        core's casts, no shared layout) from a plan made once per bucket: a
        step checks each gradient's shape and dtype against it and passes
        one pointer each."""
        plan_key = (tuple(indices), op, scales, self.phase, wire)
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
                                  keepalive=grads, key=key, phase=self.phase,
                                  process_set=self._set_id, wire=wire)
        self._in_place_buckets.append(bucket)
        for i in indices:
            self.in_flight[i] = _IN_PLACE

    def _plan(self, plan_key, indices, grads):
        """(request-cache key, names, dtype names, shapes, torch dtypes)."""
        shapes = [tuple(g.shape) for g in grads]
        dtype_names = [_t.dtype_name(g) for g in grads]
        key = (self._plan_token,) + plan_key + (tuple(shapes), tuple(dtype_names))
        return (key, [self.names[i] for i in indices], dtype_names, shapes,
                [g.dtype for g in grads])

    def wait_and_write_back(self):
        """Waits for everything in flight and leaves the results in ``p.grad``."""
        with overlap.GRADIENTS.waiting():
            for bucket in self._in_place_buckets:  # the averages are already in p.grad
                bucket.wait()
            compressed = []  # (index, round-1 reduced payloads, ctx)
            for i, entry in self.in_flight.items():
                if isinstance(entry, _Sparse):
                    self.params[i].grad = entry.handle()
                elif entry is not _IN_PLACE:
                    bucket, first, count, ctx = entry
                    compressed.append((i, bucket.wait()[first:first + count], ctx))
            if not compressed:
                return
            if self.compression is Compression.none:
                results = [reduced[0] for _, reduced, _ in compressed]
            else:  # PowerSGD's second round, one fused batch for every gradient
                results = finish_rounds(self.compression,
                                        [(reduced, ctx) for _, reduced, ctx in compressed],
                                        functools.partial(self._reduce_round,
                                                          [i for i, _, _ in compressed]))
            for (i, _, _), result in zip(compressed, results):
                self._write_back(i, result)

    def _reduce_round(self, indices, positions, payload_lists, round_):
        """One further round of a multi-round compressor: every payload in one
        batch (fused by the core), named after its gradient and the round."""
        op = self.compression.reduce_op
        scales = optimizer_args.scales(op, self._predivide)
        batch = _rq.Batch()
        for position, payloads in zip(positions, payload_lists):
            name = self.names[indices[position]]
            self._add(batch, payloads, ["%s.round%d.%d" % (name, round_, k)
                                        for k in range(len(payloads))], op, scales)
        return regroup(batch.submit_group().wait(), payload_lists)

    def _write_back(self, i, result):
        shared = self._perms.get(i)
        if shared is not None:
            result = result.permute(shared.inverse)
        grad = self.params[i].grad
        if grad.is_sparse:
            self.params[i].grad = result.to_sparse()
        elif result.data_ptr() != grad.data_ptr():  # decompressed, or copied on the way
            grad.copy_(result)

    def clear(self):
        """Forgets what was in flight (after a wait, or a failed one)."""
        self.phase = 0
        self.in_flight.clear()
        self._in_place_buckets.clear()
