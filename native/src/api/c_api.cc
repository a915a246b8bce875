// The C boundary of the context, its requests and handles. Every exported
// function is "validate, call one method, translate": exceptions are caught
// by guarded() (c_boundary.h) and nowhere else, and become a status plus a
// thread-local detail string. The framework-neutral kernels' entry points
// are in kernel_api.cc.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "api/agreed_reduction.h"
#include "api/c_boundary.h"
#include "api/context.h"
#include "transport/output_pool.h"
#include "base/error.h"
#include "base/dtype.h"
#include "policy/row_split.h"
#include "transport/device/device_free.h"
#include "transport/mpi/mpi_world.h"

namespace fuseopt {
namespace api {
namespace {

thread_local std::string t_last_error;

}  // namespace

int fail(fuseopt_status_t status, const std::string& message) {
  t_last_error = message;
  return status;
}

}  // namespace api
}  // namespace fuseopt

namespace {

using fuseopt::api::fail;
using fuseopt::api::guarded;

#define REQUIRE_CTX(ctx) \
  if (!(ctx)) return fail(FUSEOPT_NOT_INITIALIZED, "fuseopt is not initialized (NULL context)")

// A status that ends operations (abort, cancel): an error, and not TIMEOUT,
// which means "not yet".
bool is_failure(int status) {
  return status > FUSEOPT_OK && status <= FUSEOPT_RANK_FAILED && status != FUSEOPT_TIMEOUT;
}

int failed_wait(fuseopt_ctx* ctx, const fuseopt::Outcome& outcome) {
  if (outcome.status != FUSEOPT_TIMEOUT) ctx->context.note_error_delivered();
  return fail(outcome.status, outcome.message);
}

int finish_wait(fuseopt_ctx* ctx, int64_t handle, int64_t timeout_ms, fuseopt_output_t* out) {
  fuseopt::Outcome outcome;
  fuseopt::OwnedOutput owned;
  int rc = guarded([&] { outcome = ctx->context.wait(handle, timeout_ms, out ? &owned : nullptr); });
  if (rc != FUSEOPT_OK) return rc;
  if (!outcome.ok()) return failed_wait(ctx, outcome);
  if (out) {
    std::memset(out, 0, sizeof(*out));
    out->data = owned.data;
    out->nbytes = owned.nbytes;
    out->first_dim = owned.first_dim;
    if (!owned.recv_splits.empty()) {
      size_t bytes = owned.recv_splits.size() * sizeof(int64_t);
      out->recv_splits = static_cast<int64_t*>(std::malloc(bytes));
      if (out->recv_splits) std::memcpy(out->recv_splits, owned.recv_splits.data(), bytes);
    }
  }
  return FUSEOPT_OK;
}

}  // namespace

