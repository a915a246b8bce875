// What the vectorized kernels share (channel_rows.cc, pair_sum.cc): GCC
// vector types of 8 lanes, unaligned loads and stores of them, and the
// attributes that compile a kernel once per instruction set. The lanes are the
// same in every clone and nothing is contracted into FMAs (the core builds
// with -ffp-contract=off), so every clone gives the same bits.
#pragma once

#include <cstring>

// Compiled for AVX-512, AVX2 and baseline x86-64; picked at load time by CPUID.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FUSEOPT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define FUSEOPT_CLONES
#endif
// Helpers that take or return vectors: inlined into each clone, they use its
// instructions (called, they would be compiled for the baseline).
#define FUSEOPT_INLINE inline __attribute__((always_inline))

namespace fuseopt {
namespace kernels {

typedef float v8f __attribute__((vector_size(32)));
typedef double v8d __attribute__((vector_size(64)));

template <class V, class T>
FUSEOPT_INLINE V load(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V, class T>
FUSEOPT_INLINE void store(T* p, V v) {
  std::memcpy(p, &v, sizeof v);
}

}  // namespace kernels
}  // namespace fuseopt
