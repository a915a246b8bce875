"""Gradient compression: the framework-neutral contract.

A compressor turns a gradient into a *payload* that is cheaper to send, and
back. Its interface is Horovod's: ``compress(tensor) -> (payload, ctx)`` and
``decompress(payload, ctx) -> tensor`` (fuseopt adds an optional ``name``).
A compressor may also send several tensors for one (int8 signs and a float
scale): its ``compress`` then returns a list of payloads and its
``decompress`` takes the list. The optimizer wrappers (torch, TensorFlow) call
either kind through one adapter::

    payloads, ctx = compressor.compress_payloads(tensor, name)   # always a list
    ...allreduce each payload with compressor.reduce_op (or the optimizer's op)...
    tensor = compressor.decompress_payloads(reduced_payloads, ctx)

Stateless compressors (casts to 16-bit floats) only change the dtype.
*Error-feedback* compressors are lossy; each keeps, per tensor name, the part
of the gradient it failed to send (the residual) and adds it to the next
gradient of that name, so that nothing is lost in the long run (Karimireddy
et al., "Error Feedback Fixes SignSGD", 2019).

Writing your own: subclass the framework's ``Compressor`` and implement
``compress``/``decompress`` (one payload, or a list); set ``reduce_op = Sum``
if your payload must be
summed (then divide in ``decompress`` by ``reduction_size()`` as it was in
``compress``: the ranks of the process set being reduced over).
A compressor written for Horovod (``compress(tensor) -> (tensor, ctx)``,
``decompress(tensor, ctx)``) works as it is: ``as_compressor`` adapts it.
"""
import abc
import contextlib
import contextvars
import inspect
from typing import Any

from ..core import world
from ..core.requests import WIRE_AS_IS
from ..base.errors import InvalidArgumentError, UnsupportedError

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


# Set by the optimizer wrappers, which overwrite each gradient with its
# reduced value anyway: a compressor may then decode into the gradient it
# compressed (the caller of a plain allreduce keeps its input).
_results_in_place = contextvars.ContextVar("fuseopt_results_in_place", default=False)


@contextlib.contextmanager
def results_in_place():
    token = _results_in_place.set(True)
    try:
        yield
    finally:
        _results_in_place.reset(token)


def may_decode_in_place():
    """Whether the tensor being compressed may receive its own result
    (inside ``results_in_place()``)."""
    return _results_in_place.get()


class Compressor:
    """Base class of every compressor: sends the tensor as it is.
    ``reduce_op`` None means the optimizer's op."""

    reduce_op = None

    def compress(self, tensor, name=None):
        """``(payload, ctx)``: what to reduce in place of ``tensor`` (one
        tensor, or a list of them), and what ``decompress`` needs to undo it.
        ``name``: the gradient's, for compressors that keep state per tensor."""
        return tensor, None

    def decompress(self, payload, ctx):
        """The reduced tensor, from the reduced payload (a list if compress
        gave one) and ``compress``'s ctx."""
        return payload

    def compress_payloads(self, tensor, name=None):
        """``compress`` with the payloads always as a list (what the bindings
        reduce); its ctx tells decompress_payloads which kind it was."""
        payload, ctx = self.compress(tensor, name)
        if isinstance(payload, list):
            return payload, (True, ctx)
        return [payload], (False, ctx)

    def decompress_payloads(self, payloads, ctx):
        """``decompress`` of what compress_payloads gave (reduced)."""
        listed, ctx = ctx
        return self.decompress(payloads if listed else payloads[0], ctx)

    # Compressors that reduce in several rounds (PowerSGD: the second
    # round's payloads are computed from the first's results) set ``rounds``
    # and implement next_payloads; the bindings run the rounds with
    # fuseopt.training.powersgd.finish_rounds.
    rounds = 1

    def next_payloads(self, reduced, ctx):
        """After a round's payloads are reduced: the next round's
        ``(payloads, ctx)``, or None when ``decompress(reduced, ctx)`` gives
        the tensor."""
        return None

    def next_round_payloads(self, payloads, ctx):
        """next_payloads on compress_payloads' lists and contexts."""
        listed, ctx = ctx
        following = self.next_payloads(payloads if listed else payloads[0], ctx)
        if following is None:
            return None
        payloads, ctx = following
        return payloads, (True, ctx)


