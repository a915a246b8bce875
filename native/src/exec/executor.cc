#include "exec/executor.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "base/dtype.h"
#include "base/poll_schedule.h"
#include "exec/device_executor.h"
#include "transport/output_pool.h"
#include "policy/fusion_planner.h"
#include "transport/mpi/adasum.h"

namespace fuseopt {
namespace {

// A tensor this large already runs at full bandwidth on its own; fusing it
// would only add two passes over its bytes (copy in, copy out).
constexpr int64_t kSoloBytes = int64_t(1) << 20;

// Tensors may share a bucket only if one collective call can serve them all:
// the key holds the fields that must match, as raw bytes (scale factors by
// their exact bits). Built per tensor per round, so no stream formatting.
std::string fusion_key(const TensorSpec& s) {
  if (tensor_bytes(s) >= kSoloBytes) return "";
  struct Key {
    int32_t device, collective, dtype, reduce_op;
    double prescale, postscale;
    int32_t root, unused;
  } k;
  std::memset(&k, 0, sizeof k);  // no stray padding bytes in the key
  k.device = s.device;
  k.collective = s.collective;
  k.dtype = s.dtype;
  switch (s.collective) {
    case FUSEOPT_REDUCE:
      k.root = s.root;  // and the rest as an allreduce
      [[fallthrough]];
    case FUSEOPT_ALLREDUCE:
      k.reduce_op = s.reduce_op;
      k.prescale = s.prescale;
      k.postscale = s.postscale;
      break;
    case FUSEOPT_BROADCAST:
      k.root = s.root;
      break;
    default: return "";
  }
  return std::string(reinterpret_cast<const char*>(&k), sizeof k);
}

}  // namespace

double Executor::postscale_of(const TensorSpec& spec) const {
  // Integer averages divide exactly afterwards (finish_average) instead.
  return spec.reduce_op == FUSEOPT_AVERAGE && is_floating(spec.dtype) ? spec.postscale / size_
                                                                      : spec.postscale;
}

void Executor::finish_average(const TensorSpec& spec, void* buf, int64_t count) const {
  if (spec.reduce_op == FUSEOPT_AVERAGE && !is_floating(spec.dtype))
    divide_integers(spec.dtype, buf, count, size_);
}

char* Executor::fusion_buffer(int64_t bytes) {
  if ((int64_t)fusion_buffer_.size() < bytes) fusion_buffer_.resize(bytes);
  return fusion_buffer_.data();
}

void Executor::fail(Work& w, fuseopt_status_t status, const std::string& message) {
  if (w.entry && w.entry->handle) handles_.complete(w.entry->handle, Outcome{status, message});
}

void Executor::complete(Work& w, OwnedOutput output) {
  if (w.entry && w.entry->handle) completed_.push_back({w.entry->handle, std::move(output)});
  else output_free(output.data);
}

void Executor::release_completed() {
  for (auto& c : completed_) handles_.complete(c.first, Outcome(), std::move(c.second));
  completed_.clear();
}

void Executor::run(std::vector<Work>& work) {
  // Stand-in entries for responses this rank only takes part in as joined.
  std::vector<Entry> stand_ins;
  std::vector<std::vector<char>> buffers;
  stand_ins.reserve(work.size());
  buffers.reserve(work.size());
  std::vector<Work*> runnable;
  std::vector<PlanItem> items;
  for (Work& w : work) {
    if (w.response.is_error()) {
      if (w.entry) handles_.complete(w.entry->handle,
                                     Outcome{w.response.error, w.response.error_message});
      continue;
    }
    if (!w.entry) {
      Entry e;
      e.spec = w.response.spec;
      if (e.spec.first_dim_may_differ() && !e.spec.shape.empty()) e.spec.shape[0] = 0;
      e.splits.assign(size_, 0);
      buffers.emplace_back(std::max<int64_t>(tensor_bytes(e.spec), 1));
      fill_identity(e.spec.dtype, e.spec.reduce_op, buffers.back().data(),
                    e.spec.num_elements());
      e.input = e.output = buffers.back().data();
      e.stand_in = true;
      stand_ins.push_back(std::move(e));
      w.entry = &stand_ins.back();
    }
    runnable.push_back(&w);
    items.push_back({fusion_key(w.response.spec), tensor_bytes(w.response.spec)});
  }
  const double responded = now_s();
  for (const Bucket& b : plan_buckets(items, fusion_threshold_)) {
    std::vector<Work*> bucket;
    int64_t bytes = 0;
    for (size_t i : b) {
      bucket.push_back(runnable[i]);
      bytes += items[i].bytes;
    }
    const double begin = now_s();
    copied_in_s_ = reduced_s_ = 0;
    try {
      run_bucket(bucket);
    } catch (...) {
      release_completed();  // what finished before the failure did finish
      throw;
    }
    const double end = now_s();
    if (timeline_.on()) trace_bucket(bucket, bytes, responded, begin, end);
    ++buckets_run_;
    metrics_.add(metrics_.execution_ns, static_cast<int64_t>((end - begin) * 1e9));
    metrics_.add(metrics_.collectives, 1);
    metrics_.add(metrics_.tensors, static_cast<int64_t>(bucket.size()));
    metrics_.add(metrics_.bytes, bytes);
    release_completed();  // last: a waiter sees the counters and the trace
  }
  for (Work* w : runnable)
    if (w->entry >= stand_ins.data() && w->entry < stand_ins.data() + stand_ins.size())
      w->entry = nullptr;
}

void Executor::trace_bucket(const std::vector<Work*>& bucket, int64_t bytes, double responded_s,
                            double begin_s, double end_s) {
  // Upper case like the other phases (and Horovod's timeline): ALLREDUCE, ...
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names;
    for (int c = 0; c < FUSEOPT_COLLECTIVE_COUNT; ++c) {
      std::string n = fuseopt_collective_name(c);
      for (char& ch : n) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      names.push_back(n);
    }
    return names;
  }();
  const char* collective = kNames[bucket.front()->response.spec.collective].c_str();
  for (const Work* w : bucket) {
    if (w->entry->stand_in) continue;  // a joined rank's placeholder
    const std::string& name = w->response.spec.name;
    const std::string args = "\"bucket\": " + std::to_string(buckets_run_) +
                             ", \"bucket_tensors\": " + std::to_string(bucket.size()) +
                             ", \"bucket_bytes\": " + std::to_string(bytes) +
                             ", \"bytes\": " + std::to_string(tensor_bytes(w->response.spec));
    timeline_.span(name, "NEGOTIATE", w->entry->enqueued_s, responded_s, args);
    timeline_.span(name, "QUEUE", responded_s, begin_s, args);
    if (copied_in_s_ > 0) {
      timeline_.span(name, "MEMCPY_IN_FUSION_BUFFER", begin_s, copied_in_s_, args);
      timeline_.span(name, collective, copied_in_s_, reduced_s_, args);
      timeline_.span(name, "MEMCPY_OUT_FUSION_BUFFER", reduced_s_, end_s, args);
    } else {
      timeline_.span(name, collective, begin_s, end_s, args);
    }
  }
}

