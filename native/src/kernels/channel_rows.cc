// Row loops of the per-channel kernels, written with GCC vector extensions so
// that one source serves every instruction set (kernels/vector_lanes.h): the
// clones give the same bits, so results do not depend on the CPU, as ATen's do.
#include "kernels/channel_rows.h"

#include <cstring>

#include "kernels/vector_lanes.h"

namespace fuseopt {
namespace kernels {
namespace {

FUSEOPT_INLINE v8d load_wide(const float* p) { return widen(load<v8f>(p)); }
FUSEOPT_INLINE v8d load_wide(const double* p) { return load<v8d>(p); }
FUSEOPT_INLINE double lanes_total(v8d v) {
  double s = 0;
  for (int k = 0; k < 8; ++k) s += lane(v, k);
  return s;
}

// Two accumulators per sum hide the add latency; the order of additions is
// fixed by the loop, not by the instruction set. One horizontal sum per
// call: a channel's rows of every sample go through one set of lanes.
template <class T>
FUSEOPT_INLINE void channel_sums(const T* u, const T* v, int64_t n, int64_t rows,
                                 int64_t u_stride, int64_t v_stride, double* sum_u,
                                 double* sum_uv) {
  v8d a0 = {}, a1 = {}, b0 = {}, b1 = {};
  double su = 0, suv = 0;
  for (int64_t r = 0; r < rows; ++r, u += u_stride, v += v_stride) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const v8d x0 = load_wide(u + i), x1 = load_wide(u + i + 8);
      const v8d y0 = u == v ? x0 : load_wide(v + i), y1 = u == v ? x1 : load_wide(v + i + 8);
      a0 += x0;
      a1 += x1;
      b0 += x0 * y0;
      b1 += x1 * y1;
    }
    for (; i < n; ++i) {
      const double x = u[i];
      su += x;
      suv += x * static_cast<double>(v[i]);
    }
  }
  *sum_u += su + lanes_total(a0 + a1);
  *sum_uv += suv + lanes_total(b0 + b1);
}

template <class T>
FUSEOPT_INLINE void position_sums(const T* u, const T* v, int64_t n, double* sum_u, double* sum_uv) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const v8d x = load_wide(u + i), y = u == v ? x : load_wide(v + i);
    store(sum_u + i, load<v8d>(sum_u + i) + x);
    store(sum_uv + i, load<v8d>(sum_uv + i) + x * y);
  }
  for (; i < n; ++i) {
    const double x = u[i];
    sum_u[i] += x;
    sum_uv[i] += x * static_cast<double>(v[i]);
  }
}

template <class V, class T>
FUSEOPT_INLINE void channel_affine(T* out, const T* a, T p, const T* b, T q, T r, int64_t n,
                                   int64_t rows, const int64_t* strides) {
  const V vp = V{} + p, vq = V{} + q, vr = V{} + r;
  for (int64_t row = 0; row < rows; ++row) {
    int64_t i = 0;
    if (b) {
      for (; i + 8 <= n; i += 8) store(out + i, load<V>(a + i) * vp + load<V>(b + i) * vq + vr);
      for (; i < n; ++i) out[i] = a[i] * p + b[i] * q + r;
      b += strides[2];
    } else {
      for (; i + 8 <= n; i += 8) store(out + i, load<V>(a + i) * vp + vr);
      for (; i < n; ++i) out[i] = a[i] * p + r;
    }
    out += strides[0];
    a += strides[1];
  }
}

template <class V, class T>
FUSEOPT_INLINE void position_affine(T* out, const T* a, const T* p, const T* b, const T* q,
                                    const T* r, int64_t n) {
  int64_t i = 0;
  if (b) {
    for (; i + 8 <= n; i += 8)
      store(out + i, load<V>(a + i) * load<V>(p + i) + load<V>(b + i) * load<V>(q + i) +
                         load<V>(r + i));
    for (; i < n; ++i) out[i] = a[i] * p[i] + b[i] * q[i] + r[i];
  } else {
    for (; i + 8 <= n; i += 8)
      store(out + i, load<V>(a + i) * load<V>(p + i) + load<V>(r + i));
    for (; i < n; ++i) out[i] = a[i] * p[i] + r[i];
  }
}

}  // namespace

FUSEOPT_CLONES void channel_row_sums(const float* u, const float* v, int64_t n, int64_t rows,
                                     int64_t u_stride, int64_t v_stride, double* sum_u,
                                     double* sum_uv) {
  channel_sums(u, v, n, rows, u_stride, v_stride, sum_u, sum_uv);
}
FUSEOPT_CLONES void channel_row_sums(const double* u, const double* v, int64_t n, int64_t rows,
                                     int64_t u_stride, int64_t v_stride, double* sum_u,
                                     double* sum_uv) {
  channel_sums(u, v, n, rows, u_stride, v_stride, sum_u, sum_uv);
}
FUSEOPT_CLONES void position_row_sums(const float* u, const float* v, int64_t n, double* sum_u,
                                      double* sum_uv) {
  position_sums(u, v, n, sum_u, sum_uv);
}
FUSEOPT_CLONES void position_row_sums(const double* u, const double* v, int64_t n, double* sum_u,
                                      double* sum_uv) {
  position_sums(u, v, n, sum_u, sum_uv);
}
FUSEOPT_CLONES void channel_row_affine(float* out, const float* a, float p, const float* b,
                                       float q, float r, int64_t n, int64_t rows,
                                       const int64_t* strides) {
  channel_affine<v8f>(out, a, p, b, q, r, n, rows, strides);
}
FUSEOPT_CLONES void channel_row_affine(double* out, const double* a, double p, const double* b,
                                       double q, double r, int64_t n, int64_t rows,
                                       const int64_t* strides) {
  channel_affine<v8d>(out, a, p, b, q, r, n, rows, strides);
}
FUSEOPT_CLONES void position_row_affine(float* out, const float* a, const float* p,
                                        const float* b, const float* q, const float* r,
                                        int64_t n) {
  position_affine<v8f>(out, a, p, b, q, r, n);
}
FUSEOPT_CLONES void position_row_affine(double* out, const double* a, const double* p,
                                        const double* b, const double* q, const double* r,
                                        int64_t n) {
  position_affine<v8d>(out, a, p, b, q, r, n);
}

}  // namespace kernels
}  // namespace fuseopt
