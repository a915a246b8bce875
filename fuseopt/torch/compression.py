"""Gradient compressors for the PyTorch binding: the algorithms of
fuseopt.training.compression (which also says how to write your own) on torch tensors."""
import torch

from ..api import ef_sign as _ef_sign
from ..base.errors import InvalidArgumentError
from ..training import compression as _neutral
from ..training import ef_sign as _ef_sign_neutral
from ..training import powersgd as _powersgd
from ..core import requests as _rq
from ..training.compression import Compressor, NoneCompressor  # noqa: F401 (the binding's names)


class _TorchKit(_powersgd.MatrixKit):
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

    def ef_sign_encode(self, residuals, name, tensor, levels):
        # The core's kernels take host float32 in one piece; anything else
        # (CUDA, 16-bit gradients, strided views) takes the primitives' path.
        if tensor.device.type != "cpu" or tensor.dtype != torch.float32 \
                or not tensor.is_contiguous():
            return None
        residual = self.residual(residuals, name, tensor)
        if residual.shape != tensor.shape or not residual.is_contiguous():
            raise InvalidArgumentError("ef_sign: the residual kept for %r has shape %s, the "
                                       "gradient %s" % (name, tuple(residual.shape),
                                                        tuple(tensor.shape)))
        values = torch.empty(tensor.shape, dtype=torch.int8)
        kept = torch.empty_like(values)
        step = _ef_sign.encode(tensor.data_ptr(), residual.data_ptr(), values.data_ptr(),
                               kept.data_ptr(), tensor.numel(), levels, torch.get_num_threads())
        return values, torch.tensor([step], dtype=torch.float32), kept, step

    def ef_sign_decode(self, residuals, name, total, step_sum, kept, step, ranks, into):
        out = into if into is not None else torch.empty(kept.shape, dtype=torch.float32)
        total = total.contiguous()
        if total.dtype != torch.int8 or total.numel() != kept.numel():
            raise InvalidArgumentError("ef_sign: %r came back as %s of %d elements, not the int8 "
                                       "values of %d" % (name, total.dtype, total.numel(),
                                                         kept.numel()))
        _ef_sign.decode(total.data_ptr(), kept.data_ptr(), residuals[name].data_ptr(),
                        out.data_ptr(), kept.numel(), float(step_sum), step, ranks,
                        torch.get_num_threads())
        return out

    # -- PowerSGD's (eager: Python ints and bools, state kept as tensors) --------
    def known(self, flag):
        return bool(flag)

    def cond(self, flag, if_true, if_false):
        return if_true() if flag else if_false()

    def less(self, a, b):
        return a < b

    def count(self, store, name):
        done = store.get(name, 0)
        store[name] = done + 1
        return done

    def load_count(self, store, name, value):
        store[name] = value

    def state(self, store, name, initial):
        if name not in store:
            store[name] = torch.from_numpy(initial())
        return store[name]

    def assign(self, store, name, value):
        store[name] = value

    def load(self, store, name, value):
        store[name] = torch.as_tensor(value, dtype=torch.float32).clone()

    def snapshot(self, value):
        return value.detach().clone()

    def constant_for_step(self, make, step):
        return torch.from_numpy(make(step))

    def as_matrix(self, tensor, rows, cols):
        return tensor.detach().reshape(rows, cols).to(torch.float32)

    def flat(self, tensor):
        return tensor.reshape(-1)

    def reshape(self, tensor, shape):
        return tensor.reshape(shape)

    def zeros(self, shape):
        return torch.zeros(shape, dtype=torch.float32)

    def add_into(self, state, tensor):
        return state.add_(tensor)

    def sub_mm_into(self, state, a, b):
        state.addmm_(a, b.t(), alpha=-1)

    def mm(self, a, b):
        return torch.mm(a, b)

    def mm_t(self, a, b):
        return torch.mm(a.t(), b)

    def mm_bt(self, a, b, out=None):
        return torch.mm(a, b.t(), out=out)

    def destination(self, tensor, rows, cols):
        if tensor.dtype != torch.float32 or not tensor.is_contiguous():
            return None
        return tensor.detach().view(rows, cols)

    def orthonormal(self, matrix):
        return torch.linalg.qr(matrix, mode="reduced").Q


_TORCH = _TorchKit()


class FP16Compressor(_neutral.CastCompressor):
    """Half the bytes: sends float16 (the core sums in float, rounding once
    per pairwise step)."""
    kit, target, wire = _TORCH, torch.float16, _rq.WIRE_FLOAT16


class BF16Compressor(_neutral.CastCompressor):
    """Half the bytes: sends bfloat16 (float32's range, 8 bits of mantissa)."""
    kit, target, wire = _TORCH, torch.bfloat16, _rq.WIRE_BFLOAT16


class EFSignCompressor(_ef_sign_neutral.EFSignCompressor):
    __doc__ = _ef_sign_neutral.EFSignCompressor.__doc__
    kit = _TORCH


class PowerSGDCompressor(_powersgd.PowerSGDCompressor):
    __doc__ = _powersgd.PowerSGDCompressor.__doc__
    kit = _TORCH


class Compression:
    """Horovod's names ``Compression.none`` and ``Compression.fp16``, plus
    ``Compression.bf16``, ``Compression.ef_sign()`` and
    ``Compression.powersgd(rank=...)`` (stateful: create one per optimizer)."""

    none = NoneCompressor()
    fp16 = FP16Compressor()
    bf16 = BF16Compressor()
    ef_sign = EFSignCompressor
    powersgd = PowerSGDCompressor