void Executor::enable_devices(const MpiWorld& world, bool hierarchical) {
  devices_ = std::make_shared<DeviceExecutor>(
      backend_, handles_, world, hierarchical,
      [this](Work& w, OwnedOutput out) { complete(w, std::move(out)); });
}

void Executor::run_bucket(std::vector<Work*>& bucket) {
  if (bucket.front()->response.spec.device != FUSEOPT_DEVICE_HOST) {
    if (!devices_) throw Error(FUSEOPT_INTERNAL, "executor: device tensors without devices");
    return devices_->run(bucket);
  }
  switch (bucket.front()->response.spec.collective) {
    case FUSEOPT_ALLREDUCE: return allreduce(bucket);
    case FUSEOPT_REDUCE: return reduce(bucket);
    case FUSEOPT_BROADCAST: return broadcast(bucket);
    case FUSEOPT_ALLGATHER: return allgather(*bucket.front());
    case FUSEOPT_ALLTOALL: return alltoall(*bucket.front());
    case FUSEOPT_REDUCESCATTER: return reducescatter(*bucket.front());
    case FUSEOPT_BARRIER:
      backend_.barrier();
      return complete(*bucket.front());
    default: throw Error(FUSEOPT_INTERNAL, "executor: unexpected collective");
  }
}

