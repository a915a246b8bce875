// Batch normalization's arithmetic (batch_norm.h). Per-channel values are
// float64 throughout; the tensors themselves go through channel_kernels.h.
#include "kernels/batch_norm.h"

#include <cmath>
#include <string>
#include <vector>

#include "base/error.h"
#include "kernels/channel_kernels.h"

namespace fuseopt {
namespace kernels {
namespace {

// Per-channel parameter arrays (weight, bias, running statistics) come in
// the framework's parameter dtype; a missing one reads as `absent`.
double load(const void* p, int32_t dtype, int64_t i, double absent) {
  return p ? load_element(p, dtype, i) : absent;
}

void check_param_dtype(int32_t dtype, bool used, const char* what) {
  if (!used) return;
  if (dtype != FUSEOPT_FLOAT32 && dtype != FUSEOPT_FLOAT64 && dtype != FUSEOPT_FLOAT16 &&
      dtype != FUSEOPT_BFLOAT16)
    throw Error(FUSEOPT_INVALID_ARG, std::string(what) + ": dtype must be a float type");
}

}  // namespace

void check_forward(const fuseopt_batch_norm_forward_t& a) {
  check_view(a.x, "batch norm input");
  check_view(a.y, "batch norm output");
  check_same_shape(a.x, a.y, "batch norm output");
  check_param_dtype(a.param_dtype, a.weight || a.bias, "batch norm weight");
  check_param_dtype(a.running_dtype, a.running_mean || a.running_var, "batch norm running stats");
  if (!a.saved_mean || !a.saved_invstd || !a.saved_count)
    throw Error(FUSEOPT_INVALID_ARG, "batch norm: saved_mean, saved_invstd and saved_count are required");
  if (!(a.eps >= 0)) throw Error(FUSEOPT_INVALID_ARG, "batch norm: eps must be >= 0");
}

void check_backward(const fuseopt_batch_norm_backward_t& a) {
  check_view(a.x, "batch norm input");
  check_view(a.dy, "batch norm output gradient");
  check_view(a.dx, "batch norm input gradient");
  check_same_shape(a.x, a.dy, "batch norm output gradient");
  check_same_shape(a.x, a.dx, "batch norm input gradient");
  check_param_dtype(a.param_dtype, a.weight || a.grad_weight || a.grad_bias, "batch norm weight");
  if (!a.saved_mean || !a.saved_invstd)
    throw Error(FUSEOPT_INVALID_ARG, "batch norm: saved_mean and saved_invstd are required");
}

void batch_norm_local_stats(const fuseopt_channel_view_t& x, double* sums, int threads) {
  const int64_t c = x.channels;
  channel_sums(x, nullptr, sums + 1, sums + 1 + c, threads);
  sums[0] = static_cast<double>(x.outer * x.inner);
}

void batch_norm_normalize(const fuseopt_batch_norm_forward_t& a, const double* sums) {
  const int64_t channels = a.x.channels;
  const double n = sums[0];
  if (!(n > 0)) throw Error(FUSEOPT_INVALID_ARG, "SyncBatchNorm got an empty batch on every rank");
  std::vector<double> scale(channels), shift(channels);
  for (int64_t c = 0; c < channels; ++c) {
    const double mean = sums[1 + c] / n;
    const double var = std::max(sums[1 + channels + c] / n - mean * mean, 0.0);
    const double invstd = 1.0 / std::sqrt(var + a.eps);
    a.saved_mean[c] = mean;
    a.saved_invstd[c] = invstd;
    const double m = a.momentum;
    if (a.running_mean) {
      const double moved = (1 - m) * load(a.running_mean, a.running_dtype, c, 0) + m * mean;
      store_element(a.running_mean, a.running_dtype, c, moved);
    }
    if (a.running_var) {
      const double unbiased = n > 1 ? var * n / (n - 1) : var;
      const double moved = (1 - m) * load(a.running_var, a.running_dtype, c, 1) + m * unbiased;
      store_element(a.running_var, a.running_dtype, c, moved);
    }
    scale[c] = load(a.weight, a.param_dtype, c, 1.0) * invstd;
    shift[c] = load(a.bias, a.param_dtype, c, 0.0) - mean * scale[c];
  }
  *a.saved_count = n;
  channel_affine(a.y, a.x, scale.data(), nullptr, nullptr, shift.data(), a.threads);
}

void batch_norm_local_grad_sums(const fuseopt_batch_norm_backward_t& a, double* sums) {
  const int64_t channels = a.x.channels;
  // sum(dy * x_hat) = invstd * (sum(dy * x) - mean * sum(dy)): one pass.
  channel_sums(a.dy, &a.x, sums, sums + channels, a.threads);
  for (int64_t c = 0; c < channels; ++c)
    sums[channels + c] = a.saved_invstd[c] * (sums[channels + c] - a.saved_mean[c] * sums[c]);
}

void batch_norm_grad_input(const fuseopt_batch_norm_backward_t& a, const double* local,
                           const double* total) {
  const int64_t channels = a.x.channels;
  const double n = a.saved_count;
  std::vector<double> k(channels), ax(channels), b(channels);
  for (int64_t c = 0; c < channels; ++c) {
    // dx = k * (dy - mean(dy) - x_hat * mean(dy * x_hat)), x_hat = (x - mean) * invstd,
    // rearranged per channel to dy * k - x * a - b: one pass.
    const double invstd = a.saved_invstd[c], g_dy = total[c] / n,
                 g_dy_xhat = total[channels + c] / n;
    k[c] = invstd * load(a.weight, a.param_dtype, c, 1.0);
    ax[c] = -k[c] * invstd * g_dy_xhat;
    b[c] = -k[c] * (g_dy - a.saved_mean[c] * invstd * g_dy_xhat);
    if (a.grad_weight) store_element(a.grad_weight, a.param_dtype, c, local[channels + c]);
    if (a.grad_bias) store_element(a.grad_bias, a.param_dtype, c, local[c]);
  }
  channel_affine(a.dx, a.dy, k.data(), &a.x, ax.data(), b.data(), a.threads);
}

}  // namespace kernels
}  // namespace fuseopt
