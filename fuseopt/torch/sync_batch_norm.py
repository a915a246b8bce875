"""SyncBatchNorm: batch normalization over the global batch, on CPU too.

In training, per-channel mean and variance come from every rank's samples, so
small per-rank batches normalize like one large batch. Ranks may hold
different batch sizes, including 1 or 0. Backward needs two more sums over the
global batch (of dy and of dy * x_hat). The affine parameters' gradients stay
local sums, and DistributedOptimizer averages them like any other gradient.

On host memory each pass is one native call (fuseopt.api.batch_norm): the
core's kernel computes the per-channel sums, reduces them through an agreed
reduction (one MPI collective on this thread, Note [Agreed reductions]) and
normalizes, in any layout (contiguous or channels_last), float32, float64 and
16-bit floats. Device tensors (CUDA, NPU) take the path of torch operations
and a negotiated allreduce below (_DeviceSyncBatchNormFn).

torch.nn.SyncBatchNorm only runs on CUDA; this one runs wherever fuseopt does.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple
import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from ..api import ops as _np
from ..api.batch_norm import FLOAT_CODES, BatchNormKernel, channel_view, sync_kernel
from ..core import process_sets as _ps
from ..core import world
from . import ops

_CODES = {getattr(torch, name): code for name, code in FLOAT_CODES.items()}


def _channel_view(t, ndim):
    return t.reshape((1, -1) + (1,) * (ndim - 2))


def _host(t):
    """A small per-channel tensor as a float64 NumPy array."""
    return t.detach().cpu().double().numpy()


def _like(values, x):
    """Per-channel values (NumPy) as a tensor of x's dtype and device, shaped to
    broadcast against x."""
    return _channel_view(torch.from_numpy(values).to(device=x.device, dtype=x.dtype), x.dim())


def _device_allreduce_sum(values):
    # Named by size, not left unnamed: an unnamed op gets a new name per call
    # ("allreduce.noname.<n>"), which the core negotiates in full every time
    # and which churns its response cache; a stable name is a cache hit after
    # the first step. Layers of one size share it safely, one after another:
    # each waits for its sums before the next layer can submit.
    return _np.allreduce_(values, name="sync_batch_norm.%d" % values.size, op=_np.Sum)


def _update_running(buffer, value, momentum):
    """buffer <- (1 - momentum) * buffer + momentum * value, in place."""
    if buffer.device.type == "cpu" and buffer.dtype in (torch.float32, torch.float64):
        held = buffer.numpy()
        held *= 1 - momentum
        held += (momentum * value).astype(held.dtype)
    else:
        buffer.lerp_(torch.from_numpy(value).to(buffer), momentum)


class _DeviceSyncBatchNormFn(torch.autograd.Function):
    """For device tensors. Normalizes with the global batch's statistics in the
    input's dtype with torch's own kernels: two reductions and one inference-mode batch_norm pass
    forward, torch's batch-norm backward reduction and two fused multiply-adds
    backward. The per-channel arithmetic (2C+1 numbers) is float64 NumPy, where
    the cross-rank sums need the precision and a small array costs a
    microsecond per operation instead of a framework dispatch. One allreduce
    forward, one backward."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, allreduce):
        c = x.shape[1]
        count = x.numel() // c if c else 0
        local = np.zeros(1 + 2 * c)
        if count:
            # Sums accumulated in float64 without a float64 copy of the
            # activation (x * x is rounded once per element, in x's dtype);
            # torch's var_mean over dims (0, 2, ...) is several times slower.
            dims = [0] + list(range(2, x.dim()))
            local[0] = count
            local[1:c + 1] = _host(x.detach().sum(dims, dtype=torch.float64))
            local[c + 1:] = _host(x.detach().square().sum(dims, dtype=torch.float64))
        total = allreduce(local)
        n = float(total[0])
        if n == 0:
            raise ValueError("SyncBatchNorm got an empty batch on every rank")
        mean = total[1:c + 1] / n
        var = np.maximum(total[c + 1:] / n - mean * mean, 0.0)
        if running_mean is not None:
            _update_running(running_mean, mean, momentum)
            _update_running(running_var, var * (n / (n - 1)) if n > 1 else var, momentum)
        # 16-bit inputs are normalized in float32 (torch's kernel wants one dtype).
        work = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
        xw = x.to(work)
        stats = torch.from_numpy(np.stack([mean, var])).to(device=x.device, dtype=work)
        # Inference-mode batch norm with the global statistics: one fused pass.
        y = F.batch_norm(xw, stats[0], stats[1], None if weight is None else weight.to(work),
                         None if bias is None else bias.to(work), False, 0.0, eps).to(x.dtype)
        invstd = 1.0 / np.sqrt(var + eps)
        ctx.save_for_backward(xw, weight)
        ctx.stats = (n, mean, invstd, stats[0], stats[1].add(eps).rsqrt_())
        ctx.allreduce = allreduce
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors  # x in the working dtype (float32 for 16-bit inputs)
        n, mean, invstd, mean_x, invstd_x = ctx.stats
        c = x.shape[1]
        out_dtype = dy.dtype
        dy = dy.to(x.dtype).contiguous()
        if x.numel():
            # sum(dy) and sum(dy * x_hat) per channel, x_hat with the global
            # statistics: torch's batch-norm backward computes exactly these
            # as the bias and weight gradients (whatever weight it is given).
            _, sum_dy_xhat, sum_dy = torch.ops.aten.native_batch_norm_backward(
                dy, x, torch.ones_like(mean_x), None, None, mean_x, invstd_x, True, 0.0,
                [False, True, True])
            local = np.concatenate([_host(sum_dy), _host(sum_dy_xhat)])
        else:
            sum_dy = sum_dy_xhat = torch.zeros(c, dtype=x.dtype, device=x.device)
            local = np.zeros(2 * c)
        total = ctx.allreduce(local)
        g_dy, g_dy_xhat = total[:c] / n, total[c:] / n
        # dx = k * (dy - g_dy - x_hat * g_dy_xhat), x_hat = (x - mean) * invstd,
        # rearranged per channel to dy * k - x * a - b: two fused passes.
        k = invstd if weight is None else invstd * _host(weight)
        a = k * invstd * g_dy_xhat
        b = k * (g_dy - mean * invstd * g_dy_xhat)
        dx = torch.addcmul(_like(-b, x), x, _like(-a, x)).addcmul_(dy, _like(k, x)).to(out_dtype)
        dw = sum_dy_xhat.to(weight.dtype) if weight is not None and ctx.needs_input_grad[1] \
            else None
        db = sum_dy.to(weight.dtype) if weight is not None and ctx.needs_input_grad[2] else None
        return dx, dw, db, None, None, None, None, None