void Executor::adasum(std::vector<Work*>& bucket) {
  const TensorSpec& s = bucket.front()->response.spec;
  const char* why = nullptr;
  if (!adasum_supported(size_, &why)) {  // the same answer on every rank
    for (Work* w : bucket)
      fail(*w, FUSEOPT_UNSUPPORTED, std::string(why) + " (allreduce '" + w->response.spec.name +
                                        "' on " + std::to_string(size_) + " ranks, dtype " +
                                        fuseopt_dtype_name(s.dtype) + ")");
    return;
  }
  std::vector<int64_t> counts;
  char* buf = fusion_buffer(bucket_bytes(bucket));
  lay_out(bucket, [&](Work& w, int64_t at) {  // Adasum is not linear: prescale first
    const TensorSpec& t = w.response.spec;
    scale_copy(t.dtype, w.entry->input, buf + at, t.num_elements(),
               w.entry->stand_in ? 1.0 : t.prescale);
    counts.push_back(t.num_elements());
  });
  mark_copied_in();
  backend_.adasum(buf, counts, s.dtype);
  mark_reduced();
  lay_out(bucket, [&](Work& w, int64_t at) {
    const TensorSpec& t = w.response.spec;
    scale_copy(t.dtype, buf + at, w.entry->output, t.num_elements(), t.postscale);
    complete(w);
  });
}

void Executor::allreduce(std::vector<Work*>& bucket) {
  const TensorSpec& s = bucket.front()->response.spec;
  if (s.reduce_op == FUSEOPT_ADASUM) return adasum(bucket);
  const double post = postscale_of(s);
  bool narrowed = false;
  const std::vector<Segment> segments = segments_of(bucket, &narrowed);
  if (backend_.allreduce_segments(segments, s.dtype, s.reduce_op, post)) {
    for (Work* w : bucket) {
      finish_average(s, w->entry->output, w->response.spec.num_elements());
      complete(*w);
    }
    return;
  }
  if (bucket.size() == 1 && !narrowed) {
    // No fusion buffer: reduce straight into the caller's output.
    Entry& e = *bucket.front()->entry;
    const int64_t n = s.num_elements();
    const void* send = e.input;
    if (s.prescale != 1.0 && !e.stand_in) {  // an identity value stays the identity
      scale_copy(s.dtype, e.input, e.output, n, s.prescale);
      send = e.output;
    }
    backend_.allreduce(send, e.output, n, s.dtype, s.reduce_op);
    if (post != 1.0) scale_copy(s.dtype, e.output, e.output, n, post);
    finish_average(s, e.output, n);
    return complete(*bucket.front());
  }
  // The fusion buffer holds what travels: a narrowed tensor is rounded on
  // its way in and widened on its way out.
  char* buf = fusion_buffer(bucket_bytes(bucket));
  const int64_t total = lay_out(bucket, [&](Work& w, int64_t at) {
    const TensorSpec& t = w.response.spec;
    convert_copy(w.entry->memory_dtype(), w.entry->input, t.dtype, buf + at, t.num_elements(),
                 w.entry->stand_in ? 1.0 : t.prescale);
  });
  mark_copied_in();
  backend_.allreduce(buf, buf, total / dtype_size(s.dtype), s.dtype, s.reduce_op);
  mark_reduced();
  lay_out(bucket, [&](Work& w, int64_t at) {
    const TensorSpec& t = w.response.spec;
    convert_copy(t.dtype, buf + at, w.entry->memory_dtype(), w.entry->output, t.num_elements(),
                 post);
    finish_average(t, w.entry->output, t.num_elements());
    complete(w);
  });
}