class HorovodCompressor(Compressor):
    """A compressor written for Horovod that is not a fuseopt Compressor:
    ``compress(tensor)`` and ``decompress(tensor, ctx)``, usually static
    methods of a class that is passed itself (``compression=MyCompressor``)."""

    def __init__(self, inner):
        self.inner = inner

    def compress(self, tensor, name=None):
        return self.inner.compress(tensor)

    def decompress(self, payload, ctx):
        return self.inner.decompress(payload, ctx)


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


def one_payload_each(compression, tensors, names, ranks):
    """Horovod's compression around a collective other than the optimizer's
    allreduce: ``(payloads, contexts, restore)`` with one payload per tensor,
    compressed knowing the ranks reduced over; ``restore(result, context)``
    decompresses. ``compression`` None sends the tensors as they are."""
    if compression is None:
        return list(tensors), [None] * len(tensors), lambda t, ctx: t
    compression = as_compressor(compression)
    if compression.rounds > 1:
        raise UnsupportedError("%s reduces in %d rounds: only allreduce and DistributedOptimizer "
                               "take it" % (type(compression).__name__, compression.rounds))
    with reducing_over(ranks):
        packed = [compression.compress_payloads(t, n) for t, n in zip(tensors, names)]
    if any(len(payloads) != 1 for payloads, _ in packed):
        raise InvalidArgumentError("%s sends several payloads per tensor; only allreduce and "
                                   "DistributedOptimizer take it" % type(compression).__name__)
    return ([payloads[0] for payloads, _ in packed], [ctx for _, ctx in packed],
            lambda t, ctx: compression.decompress_payloads([t], ctx))


def keeps_state(compressor):
    """Whether a compressor keeps state between steps, per gradient name
    (PowerSGD, ef_sign: they have state_dict and load_state_dict)."""
    return hasattr(compressor, "state_dict")


def state_of(compressor):
    """A compressor's state on this rank (its state_dict: PowerSGD's Q, error
    buffers and step counts, ef_sign's residuals), or None if it keeps none."""
    return compressor.state_dict() if keeps_state(compressor) else None


def compression_state_of(optimizer):
    """The compressor state of a fuseopt optimizer wrapper (its
    compression_state()), or None: another optimizer, or a compressor that
    keeps none."""
    return optimizer.compression_state() if hasattr(optimizer, "compression_state") else None


def shared_part(state):
    """What of a compressor's state is the same on every rank: all but this
    rank's own error buffers (PowerSGD's Q and step counts)."""
    return {k: v for k, v in state.items() if k != "errors"}


class NoneCompressor(Compressor):
    """No compression."""