_reducer_kernels: Dict[Any, BatchNormKernel] = {}  # _stats_reducer -> its kernel

# (shape, strides) -> channel view: computing one costs more than the kernel
# at the demo's sizes.
_views: Dict[Tuple[Any, Tuple[int, ...]], Any] = {}


def _described(t):
    """t (or a contiguous copy) with its channel view."""
    if t.is_contiguous():  # the common case, without hashing a shape
        n, c = t.shape[0], t.shape[1]
        inner = t.numel() // (n * c) if n * c else math.prod(t.shape[2:])
        return t, (n, c, inner, c * inner, inner, 1)
    key = (t.shape, t.stride())
    view = _views.get(key)
    if view is None:
        view = channel_view(t.shape, t.stride(), 1)
        if view is None:
            t = t.contiguous()
            return _described(t)
        if len(_views) > 1024:
            _views.clear()
        _views[key] = view
    return t, view


class _SyncBatchNormFn(torch.autograd.Function):
    """Host tensors: one native call forward, one backward. The arguments
    other than x and the affine parameters come in one tuple,
    (running_mean, running_var, eps, momentum, kernel): each argument of
    apply costs autograd a check, and this layer runs at sizes where those
    microseconds are a fifth of its time."""

    @staticmethod
    def forward(ctx, x, weight, bias, rest):
        running_mean, running_var, eps, momentum, kernel = rest
        x, view = _described(x)
        y = torch.empty_like(x)  # keeps x's strides, so the same view
        code = _CODES[x.dtype]
        if weight is None:
            param_code, w, b = 0, 0, 0
        else:
            param_code, w, b = _CODES[weight.dtype], weight.data_ptr(), bias.data_ptr()
        if running_mean is None:
            run_code, rm, rv = 0, 0, 0
        else:
            run_code, rm, rv = _CODES[running_mean.dtype], running_mean.data_ptr(), running_var.data_ptr()
        threads = torch.get_num_threads()
        stats = kernel.forward(x.data_ptr(), y.data_ptr(), code, view, eps, w, b, param_code,
                               rm, rv, run_code, momentum, threads)
        ctx.save_for_backward(x, weight)
        ctx.state = (kernel, view, code, param_code, stats, threads)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors
        kernel, view, code, param_code, stats, threads = ctx.state
        if dy.dtype != x.dtype or dy.stride() != x.stride():
            dy = torch.empty_like(x).copy_(dy)
        dx = torch.empty_like(x)
        if weight is None:
            kernel.backward(x.data_ptr(), dy.data_ptr(), dx.data_ptr(), code, view, stats,
                            threads=threads)
            return dx, None, None, None
        dw, db = torch.empty_like(weight), torch.empty_like(weight)
        kernel.backward(x.data_ptr(), dy.data_ptr(), dx.data_ptr(), code, view, stats,
                        weight.data_ptr(), param_code, dw.data_ptr(), db.data_ptr(), threads)
        return dx, dw, db, None