std::vector<Segment> Executor::segments_of(const std::vector<Work*>& bucket,
                                           bool* narrowed) const {
  const TensorSpec& s = bucket.front()->response.spec;
  std::vector<Segment> segments;
  segments.reserve(bucket.size());
  for (Work* w : bucket) {  // an identity value stays the identity: no prescale
    segments.push_back({w->entry->input, w->entry->output, w->response.spec.num_elements(),
                        w->entry->stand_in ? 1.0 : s.prescale, w->entry->memory_dtype()});
    *narrowed = *narrowed || w->entry->narrowed;
  }
  return segments;
}

void Executor::allgather(Work& w) {
  const TensorSpec& s = w.response.spec;
  const int64_t row_bytes = s.row_elements() * dtype_size(s.dtype);
  OwnedOutput out;
  out.recv_splits = w.response.first_dims;
  std::vector<int64_t> recv_bytes(size_);
  for (int r = 0; r < size_; ++r) {
    recv_bytes[r] = out.recv_splits[r] * row_bytes;
    out.first_dim += out.recv_splits[r];
  }
  out.nbytes = out.first_dim * row_bytes;
  out.data = output_alloc(out.nbytes);
  if (!backend_.all_ok(out.data != nullptr)) {
    output_free(out.data);
    return fail(w, FUSEOPT_INTERNAL, "allgather of '" + s.name + "': a rank could not allocate " +
                                         "the result (out of memory)");
  }
  try {
    backend_.allgatherv(w.entry->input, recv_bytes[rank_], out.data, recv_bytes);
  } catch (...) {
    output_free(out.data);
    throw;
  }
  complete(w, std::move(out));
}

void Executor::alltoall(Work& w) {
  const TensorSpec& s = w.response.spec;
  const int64_t row_bytes = s.row_elements() * dtype_size(s.dtype);
  const std::vector<int64_t> send_rows = alltoall_send_rows(*w.entry, size_);
  OwnedOutput out;
  backend_.alltoall_counts(send_rows, &out.recv_splits);
  std::vector<int64_t> send_bytes(size_), recv_bytes(size_);
  for (int r = 0; r < size_; ++r) {
    send_bytes[r] = send_rows[r] * row_bytes;
    recv_bytes[r] = out.recv_splits[r] * row_bytes;
    out.first_dim += out.recv_splits[r];
  }
  out.nbytes = out.first_dim * row_bytes;
  // Only this rank knows its own byte counts: agree before the collective.
  const bool fits = backend_.fits(send_bytes, recv_bytes);
  out.data = fits ? output_alloc(out.nbytes) : nullptr;
  if (!backend_.all_ok(out.data != nullptr)) {
    output_free(out.data);
    return fail(w, FUSEOPT_UNSUPPORTED,
                "alltoall of '" + s.name + "': a rank's data exceeds 2 GiB in one call or "
                "could not be allocated");
  }
  try {
    backend_.alltoallv(w.entry->input, send_bytes, out.data, recv_bytes);
  } catch (...) {
    output_free(out.data);
    throw;
  }
  complete(w, std::move(out));
}

void Executor::reducescatter(Work& w) {
  const TensorSpec& s = w.response.spec;
  const std::vector<int64_t> counts = reducescatter_counts(s, size_);
  const void* send = w.entry->input;
  if (s.prescale != 1.0 || send == w.entry->output) {  // MPI forbids aliased buffers
    char* buf = fusion_buffer(tensor_bytes(s));
    scale_copy(s.dtype, w.entry->input, buf, s.num_elements(),
               w.entry->stand_in ? 1.0 : s.prescale);
    send = buf;
  }
  backend_.reducescatter(send, w.entry->output, counts, s.dtype, s.reduce_op);
  const double post = postscale_of(s);
  if (post != 1.0) scale_copy(s.dtype, w.entry->output, w.entry->output, counts[rank_], post);
  finish_average(s, w.entry->output, counts[rank_]);
  complete(w);
}

}  // namespace fuseopt
