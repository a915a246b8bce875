#include "kernels/pair_sum.h"

#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FUSEOPT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define FUSEOPT_CLONES
#endif
// The helpers take and return vectors: inlined into each clone, they use its
// instructions (called, they would be compiled for the baseline).
#define FUSEOPT_INLINE inline __attribute__((always_inline))

namespace fuseopt {
namespace kernels {
namespace {

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

// T(x * factor) for 8 floats, the product in double.
FUSEOPT_INLINE v8f scaled(v8f x, double factor) {
  return __builtin_convertvector(__builtin_convertvector(x, v8d) * factor, v8f);
}

}  // namespace

FUSEOPT_CLONES
void pair_sum_publish(const float* in, double pre, const float* other, float* out,
                      float* publish, double post, int64_t n) {
  int64_t i = 0;
  if (pre == 1.0 && post == 1.0) {  // the products are exact: skip them
    for (; i + 8 <= n; i += 8) {
      const v8f r = load<v8f>(other + i) + load<v8f>(in + i);
      store(out + i, r);
      store(publish + i, r);
    }
  } else {
    for (; i + 8 <= n; i += 8) {
      const v8f r = scaled(load<v8f>(other + i) + scaled(load<v8f>(in + i), pre), post);
      store(out + i, r);
      store(publish + i, r);
    }
  }
  for (; i < n; ++i) {
    const float r = static_cast<float>((other[i] + static_cast<float>(in[i] * pre)) * post);
    out[i] = r;
    publish[i] = r;
  }
}

FUSEOPT_CLONES
void pair_sum_publish(const double* in, double pre, const double* other, double* out,
                      double* publish, double post, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const v8d r = (load<v8d>(other + i) + load<v8d>(in + i) * pre) * post;
    store(out + i, r);
    store(publish + i, r);
  }
  for (; i < n; ++i) {
    const double r = (other[i] + in[i] * pre) * post;
    out[i] = r;
    publish[i] = r;
  }
}

}  // namespace kernels
}  // namespace fuseopt
