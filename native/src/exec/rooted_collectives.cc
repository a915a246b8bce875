// The executor's rooted collectives: reduce (the result on one rank) and
// broadcast (one rank's tensors to all), each through the backend's
// fusion-buffer-free path when it has one.
#include <algorithm>
#include <cstring>

#include "base/dtype.h"
#include "exec/executor.h"
#include "exec/work.h"

namespace fuseopt {

// The reduction lands on the root only (the sharded optimizer's gradients:
// each on the rank that owns the parameter). The others' outputs are scratch.
void Executor::reduce(std::vector<Work*>& bucket) {
  const TensorSpec& s = bucket.front()->response.spec;
  const double post = postscale_of(s);
  const int root = comm_rank_of(s.root);
  const bool at_root = rank_ == root;
  auto finish = [&] {
    for (Work* w : bucket) {
      if (at_root) finish_average(s, w->entry->output, w->response.spec.num_elements());
      complete(*w);
    }
  };
  bool narrowed = false;
  if (backend_.reduce_segments(segments_of(bucket, &narrowed), s.dtype, s.reduce_op, post,
                               root))
    return finish();
  if (bucket.size() == 1 && !narrowed) {
    Entry& e = *bucket.front()->entry;
    const int64_t n = s.num_elements();
    const void* send = e.input;
    if (s.prescale != 1.0) {
      scale_copy(s.dtype, e.input, e.output, n, s.prescale);
      send = e.output;
    }
    backend_.reduce(send, e.output, n, s.dtype, s.reduce_op, root);
    if (at_root && post != 1.0) scale_copy(s.dtype, e.output, e.output, n, post);
    return finish();
  }
  char* buf = fusion_buffer(bucket_bytes(bucket));
  const int64_t total = lay_out(bucket, [&](Work& w, int64_t at) {
    const TensorSpec& t = w.response.spec;
    convert_copy(w.entry->memory_dtype(), w.entry->input, t.dtype, buf + at, t.num_elements(),
                 t.prescale);
  });
  mark_copied_in();
  backend_.reduce(buf, buf, total / dtype_size(s.dtype), s.dtype, s.reduce_op, root);
  mark_reduced();
  if (at_root)
    lay_out(bucket, [&](Work& w, int64_t at) {
      const TensorSpec& t = w.response.spec;
      convert_copy(t.dtype, buf + at, w.entry->memory_dtype(), w.entry->output, t.num_elements(),
                   post);
    });
  finish();
}

int Executor::comm_rank_of(int32_t global_rank) const {
  if (members_.empty()) return global_rank;
  return static_cast<int>(std::lower_bound(members_.begin(), members_.end(), global_rank) -
                          members_.begin());
}

void Executor::broadcast(std::vector<Work*>& bucket) {
  const TensorSpec& s = bucket.front()->response.spec;
  const int root_rank = comm_rank_of(s.root);
  const bool root = rank_ == root_rank;
  for (Work* w : bucket)
    if (root && w->entry->input != w->entry->output)
      std::memcpy(w->entry->output, w->entry->input, tensor_bytes(w->response.spec));
  std::vector<Segment> segments;
  for (Work* w : bucket)
    segments.push_back({w->entry->output, w->entry->output, w->response.spec.num_elements(), 1.0,
                        s.dtype});
  if (backend_.broadcast_segments(segments, s.dtype, root_rank)) {
    for (Work* w : bucket) complete(*w);
    return;
  }
  if (bucket.size() == 1) {
    backend_.broadcast(bucket.front()->entry->output, s.num_elements(), s.dtype, root_rank);
    return complete(*bucket.front());
  }
  char* buf = fusion_buffer(bucket_bytes(bucket));
  const int64_t total = lay_out(bucket, [&](Work& w, int64_t at) {
    if (root) std::memcpy(buf + at, w.entry->output, tensor_bytes(w.response.spec));
  });
  mark_copied_in();
  backend_.broadcast(buf, total / dtype_size(s.dtype), s.dtype, root_rank);
  mark_reduced();
  lay_out(bucket, [&](Work& w, int64_t at) {
    if (!root) std::memcpy(w.entry->output, buf + at, tensor_bytes(w.response.spec));
    complete(w);
  });
}

}  // namespace fuseopt
