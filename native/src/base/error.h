// How the core reports failure inside itself: the Error it throws, carrying a
// status code, and the Outcome a handle ends with. Nothing here is exported.
#pragma once

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

}  // namespace fuseopt
