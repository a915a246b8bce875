// What both executors (executor.h for host memory, device_executor.h for
// device memory) work on: agreed responses paired with this rank's entries,
// and how a bucket of them lies in a fusion buffer.
#pragma once

#include <cstdint>
#include <vector>

#include "base/message.h"
#include "exec/entry.h"

namespace fuseopt {

// One response paired with this rank's entry (nullptr when joined).
struct Work {
  Response response;
  Entry* entry = nullptr;
};

// Bytes of one tensor of this spec.
int64_t tensor_bytes(const TensorSpec& spec);

// A bucket's tensors laid end to end in a fusion buffer: calls place(work,
// byte offset) for each, in order, and returns the bytes of all.
template <typename Place>
int64_t lay_out(const std::vector<Work*>& bucket, Place place) {
  int64_t offset = 0;
  for (Work* w : bucket) {
    place(*w, offset);
    offset += tensor_bytes(w->response.spec);
  }
  return offset;
}

inline int64_t bucket_bytes(const std::vector<Work*>& bucket) {
  return lay_out(bucket, [](Work&, int64_t) {});
}

// Alltoall: the rows this rank sends to each of size ranks (its splits, or
// an even split, validated at enqueue).
std::vector<int64_t> alltoall_send_rows(const Entry& entry, int size);

// Reducescatter: the elements of the result on each of size ranks.
std::vector<int64_t> reducescatter_counts(const TensorSpec& spec, int size);

}  // namespace fuseopt
