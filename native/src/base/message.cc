#include "base/message.h"

#include <sstream>

namespace fuseopt {

int64_t TensorSpec::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t TensorSpec::row_elements() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

bool TensorSpec::first_dim_may_differ() const {
  return collective == FUSEOPT_ALLGATHER || collective == FUSEOPT_ALLTOALL;
}

bool TensorSpec::compatible_with(const TensorSpec& o) const {
  if (collective != o.collective || name != o.name || dtype != o.dtype) return false;
  if (device != o.device || phase != o.phase) return false;
  if (shape.size() != o.shape.size()) return false;
  size_t first = (first_dim_may_differ() && !shape.empty()) ? 1 : 0;
  for (size_t i = first; i < shape.size(); ++i)
    if (shape[i] != o.shape[i]) return false;
  switch (collective) {
    case FUSEOPT_ALLREDUCE:
    case FUSEOPT_REDUCESCATTER:
      return reduce_op == o.reduce_op && prescale == o.prescale && postscale == o.postscale;
    case FUSEOPT_REDUCE:
      return reduce_op == o.reduce_op && prescale == o.prescale && postscale == o.postscale &&
             root == o.root;
    case FUSEOPT_BROADCAST: return root == o.root;
    default: return true;
  }
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? "," : "") << shape[i];
  s << "]";
  return s.str();
}

std::string TensorSpec::describe() const {
  std::ostringstream s;
  if (collective == FUSEOPT_PROCESS_SET_ADD) return "a process set of ranks " + shape_string(shape);
  if (collective == FUSEOPT_PROCESS_SET_REMOVE) return "removal of process set " + shape_string(shape);
  s << fuseopt_collective_name(collective) << " " << fuseopt_dtype_name(dtype)
    << shape_string(shape);
  if (collective == FUSEOPT_ALLREDUCE || collective == FUSEOPT_REDUCESCATTER ||
      collective == FUSEOPT_REDUCE) {
    s << " op=" << fuseopt_reduce_op_name(reduce_op);
    if (prescale != 1.0) s << " prescale=" << prescale;
    if (postscale != 1.0) s << " postscale=" << postscale;
  }
  if (collective == FUSEOPT_BROADCAST || collective == FUSEOPT_REDUCE) s << " root=" << root;
  // Host memory is the default and says nothing, so host-only messages stay
  // as they were; a device tensor names its kind.
  if (device == FUSEOPT_DEVICE_CUDA) s << " on cuda";
  if (device == FUSEOPT_DEVICE_NPU) s << " on npu";
  if (phase != 0) s << " phase=" << phase;
  return s.str();
}

}  // namespace fuseopt