_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", None)
_functorch_wrapped = getattr(getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor",
                             None)


def _direct_apply(fn):
    """fn.apply without torch.autograd.Function.apply's Python prologue (it
    binds default arguments, checks for functorch transforms and unwraps
    dead functorch wrappers): about 15 us a call, against BatchNorm's 185 us
    forward and backward at the demo's sizes
    (benchmarks/results/syncbn-python-overhead.md). Returns None where this
    torch has no such entry, or not the functorch checks that tell when
    fn.apply is still needed."""
    entry = vars(getattr(torch._C, "_FunctionBase", object)).get("apply")
    if entry is None or _functorch_active is None or _functorch_wrapped is None:
        return None
    return entry.__get__(None, fn)


_host_apply = _direct_apply(_SyncBatchNormFn)


class SyncBatchNorm(_BatchNorm):
    """Drop-in for ``torch.nn.BatchNorm1d/2d/3d`` that normalizes with
    statistics of the batch across all ranks (see the module docstring).
    Every rank must call it the same number of times, in the same order."""

    # How the per-channel sums are summed over the ranks on host memory: None
    # for the agreed reductions inside the native call; a function summing a
    # float64 NumPy array in place puts the calls in halves around it
    # (benchmarks/syncbn.py's raw-MPI floor).
    _stats_reducer = None
    _ranks = staticmethod(world.size)

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: Optional[float] = 0.1,
                 affine: bool = True, track_running_stats: bool = True,
                 device: Optional[Any] = None, dtype: Optional[torch.dtype] = None,
                 process_set: Optional[Any] = None) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats,
                         device=device, dtype=dtype)
        #: the ranks whose batches are normalized together (default: all)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got %dD input)" % input.dim())

    def forward(self, input):
        """Batch norm whose training statistics are taken over every rank's
        batch (one allreduce of count, sum and sum of squares per call)."""
        self._check_input_dim(input)
        # Buffers read from their dict once: nn.Module's attribute lookup of
        # each costs a fraction of a microsecond, and this runs per layer per step.
        buffers, params = self._buffers, self._parameters
        running_mean, running_var = buffers["running_mean"], buffers["running_var"]
        weight, bias = params["weight"], params["bias"]
        training, momentum = self.training, self.momentum
        factor = 0.0 if momentum is None else momentum
        tracked = buffers.get("num_batches_tracked")
        if training and self.track_running_stats and tracked is not None:
            tracked.add_(1)
            if momentum is None:  # cumulative moving average
                factor = 1.0 / float(tracked)
        use_batch_stats = training or running_mean is None
        ranks = self._ranks() if self.process_set is None else _ps.size_of(self.process_set)
        if not use_batch_stats or ranks == 1:
            keep = not training or self.track_running_stats
            return F.batch_norm(input, running_mean if keep else None,
                                running_var if keep else None, weight, bias, use_batch_stats,
                                factor, self.eps)
        if not (training and self.track_running_stats):
            running_mean = running_var = None
        if not input.is_cpu or input.dtype not in _CODES:
            return _DeviceSyncBatchNormFn.apply(input, weight, bias, running_mean,
                                                running_var, self.eps, factor,
                                                _device_allreduce_sum)
        rest = (running_mean, running_var, self.eps, factor, self._host_kernel(input.shape[1]))
        if _host_apply is None or _functorch_active() or _functorch_wrapped(input):
            return _SyncBatchNormFn.apply(input, weight, bias, rest)
        return _host_apply(input, weight, bias, rest)

    def _host_kernel(self, channels: int) -> BatchNormKernel:
        """The native calls of one pass: the layer's agreed reductions, or
        halves around _stats_reducer when a subclass sets one."""
        if self._stats_reducer is None:
            return sync_kernel(channels, self.process_set)
        kernel = _reducer_kernels.get(self._stats_reducer)
        if kernel is None:
            kernel = _reducer_kernels[self._stats_reducer] = BatchNormKernel(
                reducer=self._stats_reducer)
        return kernel

    @classmethod
    def convert_sync_batchnorm(cls, module):
        """Returns module with every BatchNorm*d replaced by SyncBatchNorm
        (parameters and running statistics carried over)."""
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            out = cls(module.num_features, module.eps, module.momentum, module.affine,
                      module.track_running_stats)
            if module.affine:
                with torch.no_grad():
                    out.weight = module.weight
                    out.bias = module.bias
            out.running_mean = module.running_mean
            out.running_var = module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.train(module.training)
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child))
        return out


