// What the vectorized kernels share (channel_rows.cc, pair_sum.cc): GCC
// vector types of 8 lanes, unaligned loads and stores of them, and the
// attributes that compile a kernel once per instruction set. The lanes are the
// same in every clone and nothing is contracted into FMAs (the core builds
// with -ffp-contract=off), so every clone gives the same bits.
#pragma once

#include <cstring>
#include <type_traits>

// Compiled for AVX-512, AVX2 and baseline x86-64; picked at load time by CPUID.
// native/tests/clones_test.cc defines it empty and builds once per -m flag, to
// compare the instruction sets' results on one CPU.
#ifndef FUSEOPT_CLONES
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FUSEOPT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define FUSEOPT_CLONES
#endif
#endif
// Helpers that take or return vectors: inlined into each clone, they use its
// instructions (called, they would be compiled for the baseline).
#define FUSEOPT_INLINE inline __attribute__((always_inline))

namespace fuseopt {
namespace kernels {

typedef float v8f __attribute__((vector_size(32)));
typedef double v4d __attribute__((vector_size(32)));

// Eight doubles, held as two 4-lane halves. A 64-byte GCC vector is one
// register on AVX-512, but without AVX-512 GCC 12 moves it through the stack
// element by element: the statistics pass of SyncBatchNorm (8x16x32x32, float
// widened to double) took 233-269 us with it on an AVX2-only CPU, 24-25 us as
// halves (standalone build; the normalization pass over the same elements:
// 25-36 us). The halves are the same lanes, added and multiplied in the same
// order: the bits are the same.
struct v8d {
  v4d lo, hi;
};
FUSEOPT_INLINE v8d operator+(v8d a, v8d b) { return {a.lo + b.lo, a.hi + b.hi}; }
FUSEOPT_INLINE v8d operator*(v8d a, v8d b) { return {a.lo * b.lo, a.hi * b.hi}; }
FUSEOPT_INLINE v8d operator+(v8d a, double b) { return {a.lo + b, a.hi + b}; }
FUSEOPT_INLINE v8d operator*(v8d a, double b) { return {a.lo * b, a.hi * b}; }
FUSEOPT_INLINE v8d& operator+=(v8d& a, v8d b) { return a = a + b; }
FUSEOPT_INLINE double lane(v8d v, int k) { return k < 4 ? v.lo[k] : v.hi[k - 4]; }

// Float lanes to double and back, lane by lane: GCC 12 turns this form into
// one vcvtps2pd/vcvtpd2ps per half, where __builtin_convertvector of a 4-lane
// vector converts two lanes at a time and passes the others through the stack.
FUSEOPT_INLINE v8d widen(v8f f) {
  return {v4d{f[0], f[1], f[2], f[3]}, v4d{f[4], f[5], f[6], f[7]}};
}
FUSEOPT_INLINE v8f narrow(v8d d) {
  return v8f{static_cast<float>(d.lo[0]), static_cast<float>(d.lo[1]),
             static_cast<float>(d.lo[2]), static_cast<float>(d.lo[3]),
             static_cast<float>(d.hi[0]), static_cast<float>(d.hi[1]),
             static_cast<float>(d.hi[2]), static_cast<float>(d.hi[3])};
}

// A v8d half by half, like its arithmetic: a 64-byte memcpy goes through the
// stack without AVX-512.
template <class V, class T>
FUSEOPT_INLINE V load(const T* p) {
  V v;
  if constexpr (std::is_same<V, v8d>::value) {
    v.lo = load<v4d>(p);
    v.hi = load<v4d>(p + 4);
  } else {
    std::memcpy(&v, p, sizeof v);
  }
  return v;
}
template <class V, class T>
FUSEOPT_INLINE void store(T* p, V v) {
  if constexpr (std::is_same<V, v8d>::value) {
    store(p, v.lo);
    store(p + 4, v.hi);
  } else {
    std::memcpy(p, &v, sizeof v);
  }
}

}  // namespace kernels
}  // namespace fuseopt
