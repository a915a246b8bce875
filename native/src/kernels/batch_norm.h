// Batch normalization's arithmetic on host tensors, for the forward and
// backward passes of a (synchronized) batch-norm layer: the per-channel sums
// each rank contributes, and what follows once they are summed over the
// ranks. No communication here: api/batch_norm.cc puts an agreed reduction
// between the two halves of each pass.
#pragma once

#include <cstdint>

#include "fuseopt/fuseopt.h"

namespace fuseopt {
namespace kernels {

// Forward, local half: sums[0] = count, sums[1 + c] = sum(x), sums[1 + C + c]
// = sum(x * x), for C = x.channels (1 + 2C values), on up to threads threads.
void batch_norm_local_stats(const fuseopt_channel_view_t& x, double* sums, int threads);

// Forward, global half: from the sums over every rank, the batch mean and
// inverse standard deviation (saved for backward), the running statistics
// moved by momentum, and y. Throws Error(INVALID_ARG) for an empty global
// batch.
void batch_norm_normalize(const fuseopt_batch_norm_forward_t& args, const double* sums);

// Backward, local half: sums[c] = sum(dy), sums[C + c] = sum(dy * x_hat).
void batch_norm_local_grad_sums(const fuseopt_batch_norm_backward_t& args, double* sums);

// Backward, global half: dx from the sums over every rank (`total`), and the
// affine parameters' gradients from this rank's own (`local`).
void batch_norm_grad_input(const fuseopt_batch_norm_backward_t& args, const double* local,
                           const double* total);

// Throws Error(INVALID_ARG) for arguments the kernels cannot take.
void check_forward(const fuseopt_batch_norm_forward_t& args);
void check_backward(const fuseopt_batch_norm_backward_t& args);

}  // namespace kernels
}  // namespace fuseopt
