#include "transport/backend.h"

#include "base/error.h"

namespace fuseopt {

void Backend::unsupported(const char* what) const {
  throw Error(FUSEOPT_UNSUPPORTED,
              std::string("backend ") + name() + " does not support " + what);
}

void Backend::allreduce(const void*, void*, int64_t, fuseopt_dtype_t, fuseopt_reduce_op_t) {
  unsupported("allreduce");
}
void Backend::reduce(const void*, void*, int64_t, fuseopt_dtype_t, fuseopt_reduce_op_t, int) {
  unsupported("reduce");
}
void Backend::broadcast(void*, int64_t, fuseopt_dtype_t, int) { unsupported("broadcast"); }
void Backend::allgatherv(const void*, int64_t, void*, const std::vector<int64_t>&) {
  unsupported("allgather");
}
void Backend::alltoallv(const void*, const std::vector<int64_t>&, void*,
                        const std::vector<int64_t>&) {
  unsupported("alltoall");
}
void Backend::alltoall_counts(const std::vector<int64_t>&, std::vector<int64_t>*) {
  unsupported("alltoall");
}
void Backend::reducescatter(const void*, void*, const std::vector<int64_t>&, fuseopt_dtype_t,
                            fuseopt_reduce_op_t) {
  unsupported("reducescatter");
}
void Backend::barrier() { unsupported("barrier"); }
void Backend::adasum(void*, const std::vector<int64_t>&, fuseopt_dtype_t) {
  unsupported("Adasum (reduce Adasum tensors in host memory)");
}
bool Backend::all_ok(bool) { unsupported("agreement"); }

}  // namespace fuseopt
