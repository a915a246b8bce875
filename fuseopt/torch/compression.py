"""Gradient compressors for the PyTorch binding (see fuseopt.compression for
the contract and how to write your own)."""
import itertools

import torch

from ..compression import Compressor, NoneCompressor, ResidualMemory, reduction_size
from ..errors import UnsupportedError
from ..ops import Sum


class _CastCompressor(Compressor):
    target = None

    def compress(self, tensor, name=None):
        if tensor.dtype.is_floating_point and tensor.dtype != self.target:
            return [tensor.to(self.target)], tensor.dtype
        return [tensor], None

    def decompress(self, payloads, ctx):
        return payloads[0] if ctx is None else payloads[0].to(ctx)


class FP16Compressor(_CastCompressor):
    """Half the bytes: sends float16 (the core sums in float, rounding once
    per pairwise step)."""
    target = torch.float16


class BF16Compressor(_CastCompressor):
    """Half the bytes: sends bfloat16 (float32's range, 8 bits of mantissa)."""
    target = torch.bfloat16


class EFSignCompressor(Compressor):
    """Scaled sign with error feedback: one int8 per element (4x fewer bytes
    than float32) plus one float per tensor.

    Each rank sends s = sign(g + e) as int8 and its scale a = mean|g + e|.
    Signs are summed (exact up to 127 ranks), scales summed, and every rank
    decodes mean(a) * sum(s) / size. What its own message did not express,
    e = (g + e) - a * s, is added to its next gradient of the same name, so
    the error does not accumulate. Converges on smooth problems, more slowly
    than uncompressed SGD; tests/workers/torch_train.py measures it on digits.
    """

    reduce_op = Sum

    def __init__(self):
        self.memory = ResidualMemory()
        self._unnamed = itertools.count()

    def compress(self, tensor, name=None):
        n = reduction_size()
        if n > 127:
            raise UnsupportedError("EFSignCompressor sums int8 signs: at most 127 ranks")
        name = name if name is not None else "unnamed.%d" % next(self._unnamed)
        corrected = self.memory.add_to(name, tensor.detach().float())
        scale = corrected.abs().mean().reshape(1)
        sign = torch.where(corrected >= 0, 1, -1).to(torch.int8)
        self.memory.keep(name, corrected - scale * sign)
        # n travels in ctx so that decompress divides by what was summed
        return [sign, scale], (tensor.dtype, n)

    def decompress(self, payloads, ctx):
        sign_sum, scale_sum = payloads
        dtype, n = ctx
        return (sign_sum.float() * (scale_sum / n) / n).to(dtype)


class Compression:
    """Horovod's names ``Compression.none`` and ``Compression.fp16``, plus
    ``Compression.bf16`` and ``Compression.ef_sign()`` (stateful: create one
    per optimizer)."""

    none = NoneCompressor()
    fp16 = FP16Compressor()
    bf16 = BF16Compressor()
    ef_sign = EFSignCompressor
