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
summed (then divide in ``decompress`` by ``reduction_size()`` as it was in
``compress``: the ranks of the process set being reduced over).
A compressor written for Horovod (``compress(tensor) -> (tensor, ctx)``,
``decompress(tensor, ctx)``) works as it is: ``as_compressor`` adapts it.
"""
import contextlib
import contextvars
import inspect

from . import world
from .errors import InvalidArgumentError

# The number of ranks the payloads being compressed are reduced over. The
# compressor contract has no process set, so the collectives set this around
# compress(): a compressor that sums (EFSign) must average over the set's
# members, not over size().
_reducing_ranks = contextvars.ContextVar("fuseopt_reducing_ranks", default=None)


def reduction_size():
    """Ranks in the reduction being compressed: the process set's size inside
    ``allreduce(..., process_set=)`` and ``DistributedOptimizer(process_set=)``,
    else size(). For compressors with ``reduce_op = Sum``; read it in
    ``compress`` and carry it to ``decompress`` in ``ctx``."""
    n = _reducing_ranks.get()
    return world.size() if n is None else n


@contextlib.contextmanager
def reducing_over(nranks):
    token = _reducing_ranks.set(nranks)
    try:
        yield
    finally:
        _reducing_ranks.reset(token)


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


class HorovodCompressor(Compressor):
    """A compressor written for Horovod: ``compress(tensor) -> (tensor, ctx)``
    and ``decompress(tensor, ctx) -> tensor``, usually static methods of a
    class that is passed itself (``compression=MyCompressor``)."""

    def __init__(self, inner):
        self.inner = inner

    def compress(self, tensor, name=None):
        payload, ctx = self.inner.compress(tensor)
        return [payload], ctx

    def decompress(self, payloads, ctx):
        return self.inner.decompress(payloads[0], ctx)


def _takes_a_name(compress):
    """Whether compress accepts (tensor, name): fuseopt's interface."""
    try:
        inspect.signature(compress).bind(None, None)
        return True
    except TypeError:
        return False


def as_compressor(compression):
    """fuseopt's compressor for a ``compression=`` argument: fuseopt's own as
    they are, and Horovod-style ones (see HorovodCompressor) adapted, so
    that a Horovod script's custom compressor runs unchanged."""
    if isinstance(compression, Compressor) and _takes_a_name(compression.compress):
        return compression
    if not (hasattr(compression, "compress") and hasattr(compression, "decompress")):
        raise InvalidArgumentError("compression must be a Compressor (e.g. Compression.fp16) "
                                   "or have compress and decompress methods, not %r"
                                   % (compression,))
    if isinstance(compression, type) and issubclass(compression, Compressor) \
            and _takes_a_name(compression().compress):
        return compression()
    return HorovodCompressor(compression)


class NoneCompressor(Compressor):
    """No compression."""
