// Internal vocabulary shared by every part of the core: the error type that
// carries a status code, and small helpers. Nothing here is exported.
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>

#include "fuseopt/fuseopt.h"

namespace fuseopt {

// Thrown inside the core; turned into a status at the C boundary (c_api.cc) or
// stored on a handle by the loop thread. Never crosses the boundary itself.
class Error : public std::runtime_error {
 public:
  Error(fuseopt_status_t status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  fuseopt_status_t status() const { return status_; }

 private:
  fuseopt_status_t status_;
};

// The final outcome of one operation, as the handle reports it.
struct Outcome {
  fuseopt_status_t status = FUSEOPT_OK;
  std::string message;
  bool ok() const { return status == FUSEOPT_OK; }
};

// Seconds on the monotonic clock (timestamps for stall checks).
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace fuseopt
