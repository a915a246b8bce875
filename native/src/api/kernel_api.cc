// The C boundary of the framework-neutral kernels (native/src/kernels/):
// batch normalization (with its agreed reductions) and ef_sign compression.
// The bindings describe their tensors by address, shape and strides.
#include <cmath>
#include <string>
#include <vector>

#include "api/c_boundary.h"
#include "kernels/batch_norm.h"
#include "kernels/ef_sign.h"

using fuseopt::api::fail;
using fuseopt::api::guarded;

namespace {

// The agreed reduction of a batch-norm pass, checked against its size.
fuseopt::AgreedReduction* reduction_of(fuseopt_agreed_t* agreed, int64_t count) {
  if (!agreed) return nullptr;
  if (agreed->reduction.count() != count)
    throw fuseopt::Error(FUSEOPT_INVALID_ARG,
                         "batch norm: the agreed reduction holds " +
                             std::to_string(agreed->reduction.count()) + " values, the layer needs " +
                             std::to_string(count));
  return &agreed->reduction;
}

int finish_kernel(fuseopt_agreed_t* agreed, int rc) {
  if (rc != FUSEOPT_OK && agreed) agreed->ctx->context.note_error_delivered();
  return rc;
}

}  // namespace

extern "C" {

int fuseopt_batch_norm_forward(fuseopt_agreed_t* stats, const fuseopt_batch_norm_forward_t* args) {
  if (!args || args->struct_size < sizeof(*args))
    return fail(FUSEOPT_INVALID_ARG, "batch norm arguments are NULL or too short");
  return finish_kernel(stats, guarded([&] {
    fuseopt::kernels::check_forward(*args);
    const int64_t c = args->x.channels;
    fuseopt::AgreedReduction* reduction = reduction_of(stats, 1 + 2 * c);
    std::vector<double> sums(1 + 2 * c);
    fuseopt::kernels::batch_norm_local_stats(args->x, sums.data(), args->threads);
    if (reduction) reduction->run(sums.data());
    fuseopt::kernels::batch_norm_normalize(*args, sums.data());
  }));
}

int fuseopt_batch_norm_backward(fuseopt_agreed_t* sums,
                                const fuseopt_batch_norm_backward_t* args) {
  if (!args || args->struct_size < sizeof(*args))
    return fail(FUSEOPT_INVALID_ARG, "batch norm arguments are NULL or too short");
  return finish_kernel(sums, guarded([&] {
    fuseopt::kernels::check_backward(*args);
    const int64_t c = args->x.channels;
    fuseopt::AgreedReduction* reduction = reduction_of(sums, 2 * c);
    std::vector<double> local(2 * c), total;
    fuseopt::kernels::batch_norm_local_grad_sums(*args, local.data());
    total = local;
    if (reduction) reduction->run(total.data());
    fuseopt::kernels::batch_norm_grad_input(*args, local.data(), total.data());
  }));
}

int fuseopt_batch_norm_forward_at(fuseopt_agreed_t* stats,
                                  const fuseopt_batch_norm_forward_t* args, uintptr_t x,
                                  uintptr_t y, double* saved) {
  if (!args || args->struct_size < sizeof(*args) || !saved)
    return fail(FUSEOPT_INVALID_ARG, "batch norm arguments or saved are NULL or too short");
  fuseopt_batch_norm_forward_t call = *args;
  const int64_t c = call.x.channels;
  call.x.data = reinterpret_cast<void*>(x);
  call.y.data = reinterpret_cast<void*>(y);
  call.saved_mean = saved;
  call.saved_invstd = saved + c;
  call.saved_count = saved + 2 * c;
  return fuseopt_batch_norm_forward(stats, &call);
}

int fuseopt_batch_norm_backward_at(fuseopt_agreed_t* sums,
                                   const fuseopt_batch_norm_backward_t* args, uintptr_t x,
                                   uintptr_t dy, uintptr_t dx, const double* saved,
                                   uintptr_t grad_weight, uintptr_t grad_bias) {
  if (!args || args->struct_size < sizeof(*args) || !saved || args->x.channels < 0)
    return fail(FUSEOPT_INVALID_ARG, "batch norm arguments or saved are NULL or too short");
  fuseopt_batch_norm_backward_t call = *args;  // saved[2c] is read before the checks
  const int64_t c = call.x.channels;
  call.x.data = reinterpret_cast<void*>(x);
  call.dy.data = reinterpret_cast<void*>(dy);
  call.dx.data = reinterpret_cast<void*>(dx);
  call.saved_mean = saved;
  call.saved_invstd = saved + c;
  call.saved_count = saved[2 * c];
  call.grad_weight = reinterpret_cast<void*>(grad_weight);
  call.grad_bias = reinterpret_cast<void*>(grad_bias);
  return fuseopt_batch_norm_backward(sums, &call);
}

int fuseopt_batch_norm_forward_sums(const fuseopt_batch_norm_forward_t* args, double* sums) {
  if (!args || args->struct_size < sizeof(*args) || !sums)
    return fail(FUSEOPT_INVALID_ARG, "batch norm arguments or sums are NULL or too short");
  return guarded([&] {
    fuseopt::kernels::check_forward(*args);
    fuseopt::kernels::batch_norm_local_stats(args->x, sums, args->threads);
  });
}

int fuseopt_batch_norm_forward_apply(const fuseopt_batch_norm_forward_t* args,
                                     const double* total) {
  if (!args || args->struct_size < sizeof(*args) || !total)
    return fail(FUSEOPT_INVALID_ARG, "batch norm arguments or sums are NULL or too short");
  return guarded([&] {
    fuseopt::kernels::check_forward(*args);
    fuseopt::kernels::batch_norm_normalize(*args, total);
  });
}

int fuseopt_batch_norm_backward_sums(const fuseopt_batch_norm_backward_t* args, double* sums) {
  if (!args || args->struct_size < sizeof(*args) || !sums)
    return fail(FUSEOPT_INVALID_ARG, "batch norm arguments or sums are NULL or too short");
  return guarded([&] {
    fuseopt::kernels::check_backward(*args);
    fuseopt::kernels::batch_norm_local_grad_sums(*args, sums);
  });
}

int fuseopt_batch_norm_backward_apply(const fuseopt_batch_norm_backward_t* args,
                                      const double* local, const double* total) {
  if (!args || args->struct_size < sizeof(*args) || !local || !total)
    return fail(FUSEOPT_INVALID_ARG, "batch norm arguments or sums are NULL or too short");
  return guarded([&] {
    fuseopt::kernels::check_backward(*args);
    fuseopt::kernels::batch_norm_grad_input(*args, local, total);
  });
}

int fuseopt_ef_sign_encode(fuseopt_ef_sign_encode_t* args) {
  if (!args || args->struct_size < sizeof(*args))
    return fail(FUSEOPT_INVALID_ARG, "ef_sign arguments are NULL or too short");
  if (args->count < 0 || args->levels < 1 || args->levels > 127 ||
      (args->count > 0 && (!args->gradient || !args->residual || !args->values || !args->kept)))
    return fail(FUSEOPT_INVALID_ARG, "ef_sign: a negative count, levels outside 1-127 or a "
                                     "NULL buffer");
  return guarded([&] {
    args->step = fuseopt::kernels::ef_sign_encode(args->gradient, args->residual, args->values,
                                                  args->kept, args->count, args->levels,
                                                  args->threads);
  });
}

int fuseopt_ef_sign_decode(const fuseopt_ef_sign_decode_t* args) {
  if (!args || args->struct_size < sizeof(*args))
    return fail(FUSEOPT_INVALID_ARG, "ef_sign arguments are NULL or too short");
  if (args->count < 0 || args->ranks < 1 ||
      (args->count > 0 && (!args->sum || !args->kept || !args->residual || !args->out)))
    return fail(FUSEOPT_INVALID_ARG, "ef_sign: a negative count, no ranks or a NULL buffer");
  return guarded([&] {
    fuseopt::kernels::ef_sign_decode(args->sum, args->kept, args->residual, args->out,
                                     args->count, args->step_sum, args->step, args->ranks,
                                     args->threads);
  });
}

}  // extern "C"
