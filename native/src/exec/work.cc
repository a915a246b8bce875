#include "exec/work.h"

#include "base/dtype.h"

namespace fuseopt {

int64_t tensor_bytes(const TensorSpec& s) { return s.num_elements() * dtype_size(s.dtype); }

}  // namespace fuseopt
