"""PowerSGD: low-rank gradient compression in two rounds of allreduce
(Vogels, Karimireddy and Jaggi, "PowerSGD: Practical Low-Rank Gradient
Compression for Distributed Optimization", NeurIPS 2019), written once for
every binding over its TensorKit.

Each gradient of two or more dimensions is viewed as a matrix M (rows: its
first dimension) of ``rows x cols`` and sent as two thin factors:

    round 1   P = M Q              (rows x r)  summed over ranks
              P^ = orthonormal basis of sum(P)   (the same on every rank)
    round 2   Q_i = M^T P^         (cols x r)  summed, divided by n
    result    P^ Q^T               the mean gradient's projection on P^

``r * (rows + cols)`` floats travel instead of ``rows * cols``. With error
feedback each rank adds to its next gradient what it failed to send this
time, ``M - P^ Q_i^T`` (the paper's local memory; its sum over ranks is what
torch DDP's ``powerSGD_hook`` keeps). With warm start Q is the previous
step's mean Q (shared by every rank, since it is an allreduce result); the
first Q, and every Q without warm start, is drawn from a generator seeded by
the gradient's name, the seed and the step, so every rank draws the same.

As DDP's hook: the first ``start_iter`` reductions of each gradient are plain
allreduces (error feedback is poor while gradients change fast), vectors and
matrices that the factors would not shrink by ``min_compression_rate`` always
are. Which tensors are compressed is decided from shapes alone, so it is the
same on every rank.

The step count and the branch between a plain and a compressed reduction are
tensors where the framework traces graphs (TensorFlow), so a traced training
step keeps one structure: round 1 always sends one flat float32 payload per
compressed gradient (M itself while warming up), round 2 always one (empty
while warming up). Eager bindings (torch) skip the empty round.
"""
import zlib

import numpy as np

from .compression import Compressor, TensorKit, may_decode_in_place, reduction_size
from ..api.ops import Sum
from ..base.errors import InvalidArgumentError


def matrix_shape(shape):
    """(rows, cols) a gradient of ``shape`` is viewed as, or None (vectors, scalars)."""
    shape = [int(d) for d in shape]
    if len(shape) < 2:
        return None
    return shape[0], int(np.prod(shape[1:]))


class MatrixKit(TensorKit):
    """What PowerSGD needs from a framework besides TensorKit. Matrices are
    float32; ``store`` arguments are the compressor's dicts of per-name
    state, which a binding keeps as its framework needs (TensorFlow:
    variables, so that a traced step updates them)."""

    def known(self, flag):
        """``flag`` as a Python bool when it is known now (eager), else None."""
        return None

    def cond(self, flag, if_true, if_false):
        """``if_true()`` or ``if_false()`` by ``flag`` (a traced branch where
        graphs are traced; both return the same structure)."""
        raise NotImplementedError

    def less(self, a, b):
        raise NotImplementedError

    def count(self, store, name):
        """The number of earlier calls for ``name`` (an integer or a scalar
        tensor); counts this one."""
        raise NotImplementedError

    def load_count(self, store, name, value):
        raise NotImplementedError

    def state(self, store, name, initial):
        """name's persistent float32 state, made from ``initial()`` (a NumPy
        array) the first time."""
        raise NotImplementedError

    def assign(self, store, name, value):
        raise NotImplementedError

    def load(self, store, name, value):
        """Sets (or creates) name's state to ``value`` (a snapshot, or a NumPy array)."""
        raise NotImplementedError

    def snapshot(self, value):
        """A copy of state for a state_dict (what torch.save and pickle take)."""
        raise NotImplementedError

    def constant_for_step(self, make, step):
        """The float32 array ``make(step)`` as a tensor (step may be a tensor)."""
        raise NotImplementedError

    def as_matrix(self, tensor, rows, cols):
        """``tensor`` as a float32 (rows, cols) matrix without autograd history."""
        raise NotImplementedError

    def flat(self, tensor):
        raise NotImplementedError

    def reshape(self, tensor, shape):
        raise NotImplementedError

    def zeros(self, shape):
        raise NotImplementedError

    def add_into(self, state, tensor):
        """state += tensor; returns the sum (may be the state itself)."""
        raise NotImplementedError

    def sub_mm_into(self, state, a, b):
        """state -= a b^T."""
        raise NotImplementedError

    def mm(self, a, b):
        raise NotImplementedError

    def mm_t(self, a, b):
        """a^T b."""
        raise NotImplementedError

    def mm_bt(self, a, b, out=None):
        """a b^T (into ``out``, a matrix from ``destination``, if given)."""
        raise NotImplementedError

    def destination(self, tensor, rows, cols):
        """``tensor``'s own memory as a float32 (rows, cols) matrix the
        decoded gradient can be written into, or None (then it is a new
        tensor, which the optimizer copies into the gradient)."""
        return None

    def orthonormal(self, matrix):
        """An orthonormal basis of the columns of ``matrix`` (reduced QR's Q:
        defined for rank-deficient and zero matrices too)."""
        raise NotImplementedError


