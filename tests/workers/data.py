"""Deterministic per-rank test data, so every rank can compute what every
other rank contributed and hence the exact expected result of a collective."""
import zlib

import ml_dtypes
import numpy as np

DTYPES = [np.uint8, np.int8, np.int32, np.int64, np.float16, ml_dtypes.bfloat16,
          np.float32, np.float64]


def _seed(*parts):
    return zlib.crc32(repr(parts).encode())


def values(name, rank, shape, dtype, op="sum"):
    """Small integers (exact in every dtype, even bfloat16 sums over 4 ranks),
    in 1..2 for products so they cannot overflow int8."""
    rng = np.random.default_rng(_seed(name, rank))
    dtype = np.dtype(dtype)
    if op == "product":
        raw = rng.integers(1, 3, size=shape)
    elif dtype.kind == "u":
        raw = rng.integers(0, 30, size=shape)
    else:
        raw = rng.integers(-30, 30, size=shape)
    return np.asarray(raw).astype(dtype)


# How two values of each reduction op combine (an average: summed, then divided).
COMBINE = {"sum": np.add, "average": np.add, "min": np.minimum, "max": np.maximum,
           "product": np.multiply}


def reduce_expected(arrays, op):
    """The reduction in float64 (exact for our small integers), cast back."""
    dtype = arrays[0].dtype
    combine = COMBINE.get(op)
    if combine is None:
        raise ValueError(op)
    out = arrays[0].astype(np.float64)  # one accumulator, not a float64 copy of each array
    for a in arrays[1:]:
        combine(out, a, out=out, casting="unsafe")
    if op == "average":
        out /= len(arrays)
        if dtype.kind in "iu":
            out = np.trunc(out)
    return out.astype(dtype)


def assert_close(actual, expected, what):
    assert actual.shape == expected.shape, "%s: shape %s != %s" % (what, actual.shape,
                                                                 expected.shape)
    assert actual.dtype == expected.dtype, "%s: dtype %s != %s" % (what, actual.dtype,
                                                                 expected.dtype)
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    tol = {2: 1e-2}.get(actual.dtype.itemsize, 1e-6) if actual.dtype.kind == "f" or \
        actual.dtype.name == "bfloat16" else 0
    if not np.allclose(a, e, rtol=tol, atol=tol):
        bad = np.argwhere(~np.isclose(a, e, rtol=tol, atol=tol))[:5]
        raise AssertionError("%s: mismatch at %s: got %s expected %s"
                             % (what, bad.tolist(), a[tuple(bad.T)], e[tuple(bad.T)]))
