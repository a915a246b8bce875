"""Gradient compression: the framework-neutral contract.

A compressor turns a gradient into a *payload* that is cheaper to send, and
back. The optimizer wrappers (torch, TensorFlow) call::

    payloads, ctx = compressor.compress(tensor, name)     # a list of tensors
    ...allreduce each payload with compressor.reduce_op (or the optimizer's op)...
    tensor = compressor.decompress(reduced_payloads, ctx)

Stateless compressors (casts to 16-bit floats) only change the dtype.
*Error-feedback* compressors are lossy; each keeps, per tensor name, the part
of the gradient it failed to send (the residual) and adds it to the next
gradient of that name, so that nothing is lost in the long run (Karimireddy
et al., "Error Feedback Fixes SignSGD", 2019).

Writing your own: subclass the framework's ``Compressor`` and implement
``compress``/``decompress``; set ``reduce_op = Sum`` if your payload must be
summed (then divide by the number of ranks in ``decompress`` yourself).
"""


class ResidualMemory:
    """Per-name residuals of an error-feedback compressor (framework-neutral:
    it only stores whatever tensors the framework gives it)."""

    def __init__(self):
        self._residuals = {}

    def add_to(self, name, tensor):
        """tensor + the residual left for this name (or tensor itself)."""
        residual = self._residuals.get(name)
        return tensor if residual is None else tensor + residual

    def get(self, name):
        return self._residuals.get(name)

    def keep(self, name, residual):
        self._residuals[name] = residual

    def clear(self):
        self._residuals.clear()

    def __len__(self):
        return len(self._residuals)


class Compressor:
    """Base class of every compressor: sends the tensor as it is. Payloads are
    lists so one gradient may travel as several tensors (e.g. int8 signs and a
    float scale); ``reduce_op`` None means the optimizer's op."""

    reduce_op = None

    def compress(self, tensor, name=None):
        return [tensor], None

    def decompress(self, payloads, ctx):
        return payloads[0]


class NoneCompressor(Compressor):
    """No compression."""
