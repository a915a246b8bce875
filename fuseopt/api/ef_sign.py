"""Compression.ef_sign's passes over a host float32 gradient through the
core's kernels (native/src/kernels/ef_sign.cc): one call before the
allreduce (quantize, with error feedback) and one after it (decode, and
correct the residual). The bindings pass addresses; the algorithm is
fuseopt.training.ef_sign.EFSignCompressor, whose values, steps and decoded
gradient the kernels give bit for bit (a residual may differ in its last bit).
"""
from __future__ import annotations

import threading

from ..base._native import ffi, lib
from ..base.errors import check

# One argument struct per thread (gradient hooks may run on several).
_structs = threading.local()


def _args(kind: str):
    struct = getattr(_structs, kind, None)
    if struct is None:
        struct = ffi.new("fuseopt_ef_sign_%s_t*" % kind)
        struct.struct_size = ffi.sizeof("fuseopt_ef_sign_%s_t" % kind)
        setattr(_structs, kind, struct)
    return struct


def encode(gradient: int, residual: int, values: int, kept: int, count: int, levels: int,
           threads: int = 1) -> float:
    """residual += gradient; values = kept = its int8 quantization at
    max|residual| / levels per step; residual -= what they express.
    Returns the step (float32's value)."""
    a = _args("encode")
    a.count, a.levels, a.threads = count, levels, threads
    a.gradient = ffi.cast("const float*", gradient)
    a.residual = ffi.cast("float*", residual)
    a.values = ffi.cast("int8_t*", values)
    a.kept = ffi.cast("int8_t*", kept)
    check(lib.fuseopt_ef_sign_encode(a))
    return a.step


def decode(total: int, kept: int, residual: int, out: int, count: int, step_sum: float,
           step: float, ranks: int, threads: int = 1) -> None:
    """out = the mean gradient from the summed values and steps; the
    residual corrected for the mean step the others decoded this rank with."""
    a = _args("decode")
    a.count, a.ranks, a.threads = count, ranks, threads
    a.step_sum, a.step = step_sum, step
    a.sum = ffi.cast("const int8_t*", total)
    a.kept = ffi.cast("const int8_t*", kept)
    a.residual = ffi.cast("float*", residual)
    a.out = ffi.cast("float*", out)
    check(lib.fuseopt_ef_sign_decode(a))
