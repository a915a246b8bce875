"""Compression.ef_sign: error-feedback int8 compression, written once over
each binding's TensorKit (fuseopt/training/compression.py), whose kits may run
its two passes in the core's kernels (fuseopt/api/ef_sign.py)."""
import itertools

from ..api.ops import Sum
from ..base.errors import UnsupportedError
from .compression import Compressor, TensorKit, may_decode_in_place, reduction_size


class EFSignCompressor(Compressor):
    """Error-feedback compression into one int8 per element (4x fewer bytes
    than float32) plus one float per tensor.

    Each rank sends q = round(c / a) as int8, where c = g + e is its gradient
    plus its residual and a = max|c| / L its step, with L = 127 // n levels
    for n ranks reduced over (n summed values in [-L, L] fit an int8): the
    sign of every element and, in the bits the sign leaves unused, its
    magnitude. Values and steps are summed; every rank decodes
    mean(a) * sum(q) / n. What the others received from a rank, mean(a) * q,
    differs from c by e = c - mean(a) * q: that residual is added to the
    rank's next gradient of the same name, so nothing is lost for good.

    Why not the sign alone (a = mean|c|, q = +-1; fuseopt < this change):
    it sends every element at the same magnitude, so large elements leave
    over many steps, and with momentum that delay made training diverge
    (digits MLP 64-64-64-10, SGD momentum 0.9: 0.68 accuracy instead of 0.94;
    docs/torch.md has the measurements). Stateful: create one per optimizer.
    """

    kit: TensorKit  # set by each binding's subclass
    reduce_op = Sum

    def __init__(self):
        self.residuals = {}
        self._unnamed = itertools.count()

    def compress(self, tensor, name=None):
        """([int8 values, step], ctx): two payloads."""
        n = reduction_size()
        if n > 127:
            raise UnsupportedError("EFSignCompressor sums int8 values: at most 127 ranks")
        levels = 127 // n
        kit = self.kit
        name = name if name is not None else "unnamed.%d" % next(self._unnamed)
        native = kit.ef_sign_encode(self.residuals, name, tensor, levels)
        if native is not None:
            values, step, kept, own_step = native
            into = tensor if may_decode_in_place() else None
            return [values, step], ("kernels", tensor.dtype, n, name, kept, own_step, into)
        corrected = kit.accumulated(kit.residual(self.residuals, name, tensor), tensor)
        step = kit.abs_max(corrected) / float(levels)
        q = kit.rounded(corrected, step, levels)
        # What this rank's own step would express; decompress books the
        # difference once the step all ranks decode with is known.
        kept = kit.keep_minus(self.residuals, name, corrected, q, step)
        # n travels in ctx so that decompress divides by what was summed; the
        # step as a copy, since payloads may be summed in place (torch's reducer)
        return (kit.after(kept, [kit.cast(q, kit.int8), step]),
                ("primitives", tensor.dtype, n, name, q, kit.copy(step)))

    def state_dict(self):
        """This rank's residuals, as ``errors`` (PowerSGD's name for its own)."""
        return {"errors": {k: self.kit.snapshot(v) for k, v in self.residuals.items()}}

    def load_state_dict(self, state):
        for name, value in state.get("errors", {}).items():
            self.kit.load(self.residuals, name, value)

    def decompress(self, payloads, ctx):
        q_sum, step_sum = payloads
        kit = self.kit
        if ctx[0] == "kernels":
            _, dtype, n, name, kept, step, into = ctx
            return kit.ef_sign_decode(self.residuals, name, q_sum, step_sum, kept, step, n, into)
        _, dtype, n, name, q, step = ctx
        mean_step = step_sum / float(n)
        # The others decode this rank's q with the mean step, not its own:
        # keeping the difference makes the residual exactly what they missed.
        residual = kit.residual(self.residuals, name, q)
        kept = kit.keep_minus(self.residuals, name, residual, q, mean_step - step)
        out = kit.cast(kit.dequantized(q_sum, mean_step / float(n)), dtype)
        return kit.after(kept, [out])[0]
