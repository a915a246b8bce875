"""Gradient buckets: how many bytes of ready gradients a framework binding
hands to the core per call while backward still runs.

Small buckets start communication early (more overlap with backward); each
call costs a little, so they should not be tiny. Shared by the PyTorch and
TensorFlow optimizers (``bucket_cap_mb=``, ``FUSEOPT_BUCKET_CAP_MB``), as are
Horovod's explicit gradient groups (``groups=``, ``num_groups=``): gradients
of one group are handed over together, as one fused unit."""
import os

from ..base.errors import InvalidArgumentError

DEFAULT_BUCKET_CAP_MB = 4.0


def cap_bytes(bucket_cap_mb=None):
    """Bytes per bucket from an argument or FUSEOPT_BUCKET_CAP_MB (MiB, or
    'inf' for one bucket holding everything)."""
    if bucket_cap_mb is None:
        bucket_cap_mb = os.environ.get("FUSEOPT_BUCKET_CAP_MB", DEFAULT_BUCKET_CAP_MB)
    if isinstance(bucket_cap_mb, str):
        if bucket_cap_mb.strip().lower() in ("inf", "none", "off"):
            return float("inf")
        try:
            bucket_cap_mb = float(bucket_cap_mb)
        except ValueError:
            raise InvalidArgumentError("FUSEOPT_BUCKET_CAP_MB=%r is not a number or 'inf'"
                                       % bucket_cap_mb) from None
    if not bucket_cap_mb >= 0:
        raise InvalidArgumentError("bucket_cap_mb must be >= 0, not %r" % (bucket_cap_mb,))
    return bucket_cap_mb * 2 ** 20


class OpenBucket:
    """The bucket being filled: gradient indices in the order they became
    ready, closed once it holds ``cap`` bytes. The one rule for handing
    gradients to the core, used as they arrive (the PyTorch reducer) and on
    a whole list (split, for TensorFlow). The core then fuses what it gets
    by its own rule: at most the fusion threshold per collective
    (native/src/policy/fusion_planner.h)."""

    def __init__(self, cap):
        self.cap = cap
        self._indices = {}  # an ordered set
        self._held = 0

    def add(self, index, nbytes):
        """Adds a ready gradient; returns the closed bucket's indices if this
        filled it (the bucket is then empty again), else None."""
        self._indices[index] = None
        self._held += nbytes
        return self.take() if self._held >= self.cap else None

    def hold(self, index):
        """Adds an index the caller flushes with the rest at once (take)."""
        self._indices[index] = None

    def take(self):
        """The indices held so far (perhaps none); the bucket is empty after."""
        out = list(self._indices)
        self._indices.clear()
        self._held = 0
        return out

    def __contains__(self, index):
        return index in self._indices

    def __bool__(self):
        return bool(self._indices)


def split(sizes, cap):
    """Consecutive runs of ``sizes`` (bytes, in the order gradients become
    ready), each closed once it holds ``cap`` bytes; lists of indices."""
    bucket, out = OpenBucket(cap), []
    for i, n in enumerate(sizes):
        closed = bucket.add(i, n)
        if closed:
            out.append(closed)
    rest = bucket.take()
    return out + [rest] if rest else out


def check_groups(num_groups=0, groups=None):
    """Validates Horovod's ``groups=`` / ``num_groups=`` (before the
    variables are known); returns them as (num_groups, list of lists or None).

    ``groups`` is a positive int (that many near-equal runs in order, the
    first ``n % k`` one longer, as Horovod's split_list) or a list of lists
    of parameters; ``num_groups`` is Horovod's older spelling of the int."""
    if groups is not None and not isinstance(groups, bool) and isinstance(groups, int):
        if groups <= 0:
            raise InvalidArgumentError("groups should be a positive integer or a list of "
                                       "lists of parameters, not %d" % groups)
        return groups, None
    if groups is not None:
        if not isinstance(groups, (list, tuple)) or \
                not all(isinstance(g, (list, tuple)) for g in groups):
            raise InvalidArgumentError("groups should be a positive integer or a list of lists "
                                       "of parameters, not %r" % (groups,))
        return 0, groups
    if not isinstance(num_groups, int) or isinstance(num_groups, bool) or num_groups < 0:
        raise InvalidArgumentError("num_groups should be a non-negative integer, not %r"
                                   % (num_groups,))
    return num_groups, None


def group_of(items, num_groups=0, groups=None):
    """Horovod's explicit groups (see check_groups), as the group index of
    each of ``items`` (the optimizer's parameters or variables, in order;
    None: in no group, bucketed as usual). Items are matched by identity
    (TensorFlow variables are not hashable)."""
    num_groups, groups = check_groups(num_groups, groups)
    n = len(items)
    if groups is not None:
        index_of = {id(x): i for i, x in enumerate(items)}
        out = [None] * n
        for k, group in enumerate(groups):
            for x in group:
                i = index_of.get(id(x))
                if i is None:
                    raise InvalidArgumentError(
                        "groups: %s is not one of the optimizer's parameters"
                        % getattr(x, "path", getattr(x, "name", type(x).__name__)))
                out[i] = k
        return out
    if not num_groups:
        return [None] * n
    per, extra = divmod(n, num_groups)
    return [k for k in range(num_groups) for _ in range(per + (1 if k < extra else 0))]
