// The inner loops of the per-channel kernels (channel_kernels.h), over one
// contiguous row of float or double values. Two shapes of row:
//  - a *channel row* holds one channel's values (channels-first layouts:
//    NCHW, N x C x L), so its coefficients are scalars and its sums are
//    totals;
//  - a *position row* holds every channel at one position (channels-last:
//    NHWC, and N x C), so its coefficients and sums are per element.
// Sums are accumulated in double whatever the row's type. Each function is
// compiled for AVX-512, AVX2+FMA and baseline x86-64 and picked at load time
// (GCC target_clones, by CPUID feature), as ATen picks its CPU capability.
#pragma once

#include <cstdint>

namespace fuseopt {
namespace kernels {

// *sum_u += sum(u), *sum_uv += sum(u * v) over `rows` rows of n values, the
// r-th at u + r * u_stride (v likewise); v may equal u (with its stride).
void channel_row_sums(const float* u, const float* v, int64_t n, int64_t rows, int64_t u_stride,
                      int64_t v_stride, double* sum_u, double* sum_uv);
void channel_row_sums(const double* u, const double* v, int64_t n, int64_t rows,
                      int64_t u_stride, int64_t v_stride, double* sum_u, double* sum_uv);

// sum_u[i] += u[i], sum_uv[i] += u[i] * v[i]; v may equal u.
void position_row_sums(const float* u, const float* v, int64_t n, double* sum_u, double* sum_uv);
void position_row_sums(const double* u, const double* v, int64_t n, double* sum_u,
                       double* sum_uv);

// out[i] = a[i] * p + b[i] * q + r (b may be null: no second term) over
// `rows` rows of n values, strides[0..2] apart for out, a and b. out may
// equal a or b.
void channel_row_affine(float* out, const float* a, float p, const float* b, float q, float r,
                        int64_t n, int64_t rows, const int64_t* strides);
void channel_row_affine(double* out, const double* a, double p, const double* b, double q,
                        double r, int64_t n, int64_t rows, const int64_t* strides);

// out[i] = a[i] * p[i] + b[i] * q[i] + r[i] (b and q may be null).
void position_row_affine(float* out, const float* a, const float* p, const float* b,
                         const float* q, const float* r, int64_t n);
void position_row_affine(double* out, const double* a, const double* p, const double* b,
                         const double* q, const double* r, int64_t n);

}  // namespace kernels
}  // namespace fuseopt
