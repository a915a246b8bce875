// An agreed reduction as the C API hands it out (fuseopt_agreed_t): its name,
// size and check value, and the wire buffer its calls reuse. The first call
// is negotiated through the context like any allreduce; later ones go to
// Loop::agreed_allreduce (Note [Agreed reductions], loop_agreed.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fuseopt/fuseopt.h"

namespace fuseopt {

class Context;

class AgreedReduction {
 public:
  // Throws Error(INVALID_ARG) for a bad count or op, or a set this rank is
  // not a member of.
  AgreedReduction(Context& context, const std::string& name, int64_t count, int32_t set,
                  fuseopt_reduce_op_t op);
  // values: count() doubles, reduced in place. Throws Error.
  void run(double* values);
  int64_t count() const { return count_; }

 private:
  void negotiate(double* values);
  [[noreturn]] void throw_mismatch() const;

  Context& context_;
  std::string name_;
  int64_t count_;
  int32_t set_;
  int32_t set_size_ = 1;
  fuseopt_reduce_op_t op_;
  double check_;  // h of Note [Agreed reductions]
  bool agreed_ = false;
  std::vector<double> wire_;
};

}  // namespace fuseopt
