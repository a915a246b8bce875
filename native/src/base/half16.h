// 16-bit floats (IEEE float16 and bfloat16) on the host: conversion, and the
// bulk element-wise work the core does on them (one pairwise reduction step,
// scaling). Every kernel widens each element to float, computes in float and
// rounds once to nearest even, so a reduction rounds once per pairwise step
// whichever path runs it.
//
// Two implementations give the same bits (native/tests/dtype_test.cc checks
// them against each other on random data with subnormals, infinities and
// NaNs): a scalar one, and on x86-64 one with F16C + AVX2 chosen at run time
// by CPUID. The scalar conversions follow the hardware's NaN rules (a NaN is
// quieted, its top payload bits kept) so that the two agree on NaNs too.
// AVX512-BF16's VCVTNEPS2BF16 is not used: it flushes subnormal inputs to
// zero, which the scalar rounding does not.
#pragma once

#include <cstdint>

#include "fuseopt/fuseopt.h"

namespace fuseopt {

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bfloat_to_float(uint16_t b);
uint16_t float_to_bfloat(float f);

enum class Kernels16 { kScalar, kAvx2 };

// The fastest implementation this CPU runs (decided once per process).
Kernels16 best_kernels16();
const char* kernels16_name(Kernels16 k);

// inout[i] = round(widen(in[i]) op widen(inout[i])): one step of an MPI
// reduction. dtype is FLOAT16 or BFLOAT16; AVERAGE combines as SUM (the
// division happens once, at the end).
void combine16(fuseopt_dtype_t dtype, fuseopt_reduce_op_t op, const uint16_t* in,
               uint16_t* inout, int64_t n, Kernels16 k = best_kernels16());

// dst[i] = round(widen(src[i]) * factor); src may equal dst.
void scale16(fuseopt_dtype_t dtype, const uint16_t* src, uint16_t* dst, int64_t n, float factor,
             Kernels16 k = best_kernels16());

// Compression on the way into and out of a fusion buffer (a float32 tensor
// that travels as `dtype`, FLOAT16 or BFLOAT16). The same bits as casting
// first and scaling the 16-bit values with scale16 afterwards:
//   narrow16: dst[i] = round(round(src[i]) * factor)   (one rounding if factor is 1)
//   widen16:  dst[i] = widen(round(widen(src[i]) * factor))
void narrow16(fuseopt_dtype_t dtype, const float* src, uint16_t* dst, int64_t n, float factor,
              Kernels16 k = best_kernels16());
void widen16(fuseopt_dtype_t dtype, const uint16_t* src, float* dst, int64_t n, float factor,
             Kernels16 k = best_kernels16());

}  // namespace fuseopt
