// What the files of the C boundary share (c_api.cc, kernel_api.cc): the
// opaque handles' definitions, and the translation of exceptions into a
// status plus the thread-local detail string fuseopt_last_error() returns.
#pragma once

#include <new>
#include <string>

#include "api/agreed_reduction.h"
#include "api/context.h"
#include "base/error.h"
#include "fuseopt/fuseopt.h"

struct fuseopt_ctx {
  fuseopt::Context context;
  explicit fuseopt_ctx(const fuseopt_config_t& c) : context(c) {}
};

struct fuseopt_agreed {
  fuseopt_ctx* ctx;
  fuseopt::AgreedReduction reduction;
};

namespace fuseopt {
namespace api {

// Records message as the last error of this thread and returns status.
int fail(fuseopt_status_t status, const std::string& message);

// Runs body; an exception becomes its status (and detail), as nowhere else.
template <typename F>
int guarded(F&& body) {
  try {
    body();
    return FUSEOPT_OK;
  } catch (const fuseopt::Error& e) {
    return fail(e.status(), e.what());
  } catch (const std::bad_alloc&) {
    return fail(FUSEOPT_INTERNAL, "out of memory");
  } catch (const std::exception& e) {
    return fail(FUSEOPT_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(FUSEOPT_INTERNAL, "internal error: unknown exception");
  }
}

}  // namespace api
}  // namespace fuseopt
