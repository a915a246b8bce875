"""Gradient buckets: how many bytes of ready gradients a framework binding
hands to the core per call while backward still runs.

Small buckets start communication early (more overlap with backward); each
call costs a little, so they should not be tiny. Shared by the PyTorch and
TensorFlow optimizers (``bucket_cap_mb=``, ``FUSEOPT_BUCKET_CAP_MB``)."""
import os

from .errors import InvalidArgumentError

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


def split(sizes, cap):
    """Consecutive runs of ``sizes`` (bytes, in the order gradients become
    ready), each closed once it holds ``cap`` bytes; lists of indices."""
    buckets, current, held = [], [], 0
    for i, n in enumerate(sizes):
        current.append(i)
        held += n
        if held >= cap:
            buckets.append(current)
            current, held = [], 0
    if current:
        buckets.append(current)
    return buckets
