"""SyncBatchNorm: batch normalization over the global batch, on CPU too.

In training, per-channel mean and variance come from every rank's samples
(one fused allreduce of [count, sum, sum of squares] per layer), so small
per-rank batches normalize like one large batch. Ranks may hold different
batch sizes, including 1 or 0. Backward needs two more sums over the global
batch (of dy and of dy * x_hat): one more allreduce. The affine parameters'
gradients stay local sums, and DistributedOptimizer averages them like any
other gradient.

torch.nn.SyncBatchNorm only runs on CUDA; this one runs wherever fuseopt does.
"""
from __future__ import annotations

from typing import Any, Optional
import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from .. import world
from . import ops


def _channel_view(t, ndim):
    return t.reshape((1, -1) + (1,) * (ndim - 2))


class _SyncBatchNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum):
        c = x.shape[1]
        reduce_dims = [0] + list(range(2, x.dim()))
        xd = x.detach().double()
        count = x.numel() // c if c else 0
        local = torch.cat([torch.tensor([float(count)], dtype=torch.float64),
                           xd.sum(reduce_dims), (xd * xd).sum(reduce_dims)])
        total = ops.allreduce_async(local, op=ops.Sum, name=None).wait()
        n = total[0].item()
        if n == 0:
            raise ValueError("SyncBatchNorm got an empty batch on every rank")
        mean = total[1:c + 1] / n
        var = (total[c + 1:] / n - mean * mean).clamp_(min=0)
        invstd = torch.rsqrt(var + eps)
        if running_mean is not None:
            unbiased = var * (n / (n - 1)) if n > 1 else var
            running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
            running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
        xhat = (xd - _channel_view(mean, x.dim())) * _channel_view(invstd, x.dim())
        ctx.save_for_backward(xhat, weight, invstd)
        ctx.n = n
        y = xhat
        if weight is not None:
            y = y * _channel_view(weight.double(), x.dim()) + _channel_view(bias.double(), x.dim())
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        xhat, weight, invstd = ctx.saved_tensors
        ndim = xhat.dim()
        reduce_dims = [0] + list(range(2, ndim))
        dyd = dy.double()
        sum_dy = dyd.sum(reduce_dims)
        sum_dy_xhat = (dyd * xhat).sum(reduce_dims)
        total = ops.allreduce_async(torch.cat([sum_dy, sum_dy_xhat]), op=ops.Sum).wait()
        c = sum_dy.numel()
        g_sum_dy, g_sum_dy_xhat = total[:c] / ctx.n, total[c:] / ctx.n
        scale = invstd if weight is None else invstd * weight.double()
        dx = _channel_view(scale, ndim) * (dyd - _channel_view(g_sum_dy, ndim)
                                           - xhat * _channel_view(g_sum_dy_xhat, ndim))
        dw = sum_dy_xhat.to(weight.dtype) if weight is not None and ctx.needs_input_grad[1] \
            else None
        db = sum_dy.to(weight.dtype) if weight is not None and ctx.needs_input_grad[2] else None
        return dx.to(dy.dtype), dw, db, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """Drop-in for ``torch.nn.BatchNorm1d/2d/3d`` that normalizes with
    statistics of the batch across all ranks (see the module docstring).
    Every rank must call it the same number of times, in the same order."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: Optional[float] = 0.1,
                 affine: bool = True, track_running_stats: bool = True,
                 device: Optional[Any] = None, dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats,
                         device=device, dtype=dtype)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got %dD input)" % input.dim())

    def forward(self, input):
        """Batch norm whose training statistics are taken over every rank's
        batch (one allreduce of count, sum and sum of squares per call)."""
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)
        use_batch_stats = self.training or self.running_mean is None
        if not use_batch_stats or world.size() == 1:
            return F.batch_norm(input,
                                self.running_mean if not self.training or self.track_running_stats else None,
                                self.running_var if not self.training or self.track_running_stats else None,
                                self.weight, self.bias, use_batch_stats, factor, self.eps)
        track = self.training and self.track_running_stats
        return _SyncBatchNormFn.apply(input, self.weight, self.bias,
                                      self.running_mean if track else None,
                                      self.running_var if track else None, self.eps, factor)

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
