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
import itertools
from typing import Any

from . import world
from .ops import Sum
from .errors import InvalidArgumentError, UnsupportedError

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


class Compressor:
    """Base class of every compressor: sends the tensor as it is. Payloads are
    lists so one gradient may travel as several tensors (e.g. int8 signs and a
    float scale); ``reduce_op`` None means the optimizer's op."""

    reduce_op = None

    def compress(self, tensor, name=None):
        """``(payloads, ctx)``: the tensors to reduce in place of ``tensor``
        (``name``: the gradient's, for compressors that keep state per tensor),
        and what ``decompress`` needs to undo it."""
        return [tensor], None

    def decompress(self, payloads, ctx):
        """The reduced tensor, from the reduced ``payloads`` and ``compress``'s ctx."""
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


class TensorKit:
    """What the neutral compressors need from a framework: each binding
    implements these few primitives for its tensors (torch, TensorFlow), and
    the algorithms below are written once. Arithmetic (+, -, *, /) is the
    tensors' own."""

    float32: Any = None  # the framework's dtypes
    int8: Any = None

    def is_floating(self, dtype):
        raise NotImplementedError

    def cast(self, tensor, dtype):
        raise NotImplementedError

    def detached(self, tensor):
        """The tensor without autograd history (residuals must not keep any)."""
        return tensor

    def abs_mean(self, tensor):
        """mean(|tensor|) as a float32 tensor of shape [1]."""
        raise NotImplementedError

    def plus_minus_one(self, tensor):
        """+1 where tensor >= 0, else -1 (float32)."""
        raise NotImplementedError

    def residual(self, residuals, name, like):
        """The residual kept for ``name`` (zeros shaped like ``like`` the
        first time), stored in the dict ``residuals``."""
        raise NotImplementedError

    def keep(self, residuals, name, current, value):
        """Stores ``value`` as name's residual; returns what later results
        must wait for (TensorFlow: the variable's assign op)."""
        raise NotImplementedError

    def after(self, dependency, tensors):
        """``tensors``, not computed before ``dependency``."""
        return tensors


class CastCompressor(Compressor):
    """Sends floating-point tensors as ``target`` (a 16-bit float): half the
    bytes; the core sums in float, rounding once per pairwise step."""

    kit: TensorKit  # set by each binding's subclass
    target: Any = None  # the framework's 16-bit float dtype

    def compress(self, tensor, name=None):
        if self.kit.is_floating(tensor.dtype) and tensor.dtype != self.target:
            return [self.kit.cast(tensor, self.target)], tensor.dtype
        return [tensor], None

    def decompress(self, payloads, ctx):
        return payloads[0] if ctx is None else self.kit.cast(payloads[0], ctx)


class EFSignCompressor(Compressor):
    """Scaled sign with error feedback: one int8 per element (4x fewer bytes
    than float32) plus one float per tensor.

    Each rank sends s = sign(g + e) as int8 and its scale a = mean|g + e|.
    Signs are summed (exact up to 127 ranks), scales summed, and every rank
    decodes mean(a) * sum(s) / size. What its own message did not express,
    e = (g + e) - a * s, is added to its next gradient of the same name, so
    the error does not accumulate. Stateful: create one per optimizer.
    """

    kit: TensorKit  # set by each binding's subclass
    reduce_op = Sum

    def __init__(self):
        self.residuals = {}
        self._unnamed = itertools.count()

    def compress(self, tensor, name=None):
        n = reduction_size()
        if n > 127:
            raise UnsupportedError("EFSignCompressor sums int8 signs: at most 127 ranks")
        kit = self.kit
        name = name if name is not None else "unnamed.%d" % next(self._unnamed)
        residual = kit.residual(self.residuals, name, tensor)
        corrected = kit.cast(kit.detached(tensor), kit.float32) + residual
        scale = kit.abs_mean(corrected)
        sign = kit.plus_minus_one(corrected)
        kept = kit.keep(self.residuals, name, residual, corrected - scale * sign)
        # n travels in ctx so that decompress divides by what was summed
        return kit.after(kept, [kit.cast(sign, kit.int8), scale]), (tensor.dtype, n)

    def decompress(self, payloads, ctx):
        sign_sum, scale_sum = payloads
        dtype, n = ctx
        n = float(n)
        return self.kit.cast(self.kit.cast(sign_sum, self.kit.float32) * (scale_sum / n) / n,
                             dtype)