class PowerSGDCompressor(Compressor):
    """PowerSGD gradient compression (see the module docstring). Stateful:
    create one per optimizer.

    Args:
        rank: the factors' width r (1-4 typical; DDP's matrix_approximation_rank).
        start_iter: reductions of each gradient sent plain before compressing
            (DDP's start_powerSGD_iter; about 10% of training is its advice).
        error_feedback: add to each gradient what this rank did not send of
            the previous one.
        warm_start: start each step's power iteration from the previous mean Q.
        min_compression_rate: compress a matrix only when the factors are at
            least this many times smaller than it.
        seed: of the random initial Q (every rank must pass the same).
    """

    kit: MatrixKit  # each binding's subclass sets its kit
    reduce_op = Sum
    rounds = 2

    def __init__(self, rank=1, start_iter=10, error_feedback=True, warm_start=True,
                 min_compression_rate=2.0, seed=0):
        if int(rank) != rank or rank < 1:
            raise InvalidArgumentError("PowerSGD rank must be a positive integer, not %r" % (rank,))
        if int(start_iter) != start_iter or start_iter < 0:
            raise InvalidArgumentError("PowerSGD start_iter must be an integer >= 0, not %r"
                                       % (start_iter,))
        if not min_compression_rate > 0:
            raise InvalidArgumentError("PowerSGD min_compression_rate must be > 0, not %r"
                                       % (min_compression_rate,))
        self.rank, self.start_iter = int(rank), int(start_iter)
        self.error_feedback, self.warm_start = bool(error_feedback), bool(warm_start)
        self.min_compression_rate, self.seed = float(min_compression_rate), int(seed)
        self.errors = {}  # name -> float32 (rows, cols): what this rank has not sent yet
        self.qs = {}  # name -> float32 (cols, r): the last mean Q, the same on every rank
        self.steps = {}  # name -> reductions of this gradient so far

    def get_config(self):
        """The constructor's arguments (a Keras optimizer's config saves them)."""
        return {"rank": self.rank, "start_iter": self.start_iter,
                "error_feedback": self.error_feedback, "warm_start": self.warm_start,
                "min_compression_rate": self.min_compression_rate, "seed": self.seed}

    def __repr__(self):
        return ("PowerSGDCompressor(rank=%d, start_iter=%d, error_feedback=%s, warm_start=%s)"
                % (self.rank, self.start_iter, self.error_feedback, self.warm_start))

    def factor_rank(self, shape):
        """The r used for a gradient of ``shape``, or 0 if it is sent plain."""
        dims = matrix_shape(shape)
        if dims is None:
            return 0
        rows, cols = dims
        r = min(self.rank, rows, cols)
        return r if (rows + cols) * r * self.min_compression_rate < rows * cols else 0

    def initial_q(self, name, cols, r, step=0):
        """Q drawn the same on every rank (and by every binding): NumPy's
        generator seeded by the seed, the name and the step."""
        key = [self.seed, zlib.crc32(name.encode()), int(step)]
        return np.random.default_rng(key).standard_normal((cols, r)).astype(np.float32)

    # -- the rounds --------------------------------------------------------------
    def compress(self, tensor, name=None):
        kit, n = self.kit, reduction_size()
        r = self.factor_rank(tensor.shape) if kit.is_floating(tensor.dtype) else 0
        if r == 0:  # summed as it is, divided in decompress
            return [tensor], ("plain", tensor.dtype, n)
        if name is None:
            raise InvalidArgumentError("PowerSGD keeps state per gradient, so every tensor it "
                                       "compresses needs a name")
        rows, cols = matrix_shape(tensor.shape)
        step = kit.count(self.steps, name)
        warming = kit.less(step, self.start_iter)
        q = kit.state(self.qs, name, lambda: self.initial_q(name, cols, r))
        error = (kit.state(self.errors, name, lambda: np.zeros((rows, cols), np.float32))
                 if self.error_feedback else None)
        matrix = kit.as_matrix(tensor, rows, cols)

        def plain():
            return kit.flat(matrix), matrix

        def compressed():
            m = kit.add_into(error, matrix) if error is not None else matrix
            start = q if self.warm_start else kit.constant_for_step(
                lambda s: self.initial_q(name, cols, r, s), step)
            return kit.flat(kit.mm(m, start)), m

        payload, m = kit.cond(warming, plain, compressed)
        # The optimizers overwrite the gradient with the result anyway: decoding
        # into it spares a fresh 16 MB matrix and a copy per 2048x2048 weight.
        into = kit.destination(tensor, rows, cols) if may_decode_in_place() else None
        return [payload], ("matrix", tensor.dtype, tuple(tensor.shape), n, name, r, warming, m,
                           into)

    def next_payloads(self, reduced, ctx):
        if ctx[0] != "matrix":  # sent plain, or round 2 is back
            return None
        _, dtype, shape, n, name, r, warming, m, into = ctx
        kit = self.kit
        if kit.known(warming) is True:  # eager and plain: round 1 carried M itself
            return None
        rows = int(m.shape[0])

        def plain():
            return kit.zeros((0,)), kit.zeros((rows, r)), reduced[0]

        def compressed():
            p = kit.orthonormal(kit.reshape(reduced[0], (rows, r)))
            q_mine = kit.mm_t(m, p)  # M^T P^
            if self.error_feedback:
                kit.sub_mm_into(self.errors[name], p, q_mine)  # E = M - P^ Q_i^T
            return kit.flat(q_mine), p, reduced[0]

        payload, p, first = kit.cond(warming, plain, compressed)
        return [payload], ("second", dtype, shape, n, name, r, warming, p, first, into)

    def decompress(self, payloads, ctx):
        kit = self.kit
        if ctx[0] == "plain":
            _, dtype, n = ctx
            return kit.cast(payloads[0] / float(n), dtype)
        if ctx[0] == "matrix":  # eager and warming: round 1 carried M itself
            _, dtype, shape, n = ctx[:4]
            return kit.cast(kit.reshape(payloads[0] / float(n), shape), dtype)
        _, dtype, shape, n, name, r, warming, p, first, into = ctx
        rows = int(np.prod(shape[:1]))
        cols = int(np.prod(shape[1:]))

        def plain():
            return kit.reshape(first / float(n), (rows, cols))

        def compressed():
            q_mean = kit.reshape(payloads[0] / float(n), (cols, r))
            if self.warm_start:
                kit.assign(self.qs, name, q_mean)
            return kit.mm_bt(p, q_mean, into)

        return kit.cast(kit.reshape(kit.cond(warming, plain, compressed), shape), dtype)

    # -- state -------------------------------------------------------------------
    def state_dict(self):
        """This rank's state: ``errors`` are its own (what it has not sent);
        ``qs`` and ``steps`` are the same on every rank."""
        kit = self.kit
        return {"errors": {k: kit.snapshot(v) for k, v in self.errors.items()},
                "qs": {k: kit.snapshot(v) for k, v in self.qs.items()},
                "steps": {k: int(np.asarray(v)) for k, v in self.steps.items()}}

    def load_state_dict(self, state):
        """Restores what state_dict gave; names it lacks keep their state (a
        rank given no errors starts from zero)."""
        for field, store in (("errors", self.errors), ("qs", self.qs)):
            for name, value in state.get(field, {}).items():
                self.kit.load(store, name, value)
        for name, value in state.get("steps", {}).items():
            self.kit.load_count(self.steps, name, int(value))


