#include "exec/work.h"

#include "base/dtype.h"
#include "policy/row_split.h"

namespace fuseopt {

int64_t tensor_bytes(const TensorSpec& s) { return s.num_elements() * dtype_size(s.dtype); }

std::vector<int64_t> alltoall_send_rows(const Entry& e, int size) {
  if (!e.splits.empty()) return e.splits;
  const int64_t rows = e.spec.shape.empty() ? 0 : e.spec.shape[0];
  return std::vector<int64_t>(size, rows / size);
}

std::vector<int64_t> reducescatter_counts(const TensorSpec& s, int size) {
  const int64_t rows = s.shape.empty() ? 1 : s.shape[0];
  std::vector<int64_t> counts(size);
  for (int r = 0; r < size; ++r) counts[r] = reducescatter_rows(rows, r, size) * s.row_elements();
  return counts;
}

}  // namespace fuseopt
