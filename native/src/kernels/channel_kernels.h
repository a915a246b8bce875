// Per-channel kernels over host tensors of any layout: what batch
// normalization computes, written once for every framework. A tensor is seen
// as [outer][channels][inner] with strides in elements
// (fuseopt_channel_view_t): NCHW is (N, C, H*W) with strides (C*H*W, H*W, 1),
// NHWC is (N*H*W, C, 1) with strides (C, 1, 1), torch's channels_last NCHW
// is (N, C, H*W) with strides (H*W*C, 1, C). Channels-first views walk one
// channel's contiguous run at a time, channels-last views one position's
// channels (channel_rows.h); any other strides are gathered row by row.
//
// Floating dtypes only: float64 computes in double; float32, float16 and
// bfloat16 compute in float (16-bit values are widened on the way in and
// rounded once on the way out). Sums are always accumulated in double. Every
// view of one call must share its dtype and its sizes.
#pragma once

#include <cstdint>

#include "fuseopt/fuseopt.h"

namespace fuseopt {
namespace kernels {

// Element i of a tensor of float dtype (float32, float64, float16, bfloat16),
// widened to double; and stored from a double, rounded once to dtype.
double load_element(const void* data, int32_t dtype, int64_t i);
void store_element(void* data, int32_t dtype, int64_t i, double value);

// Throws Error(INVALID_ARG) naming `what` for a view these kernels cannot
// take: a null pointer with elements, a non-float dtype, negative sizes.
void check_view(const fuseopt_channel_view_t& v, const char* what);
// Throws Error(INVALID_ARG) unless b has a's dtype and sizes.
void check_same_shape(const fuseopt_channel_view_t& a, const fuseopt_channel_view_t& b,
                      const char* what);

// Both kernels may split their channels among `threads` threads
// (parallel_for.h) when the tensor is large enough to pay for it; a channel's
// values are summed in the same order whatever the split, so the results do
// not depend on the number of threads.

// sum_u[c] = sum of u over the channel, sum_uv[c] = sum of u * v (v null: u).
// Both arrays hold channels doubles and are overwritten.
void channel_sums(const fuseopt_channel_view_t& u, const fuseopt_channel_view_t* v,
                  double* sum_u, double* sum_uv, int threads = 1);

// out = a * p[c] + b * q[c] + r[c] element-wise (b null: no b term), the
// coefficients rounded to the compute type first. out may be a or b.
void channel_affine(const fuseopt_channel_view_t& out, const fuseopt_channel_view_t& a,
                    const double* p, const fuseopt_channel_view_t* b, const double* q,
                    const double* r, int threads = 1);

}  // namespace kernels
}  // namespace fuseopt
