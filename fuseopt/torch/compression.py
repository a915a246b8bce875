"""Gradient compressors for the PyTorch binding: the algorithms of
fuseopt.training.compression (which also says how to write your own) on torch tensors."""
import torch

from ..training import compression as _neutral
from ..core import requests as _rq
from ..training.compression import Compressor, NoneCompressor  # noqa: F401 (the binding's names)


class _TorchKit(_neutral.TensorKit):
    float32, int8 = torch.float32, torch.int8

    def is_floating(self, dtype):
        return dtype.is_floating_point

    def cast(self, tensor, dtype):
        return tensor.to(dtype)

    def detached(self, tensor):
        return tensor.detach()

    def abs_max(self, tensor):
        if tensor.numel() == 0:  # max() of nothing raises
            return torch.zeros(1, dtype=torch.float32, device=tensor.device)
        # aminmax: one pass without a temporary, about 15x faster here than
        # abs().max() or an inf-norm on 8.4M elements
        low, high = torch.aminmax(tensor)
        return torch.maximum(high, -low).reshape(1)

    def rounded(self, tensor, step, levels):
        # Dividing by inf where step is 0 gives the zeros an all-zero tensor needs.
        q = torch.div(tensor, torch.where(step > 0, step, float("inf")))
        return q.round_().clamp_(-levels, levels)

    def copy(self, tensor):
        return tensor.clone()

    def residual(self, residuals, name, like):
        if name not in residuals:
            residuals[name] = torch.zeros(like.shape, dtype=torch.float32, device=like.device)
        return residuals[name]

    def keep(self, residuals, name, current, value):
        residuals[name] = value

    def accumulated(self, residual, tensor):
        return residual.add_(tensor.detach())

    def keep_minus(self, residuals, name, base, q, scale):
        # base is the stored residual itself (accumulated adds into it)
        base.addcmul_(q, scale, value=-1)

    def dequantized(self, q, scale):
        # to() then mul_: int8 * float32 directly takes a slow promoting loop
        return q.to(torch.float32).mul_(scale)


_TORCH = _TorchKit()


class FP16Compressor(_neutral.CastCompressor):
    """Half the bytes: sends float16 (the core sums in float, rounding once
    per pairwise step)."""
    kit, target, wire = _TORCH, torch.float16, _rq.WIRE_FLOAT16


class BF16Compressor(_neutral.CastCompressor):
    """Half the bytes: sends bfloat16 (float32's range, 8 bits of mantissa)."""
    kit, target, wire = _TORCH, torch.bfloat16, _rq.WIRE_BFLOAT16


class EFSignCompressor(_neutral.EFSignCompressor):
    __doc__ = _neutral.EFSignCompressor.__doc__
    kit = _TORCH


class Compression:
    """Horovod's names ``Compression.none`` and ``Compression.fp16``, plus
    ``Compression.bf16`` and ``Compression.ef_sign()`` (stateful: create one
    per optimizer)."""

    none = NoneCompressor()
    fp16 = FP16Compressor()
    bf16 = BF16Compressor()
    ef_sign = EFSignCompressor