def recompute_bn_stats(model: Any, batches: Any, num_batches: Optional[int] = None) -> int:
    """Precise BatchNorm: replaces running statistics by their average over
    ``num_batches`` batches from ``batches`` (an iterable of model inputs),
    across all ranks. Every rank must pass the same number of batches.

    Training uses an exponential moving average of per-batch statistics, which
    lags behind the weights; recomputing them on fixed weights before
    evaluation usually helps, most of all with small batches. Returns the
    number of batches used."""
    layers = [m for m in model.modules() if isinstance(m, _BatchNorm) and m.track_running_stats]
    saved = [(m, m.momentum) for m in layers]
    was_training = model.training
    for m in layers:
        m.reset_running_stats()
        m.momentum = None  # cumulative average over the batches below
    model.train()
    seen = 0
    with torch.no_grad():
        for batch in batches:
            if num_batches is not None and seen >= num_batches:
                break
            model(batch)
            seen += 1
    # SyncBatchNorm statistics are global already; plain BatchNorm ones are
    # per rank, so average them.
    pending = []
    for i, m in enumerate(layers):
        # track_running_stats (the filter above) means both buffers exist
        assert m.running_mean is not None and m.running_var is not None
        if not isinstance(m, SyncBatchNorm):
            pending.append(ops.allreduce_async_(m.running_mean, name="precise_bn.mean.%d" % i))
            pending.append(ops.allreduce_async_(m.running_var, name="precise_bn.var.%d" % i))
    for h in pending:
        h.wait()
    for m, momentum in saved:
        m.momentum = momentum
    model.train(was_training)
    return seen
