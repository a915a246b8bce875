#include "kernels/pair_sum.h"

#include "kernels/vector_lanes.h"

namespace fuseopt {
namespace kernels {
namespace {

// T(x * factor) for 8 floats, the product in double.
FUSEOPT_INLINE v8f scaled(v8f x, double factor) {
  return __builtin_convertvector(__builtin_convertvector(x, v8d) * factor, v8f);
}

// The loops of both kernels; publish == nullptr writes out only (a branch
// per call, not per element: the kernels below instantiate both).
template <bool kPublish>
FUSEOPT_INLINE void sum_floats(const float* in, double pre, const float* other, float* out,
                               float* publish, double post, int64_t n) {
  int64_t i = 0;
  if (pre == 1.0 && post == 1.0) {  // the products are exact: skip them
    for (; i + 8 <= n; i += 8) {
      const v8f r = load<v8f>(other + i) + load<v8f>(in + i);
      store(out + i, r);
      if (kPublish) store(publish + i, r);
    }
  } else {
    for (; i + 8 <= n; i += 8) {
      const v8f r = scaled(load<v8f>(other + i) + scaled(load<v8f>(in + i), pre), post);
      store(out + i, r);
      if (kPublish) store(publish + i, r);
    }
  }
  for (; i < n; ++i) {
    const float r = static_cast<float>((other[i] + static_cast<float>(in[i] * pre)) * post);
    out[i] = r;
    if (kPublish) publish[i] = r;
  }
}

template <bool kPublish>
FUSEOPT_INLINE void sum_doubles(const double* in, double pre, const double* other, double* out,
                                double* publish, double post, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const v8d r = (load<v8d>(other + i) + load<v8d>(in + i) * pre) * post;
    store(out + i, r);
    if (kPublish) store(publish + i, r);
  }
  for (; i < n; ++i) {
    const double r = (other[i] + in[i] * pre) * post;
    out[i] = r;
    if (kPublish) publish[i] = r;
  }
}

}  // namespace

FUSEOPT_CLONES
void pair_sum_publish(const float* in, double pre, const float* other, float* out,
                      float* publish, double post, int64_t n) {
  if (publish) return sum_floats<true>(in, pre, other, out, publish, post, n);
  sum_floats<false>(in, pre, other, out, nullptr, post, n);
}

FUSEOPT_CLONES
void pair_sum_publish(const double* in, double pre, const double* other, double* out,
                      double* publish, double post, int64_t n) {
  if (publish) return sum_doubles<true>(in, pre, other, out, publish, post, n);
  sum_doubles<false>(in, pre, other, out, nullptr, post, n);
}

}  // namespace kernels
}  // namespace fuseopt