def regroup(flat, payload_lists):
    """``flat`` (a grouped reduction's results, in order) split back into one
    list per tensor, as long as each of ``payload_lists``."""
    out, first = [], 0
    for payloads in payload_lists:
        out.append(flat[first:first + len(payloads)])
        first += len(payloads)
    return out


def finish_rounds(compression, reduced, reduce):
    """The tensors of a reduction once round 1 is back: ``reduced`` lists
    (round-1 reduced payloads, ctx) per tensor as ``compress_payloads`` gave
    the ctx; ``reduce(positions, payload_lists, round)`` reduces the
    payloads of one further round together (one fused collective) and returns
    them in order (``positions``: the tensors' places in ``reduced``).
    Returns each tensor decompressed, in order."""
    out = [None] * len(reduced)
    pending = list(enumerate(reduced))
    round_ = 1
    while pending:
        later = []
        for j, (payloads, ctx) in pending:
            following = compression.next_round_payloads(payloads, ctx)
            if following is None:
                out[j] = compression.decompress_payloads(payloads, ctx)
            else:
                later.append((j, following))
        if not later:
            break
        results = reduce([j for j, _ in later], [payloads for _, (payloads, _) in later], round_)
        pending = [(j, (result, ctx)) for (j, (_, ctx)), result in zip(later, results)]
        round_ += 1
    return out