class TensorKit(abc.ABC):
    """What the neutral compressors need from a framework: each binding
    implements these few primitives for its tensors (torch, TensorFlow), and
    the algorithms below are written once. Arithmetic (+, -, *, /) is the
    tensors' own."""

    float32: Any = None  # the framework's dtypes
    int8: Any = None

    @abc.abstractmethod
    def is_floating(self, dtype):
        """Whether ``dtype`` is a floating-point type."""

    @abc.abstractmethod
    def cast(self, tensor, dtype):
        """``tensor`` as ``dtype``."""

    def detached(self, tensor):
        """The tensor without autograd history (residuals must not keep any)."""
        return tensor

    @abc.abstractmethod
    def abs_max(self, tensor):
        """max(|tensor|) as a float32 tensor of shape [1] (0 if it is empty)."""

    @abc.abstractmethod
    def rounded(self, tensor, step, levels):
        """round(tensor / step) clipped to [-levels, levels] (float32; step a
        tensor of shape [1], all zeros where step is 0)."""

    @abc.abstractmethod
    def residual(self, residuals, name, like):
        """The residual kept for ``name`` (zeros shaped like ``like`` the
        first time), stored in the dict ``residuals``."""

    @abc.abstractmethod
    def keep(self, residuals, name, current, value):
        """Stores ``value`` as name's residual; returns what later results
        must wait for (TensorFlow: the variable's assign op)."""

    # The three steps below touch every element; a kit may do them in place
    # (torch: a fresh 33 MB result per step costs as much as the arithmetic).

    def accumulated(self, residual, tensor):
        """``tensor`` as float32, without autograd history, plus ``residual``;
        may add into the residual's memory and return it, since keep_minus
        stores the next residual right after."""
        return self.cast(self.detached(tensor), self.float32) + residual

    def keep_minus(self, residuals, name, base, q, scale):
        """Stores ``base - scale * q`` as name's residual (``base``: what
        ``accumulated`` or ``residual`` returned); returns what keep does."""
        current = self.residual(residuals, name, q)
        return self.keep(residuals, name, current, base - scale * q)

    def dequantized(self, q, scale):
        """``q`` (integers) times ``scale`` (shape [1]), as float32."""
        return self.cast(q, self.float32) * scale

    # A kit may run ef_sign's passes in the core's kernels (fuseopt.api.ef_sign)
    # where they apply: the values and steps sent and the decoded gradient
    # have the primitives' bits (a residual may differ in its last bit).

    def ef_sign_encode(self, residuals, name, tensor, levels):
        """``(values, step, kept, step as a float)``: EFSignCompressor.compress's
        work in one native call (values: int8 payload, step: float32 payload
        of shape [1], kept: a copy of values for decode), or None where the
        kernels do not apply (then the primitives above do it)."""
        return None

    def ef_sign_decode(self, residuals, name, total, step_sum, kept, step, ranks, into):
        """The decoded mean gradient (into ``into`` if given, else fresh) from
        the summed payloads, after correcting name's residual, in one native
        call; for what ef_sign_encode encoded."""
        raise NotImplementedError

    def copy(self, tensor):
        """A copy that an in-place reduction of ``tensor`` leaves alone."""
        return tensor

    def after(self, dependency, tensors):
        """``tensors``, not computed before ``dependency``."""
        return tensors


class CastCompressor(Compressor):
    """Sends floating-point tensors as ``target`` (a 16-bit float): half the
    bytes; the core sums in float, rounding once per pairwise step.

    The optimizers hand float32 host gradients to the core uncompressed with
    ``wire`` instead (see on_wire): the core rounds them on their way into
    its fusion buffer and widens the result on its way out, which gives the
    bits of compress, allreduce and decompress (NaN payloads aside) without
    the two extra passes over every gradient."""

    kit: TensorKit  # set by each binding's subclass
    target: Any = None  # the framework's 16-bit float dtype
    wire = WIRE_AS_IS  # the core's fuseopt_wire_t for target

    def compress(self, tensor, name=None):
        if self.kit.is_floating(tensor.dtype) and tensor.dtype != self.target:
            return self.kit.cast(tensor, self.target), tensor.dtype
        return tensor, None

    def decompress(self, payload, ctx):
        return payload if ctx is None else self.kit.cast(payload, ctx)


def on_wire(compressor):
    """The fuseopt_wire_t that lets the core do ``compressor``'s work on
    float32 host tensors: a CastCompressor's (Compression.fp16, .bf16, and
    subclasses that keep their compress and decompress), else WIRE_AS_IS."""
    cls = type(compressor)
    if isinstance(compressor, CastCompressor) and cls.compress is CastCompressor.compress \
            and cls.decompress is CastCompressor.decompress:
        return compressor.wire
    return WIRE_AS_IS