extern "C" {

int fuseopt_abi_version(void) { return FUSEOPT_ABI_VERSION; }

int fuseopt_mpi_library(char* version, int64_t version_len, char* path, int64_t path_len,
                        int32_t* standard_major, int32_t* standard_minor) {
  if (!version || !path || version_len < 1 || path_len < 1 || !standard_major || !standard_minor)
    return fail(FUSEOPT_INVALID_ARG, "fuseopt_mpi_library: NULL or empty buffer");
  return guarded([&] {
    const fuseopt::MpiLibrary found = fuseopt::MpiWorld::library();
    auto copy = [](const std::string& from, char* to, int64_t len) {
      const size_t n = std::min(from.size(), static_cast<size_t>(len - 1));
      std::memcpy(to, from.data(), n);
      to[n] = '\0';
    };
    copy(found.version, version, version_len);
    copy(found.path, path, path_len);
    *standard_major = found.standard_major;
    *standard_minor = found.standard_minor;
  });
}

int fuseopt_config_default(fuseopt_config_t* cfg) {
  if (!cfg) return fail(FUSEOPT_INVALID_ARG, "cfg is NULL");
  fuseopt::default_config(cfg);
  return FUSEOPT_OK;
}

int fuseopt_init(const fuseopt_config_t* cfg, fuseopt_ctx_t** out) {
  if (!out) return fail(FUSEOPT_INVALID_ARG, "out is NULL");
  *out = nullptr;
  fuseopt_config_t defaults;
  fuseopt::default_config(&defaults);
  return guarded([&] {
    std::unique_ptr<fuseopt_ctx> ctx(new fuseopt_ctx(cfg ? *cfg : defaults));
    try {
      ctx->context.start();
    } catch (...) {
      if (ctx->context.abandoned()) ctx.release();  // its loop thread may still use it
      throw;
    }
    *out = ctx.release();
  });
}

int fuseopt_cancel_init(int status, const char* message) {
  if (!is_failure(status))
    return fail(FUSEOPT_INVALID_ARG, "cancel status must be an error status other than TIMEOUT");
  if (!message) return fail(FUSEOPT_INVALID_ARG, "message is NULL");
  return guarded([&] {
    fuseopt::cancel_init(fuseopt::Outcome{static_cast<fuseopt_status_t>(status), message});
  });
}

int fuseopt_shutdown(fuseopt_ctx_t* ctx) {
  REQUIRE_CTX(ctx);
  // The context object itself is kept (a few hundred bytes): a thread still
  // holding it may call wait/poll/enqueue, and must get SHUT_DOWN rather
  // than touch freed memory.
  return guarded([&] { ctx->context.shutdown(); });
}

int fuseopt_abort(fuseopt_ctx_t* ctx, int status, const char* message) {
  REQUIRE_CTX(ctx);
  if (!is_failure(status))
    return fail(FUSEOPT_INVALID_ARG, "abort status must be an error status other than TIMEOUT");
  if (!message) return fail(FUSEOPT_INVALID_ARG, "message is NULL");
  return guarded([&] {
    ctx->context.abort(fuseopt::Outcome{static_cast<fuseopt_status_t>(status), message});
  });
}

int fuseopt_comm_info(fuseopt_ctx_t* ctx, fuseopt_comm_info_t* out) {
  REQUIRE_CTX(ctx);
  if (!out) return fail(FUSEOPT_INVALID_ARG, "out is NULL");
  *out = ctx->context.comm_info();
  return FUSEOPT_OK;
}

int fuseopt_mpi_threads_supported(fuseopt_ctx_t* ctx, int* supported) {
  REQUIRE_CTX(ctx);
  if (!supported) return fail(FUSEOPT_INVALID_ARG, "supported is NULL");
  *supported = fuseopt::MpiWorld::thread_multiple() ? 1 : 0;
  return FUSEOPT_OK;
}

int fuseopt_process_set_info(fuseopt_ctx_t* ctx, int32_t process_set, int32_t* rank,
                             int32_t* size) {
  REQUIRE_CTX(ctx);
  if (!rank || !size) return fail(FUSEOPT_INVALID_ARG, "rank or size is NULL");
  fuseopt::ProcessSetTable::Set set;
  if (!ctx->context.process_sets().find(process_set, &set))
    return fail(FUSEOPT_INVALID_ARG, "process set " + std::to_string(process_set) +
                                         " does not exist");
  *rank = set.rank;
  *size = static_cast<int32_t>(set.ranks.size());
  return FUSEOPT_OK;
}

int fuseopt_enqueue(fuseopt_ctx_t* ctx, const fuseopt_request_t* req, int64_t* handle) {
  REQUIRE_CTX(ctx);
  if (!req || !handle) return fail(FUSEOPT_INVALID_ARG, "request or handle pointer is NULL");
  return guarded([&] { ctx->context.enqueue(req, 1, handle); });
}

namespace {
int enqueue_many(fuseopt_ctx_t* ctx, const fuseopt_request_t* requests, int64_t count,
                 int64_t* handles, bool announce) {
  REQUIRE_CTX(ctx);
  if (count < 0) return fail(FUSEOPT_INVALID_ARG, "count is negative");
  if (count > 0 && (!requests || !handles))
    return fail(FUSEOPT_INVALID_ARG, "requests or handles pointer is NULL");
  return guarded([&] { ctx->context.enqueue(requests, count, handles, announce); });
}
}  // namespace

int fuseopt_enqueue_many(fuseopt_ctx_t* ctx, const fuseopt_request_t* requests, int64_t count,
                         int64_t* handles) {
  return enqueue_many(ctx, requests, count, handles, true);
}

int fuseopt_enqueue_for_wait(fuseopt_ctx_t* ctx, const fuseopt_request_t* requests,
                             int64_t count, int64_t* handles) {
  return enqueue_many(ctx, requests, count, handles, false);
}

int fuseopt_enqueue_and_wait(fuseopt_ctx_t* ctx, const fuseopt_request_t* request,
                             int64_t timeout_ms, int64_t* handle) {
  if (handle) *handle = 0;
  const int rc = enqueue_many(ctx, request, 1, handle, false);
  if (rc != FUSEOPT_OK) {
    if (handle) *handle = 0;
    return rc;
  }
  return finish_wait(ctx, *handle, timeout_ms, nullptr);
}

int fuseopt_poll(fuseopt_ctx_t* ctx, int64_t handle, int* done) {
  REQUIRE_CTX(ctx);
  if (!done) return fail(FUSEOPT_INVALID_ARG, "done is NULL");
  return guarded([&] { *done = ctx->context.handles().poll(handle) ? 1 : 0; });
}

int fuseopt_wait(fuseopt_ctx_t* ctx, int64_t handle, int64_t timeout_ms) {
  REQUIRE_CTX(ctx);
  return finish_wait(ctx, handle, timeout_ms, nullptr);
}

int fuseopt_wait_all(fuseopt_ctx_t* ctx, const int64_t* handles, int64_t count,
                     int64_t timeout_ms) {
  REQUIRE_CTX(ctx);
  if (count < 0) return fail(FUSEOPT_INVALID_ARG, "count is negative");
  if (count > 0 && !handles) return fail(FUSEOPT_INVALID_ARG, "handles pointer is NULL");
  fuseopt::Outcome outcome;
  int rc = guarded([&] { outcome = ctx->context.wait_all(handles, count, timeout_ms); });
  if (rc != FUSEOPT_OK) return rc;
  return outcome.ok() ? FUSEOPT_OK : failed_wait(ctx, outcome);
}

int fuseopt_wait_output(fuseopt_ctx_t* ctx, int64_t handle, int64_t timeout_ms,
                        fuseopt_output_t* out) {
  REQUIRE_CTX(ctx);
  if (!out) return fail(FUSEOPT_INVALID_ARG, "out is NULL");
  std::memset(out, 0, sizeof(*out));
  return finish_wait(ctx, handle, timeout_ms, out);
}

void fuseopt_free(void* p) { fuseopt::output_free(p); }

int fuseopt_free_device(int device_type, void* p) {
  if (device_type <= FUSEOPT_DEVICE_HOST || device_type >= FUSEOPT_DEVICE_COUNT)
    return fail(FUSEOPT_INVALID_ARG, "fuseopt_free_device: not a device type");
  if (fuseopt::free_memory(static_cast<fuseopt_device_t>(device_type), p) != 0)
    return fail(FUSEOPT_BACKEND, "fuseopt_free_device: the device library refused the pointer");
  return FUSEOPT_OK;
}

int fuseopt_metrics(fuseopt_ctx_t* ctx, fuseopt_metrics_t* out) {
  REQUIRE_CTX(ctx);
  if (!out) return fail(FUSEOPT_INVALID_ARG, "out is NULL");
  if (out->struct_size < sizeof(fuseopt_metrics_t))
    return fail(FUSEOPT_INVALID_ARG, "metrics.struct_size is smaller than this library's");
  ctx->context.metrics().fill(out);
  return FUSEOPT_OK;
}

int fuseopt_start_timeline(fuseopt_ctx_t* ctx, const char* path, int mark_cycles) {
  REQUIRE_CTX(ctx);
  if (!path || !*path) return fail(FUSEOPT_INVALID_ARG, "timeline path is NULL or empty");
  return guarded([&] { ctx->context.timeline().start(path, mark_cycles != 0); });
}

int fuseopt_stop_timeline(fuseopt_ctx_t* ctx) {
  REQUIRE_CTX(ctx);
  return guarded([&] { ctx->context.timeline().stop(); });
}

int fuseopt_pending_handles(fuseopt_ctx_t* ctx, int64_t* count) {
  REQUIRE_CTX(ctx);
  if (!count) return fail(FUSEOPT_INVALID_ARG, "count is NULL");
  *count = ctx->context.handles().count();
  return FUSEOPT_OK;
}

const char* fuseopt_last_error(void) { return fuseopt::api::t_last_error.c_str(); }

int64_t fuseopt_reducescatter_rows(int64_t rows, int rank, int size) {
  return size > 0 ? fuseopt::reducescatter_rows(rows, rank, size) : 0;
}

int fuseopt_agreed_create(fuseopt_ctx_t* ctx, const char* name, int64_t count,
                          int32_t process_set, int32_t reduce_op, fuseopt_agreed_t** out) {
  REQUIRE_CTX(ctx);
  if (!name || !*name || !out) return fail(FUSEOPT_INVALID_ARG, "name is empty or out is NULL");
  return guarded([&] {
    *out = new fuseopt_agreed{ctx, fuseopt::AgreedReduction(
                                       ctx->context, name, count, process_set,
                                       static_cast<fuseopt_reduce_op_t>(reduce_op))};
  });
}

int fuseopt_agreed_allreduce(fuseopt_agreed_t* agreed, double* values) {
  if (!agreed || !values) return fail(FUSEOPT_INVALID_ARG, "agreed reduction or values is NULL");
  const int rc = guarded([&] { agreed->reduction.run(values); });
  if (rc != FUSEOPT_OK) agreed->ctx->context.note_error_delivered();
  return rc;
}

void fuseopt_agreed_free(fuseopt_agreed_t* agreed) { delete agreed; }

}  // extern "C"
