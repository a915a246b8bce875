#include "exec/device_executor.h"

#include <cstring>

#include "base/dtype.h"
#include "transport/mpi/mpi_world.h"

namespace fuseopt {
namespace {

const char* device_name(fuseopt_device_t d) {
  return d == FUSEOPT_DEVICE_CUDA ? "cuda" : d == FUSEOPT_DEVICE_NPU ? "npu" : "host";
}

}  // namespace

DeviceExecutor::DeviceExecutor(Backend& host, HandleTable& handles, const MpiWorld& world,
                               bool hierarchical, CompleteFn complete)
    : host_(host), handles_(handles), complete_(std::move(complete)), world_(world),
      hierarchical_(hierarchical),
      rank_(world.info().rank), size_(world.info().size) {}

void DeviceExecutor::run(std::vector<Work*>& bucket) {
  DeviceBackend* b = backend_for(bucket);
  if (!b || !prepare(*b, bucket)) return;
  switch (bucket.front()->response.spec.collective) {
    case FUSEOPT_ALLREDUCE: allreduce(*b, bucket); break;
    case FUSEOPT_BROADCAST: broadcast(*b, bucket); break;
    case FUSEOPT_ALLGATHER: allgather(*b, *bucket.front()); break;
    case FUSEOPT_ALLTOALL: alltoall(*b, *bucket.front()); break;
    case FUSEOPT_REDUCESCATTER: reducescatter(*b, *bucket.front()); break;
    default: throw Error(FUSEOPT_INTERNAL, "device executor: unexpected collective");
  }
  for (void* p : temporaries_) b->release(p);  // the bucket has synchronized
  temporaries_.clear();
}

// One device per kind per rank: a fusion plan is the same on every rank, so
// it cannot depend on a rank's own device indices.
std::string DeviceExecutor::check_device(const std::vector<Work*>& bucket, int* device_id) {
  const fuseopt_device_t kind = bucket.front()->response.spec.device;
  const int bound = backends_.bound_device(kind);
  *device_id = -1;
  for (const Work* w : bucket) {
    if (w->entry->stand_in) continue;
    if (*device_id >= 0 && w->entry->device_id != *device_id)
      return "tensors of one round are on different devices";
    *device_id = w->entry->device_id;
  }
  if (*device_id < 0) *device_id = bound >= 0 ? bound : 0;  // joined: no tensor of its own
  if (bound >= 0 && bound != *device_id)
    return std::string("tensor on ") + device_name(kind) + ":" + std::to_string(*device_id) +
           ", but this rank already reduces on " + device_name(kind) + ":" +
           std::to_string(bound) + "; fuseopt uses one device per rank";
  return "";
}

DeviceBackend* DeviceExecutor::backend_for(std::vector<Work*>& bucket) {
  const TensorSpec& s = bucket.front()->response.spec;
  int device_id = 0;
  std::string error = check_device(bucket, &device_id);
  DeviceBackendFactory* factory = nullptr;
  if (error.empty() && !backends_.find(s.device, device_id)) {
    const std::string name = backend_name_for(s.device);
    try {
      auto it = opened_.find(name);
      if (it == opened_.end()) it = opened_.emplace(name, open_device_backend(name)).first;
      factory = it->second.get();
    } catch (const Error& e) {
      error = e.what();
    }
  }
  error = first_error_everywhere(host_, size_, error);
  if (!error.empty()) {
    fail(bucket, FUSEOPT_UNSUPPORTED,
         std::string(fuseopt_collective_name(s.collective)) + " of '" + s.name + "' on " +
             device_name(s.device) + " failed on " + error);
    return nullptr;
  }
  // Every rank gets here together: connecting (collective) is safe. It
  // throws the same error on every rank if it fails.
  if (factory) {
    DeviceSetup setup;
    setup.device_id = device_id;
    setup.rank = world_.info().rank;
    setup.size = world_.info().size;
    setup.host = &host_;
    setup.world = &world_;
    setup.hierarchical = hierarchical_;
    backends_.add(s.device, device_id, factory->connect(setup));
  }
  DeviceBackend* b = backends_.find(s.device, device_id);
  b->activate();
  return b;
}

// Stand-ins (a joined rank's identity values) live in host memory: upload
// them. Real inputs: our stream waits for the framework's. Only uploads can
// fail here, and only when some rank has joined, which every rank can see
// in the responses: the agreement is skipped, on every rank, otherwise.
bool DeviceExecutor::prepare(DeviceBackend& b, std::vector<Work*>& bucket) {
  bool anyone_joined = false;
  for (const Work* w : bucket) anyone_joined = anyone_joined || !w->response.joined.empty();
  std::string error;
  void* last_stream = nullptr;
  void* last_event = nullptr;
  bool waited = false;
  for (Work* w : bucket) {
    Entry& e = *w->entry;
    if (e.stand_in) {
      const int64_t bytes = tensor_bytes(e.spec);
      try {
        void* dev = b.allocate(bytes);
        temporaries_.push_back(dev);
        b.upload(dev, e.input, bytes);
        e.input = e.output = dev;
      } catch (const Error& x) {
        error = x.what();
      }
      continue;
    }
    if (waited && e.stream == last_stream && e.ready_event == last_event) continue;
    b.wait_for(e.stream, e.ready_event);
    waited = true;
    last_stream = e.stream;
    last_event = e.ready_event;
  }
  if (!anyone_joined) return true;
  error = first_error_everywhere(host_, size_, error);
  if (error.empty()) return true;
  b.synchronize();  // the uploads may still read the stand-ins' host memory
  for (void* p : temporaries_) b.release(p);
  temporaries_.clear();
  fail(bucket, FUSEOPT_BACKEND, "could not allocate device memory on " + error);
  return false;
}

// Every rank plans the same buckets, so every rank's fusion buffer has the
// same size: all of them grow (and agree) in the same buckets, or none does.
void* DeviceExecutor::agreed_buffer(DeviceBackend& b, int64_t bytes,
                                    std::vector<Work*>& bucket) {
  if (bytes <= b.fusion_capacity()) return b.fusion_buffer(bytes);
  std::string error;
  void* buf = nullptr;
  try {
    buf = b.fusion_buffer(bytes);
  } catch (const Error& e) {
    error = e.what();
  }
  error = first_error_everywhere(host_, size_, error);
  if (error.empty()) return buf;
  fail(bucket, FUSEOPT_BACKEND, "could not allocate the device fusion buffer on " + error);
  return nullptr;
}

// Allreduce. Scale factors, in order of preference:
//  1. none (factor 1, not an average): one plain collective;
//  2. the library applies them (NCCL: ncclAvg, pre-multiplied sum for
//     floating SUM/AVERAGE): prescale * postscale folded into one factor;
//  3. otherwise through host memory (staged_allreduce): HCCL always, and
//     integers, MIN/MAX/PRODUCT with factors on NCCL. Exact, like the host
//     path, at the cost of a download and an upload of the bucket.
void DeviceExecutor::allreduce(DeviceBackend& b, std::vector<Work*>& bucket) {
  const TensorSpec& s = bucket.front()->response.spec;
  const double factor = s.prescale * s.postscale;
  const bool plain = factor == 1.0 && s.reduce_op != FUSEOPT_AVERAGE;
  if (bucket.size() == 1) {  // no fusion buffer unless staging needs one
    Entry& e = *bucket.front()->entry;
    const int64_t n = s.num_elements();
    bool done = plain;
    if (plain) b.allreduce(e.input, e.output, n, s.dtype, s.reduce_op);
    else done = b.allreduce_scaled(e.input, e.output, n, s.dtype, s.reduce_op, factor);
    if (done) {
      b.synchronize();
      return complete(*bucket.front());
    }
  }
  const int64_t total = bucket_bytes(bucket);
  char* buf = static_cast<char*>(agreed_buffer(b, total, bucket));
  if (!buf) return;
  lay_out(bucket, [&](Work& w, int64_t at) {
    b.copy(buf + at, w.entry->input, tensor_bytes(w.response.spec));
  });
  const int64_t count = total / dtype_size(s.dtype);
  if (plain) b.allreduce(buf, buf, count, s.dtype, s.reduce_op);
  else if (!b.allreduce_scaled(buf, buf, count, s.dtype, s.reduce_op, factor))
    staged_allreduce(b, bucket, buf, total);
  lay_out(bucket, [&](Work& w, int64_t at) {
    b.copy(w.entry->output, buf + at, tensor_bytes(w.response.spec));
  });
  b.synchronize();
  for (Work* w : bucket) complete(*w);
}

void DeviceExecutor::staged_allreduce(DeviceBackend& b, std::vector<Work*>& bucket, char* buf,
                                      int64_t total) {
  const TensorSpec& s = bucket.front()->response.spec;
  if (s.prescale != 1.0) {
    staging_.resize(total);
    b.download(staging_.data(), buf, total);
    b.synchronize();
    lay_out(bucket, [&](Work& w, int64_t at) {
      const TensorSpec& t = w.response.spec;
      if (!w.entry->stand_in)  // an identity value stays the identity
        scale_copy(t.dtype, staging_.data() + at, staging_.data() + at, t.num_elements(),
                   t.prescale);
    });
    b.upload(buf, staging_.data(), total);
  }
  const bool average = s.reduce_op == FUSEOPT_AVERAGE;
  b.allreduce(buf, buf, total / dtype_size(s.dtype), s.dtype, average ? FUSEOPT_SUM : s.reduce_op);
  scale_through_host(b, buf, s, total / dtype_size(s.dtype), s.postscale, average);
}

void DeviceExecutor::scale_through_host(DeviceBackend& b, void* buf, const TensorSpec& s,
                                        int64_t count, double factor, bool average) {
  // A floating average multiplies by 1/size; an integer one divides exactly.
  const bool divide = average && !is_floating(s.dtype);
  if (average && is_floating(s.dtype)) factor /= size_;
  if (factor == 1.0 && !divide) return;
  const int64_t bytes = count * dtype_size(s.dtype);
  staging_.resize(bytes);
  b.download(staging_.data(), buf, bytes);
  b.synchronize();
  if (factor != 1.0) scale_copy(s.dtype, staging_.data(), staging_.data(), count, factor);
  if (divide) divide_integers(s.dtype, staging_.data(), count, size_);
  b.upload(buf, staging_.data(), bytes);  // ordered before whatever reads buf next
}

void DeviceExecutor::broadcast(DeviceBackend& b, std::vector<Work*>& bucket) {
  const TensorSpec& s = bucket.front()->response.spec;
  const bool root = rank_ == s.root;
  if (root)
    for (Work* w : bucket) b.copy(w->entry->output, w->entry->input, tensor_bytes(w->response.spec));
  if (bucket.size() == 1) {
    b.broadcast(bucket.front()->entry->output, s.num_elements(), s.dtype, s.root);
  } else {
    const int64_t total = bucket_bytes(bucket);
    char* buf = static_cast<char*>(agreed_buffer(b, total, bucket));
    if (!buf) return;
    lay_out(bucket, [&](Work& w, int64_t at) {
      if (root) b.copy(buf + at, w.entry->output, tensor_bytes(w.response.spec));
    });
    b.broadcast(buf, total / dtype_size(s.dtype), s.dtype, s.root);
    lay_out(bucket, [&](Work& w, int64_t at) {
      if (!root) b.copy(w.entry->output, buf + at, tensor_bytes(w.response.spec));
    });
  }
  b.synchronize();
  for (Work* w : bucket) complete(*w);
}

OwnedOutput DeviceExecutor::agreed_output(DeviceBackend& b, Work& w, int64_t bytes, bool* ok) {
  OwnedOutput out;
  out.device = w.response.spec.device;
  out.nbytes = bytes;
  std::string error;
  try {
    out.data = b.allocate(bytes);
  } catch (const Error& e) {
    error = e.what();
  }
  error = first_error_everywhere(host_, size_, error);
  *ok = error.empty();
  if (!*ok) {
    if (out.data) b.release(out.data);
    out.data = nullptr;
    std::vector<Work*> one{&w};
    fail(one, FUSEOPT_BACKEND, "could not allocate the result on " + error);
  }
  return out;
}

void DeviceExecutor::allgather(DeviceBackend& b, Work& w) {
  const TensorSpec& s = w.response.spec;
  const int64_t row_bytes = s.row_elements() * dtype_size(s.dtype);
  std::vector<int64_t> recv_bytes(size_);
  int64_t rows = 0, total = 0;
  for (int r = 0; r < size_; ++r) {
    recv_bytes[r] = w.response.first_dims[r] * row_bytes;
    rows += w.response.first_dims[r];
    total += recv_bytes[r];
  }
  bool ok = false;
  OwnedOutput out = agreed_output(b, w, total, &ok);
  if (!ok) return;
  out.first_dim = rows;
  out.recv_splits = w.response.first_dims;
  b.allgatherv(w.entry->input, recv_bytes[rank_], out.data, recv_bytes);
  b.synchronize();
  complete(w, std::move(out));
}

void DeviceExecutor::alltoall(DeviceBackend& b, Work& w) {
  const TensorSpec& s = w.response.spec;
  const int64_t row_bytes = s.row_elements() * dtype_size(s.dtype);
  const std::vector<int64_t> send_rows = alltoall_send_rows(*w.entry, size_);
  std::vector<int64_t> recv_rows;
  host_.alltoall_counts(send_rows, &recv_rows);  // row counts travel over MPI
  std::vector<int64_t> send_bytes(size_), recv_bytes(size_);
  int64_t rows = 0, total = 0;
  for (int r = 0; r < size_; ++r) {
    send_bytes[r] = send_rows[r] * row_bytes;
    recv_bytes[r] = recv_rows[r] * row_bytes;
    rows += recv_rows[r];
    total += recv_bytes[r];
  }
  bool ok = false;
  OwnedOutput out = agreed_output(b, w, total, &ok);
  if (!ok) return;
  out.first_dim = rows;
  out.recv_splits = recv_rows;
  b.alltoallv(w.entry->input, send_bytes, out.data, recv_bytes);
  b.synchronize();
  complete(w, std::move(out));
}

// With equal parts and no factor (or factors the library applies: NCCL's
// average and pre-multiplied sum), one native reduce-scatter from the input.
// Otherwise the whole tensor is reduced in the fusion buffer, factors going
// through host memory, and this rank keeps its rows: with a native
// reduce-scatter when parts are equal, else an allreduce and a copy of the
// slice (NCCL and HCCL take one count for all ranks).
void DeviceExecutor::reducescatter(DeviceBackend& b, Work& w) {
  const TensorSpec& s = w.response.spec;
  const int64_t esize = dtype_size(s.dtype);
  const std::vector<int64_t> counts = reducescatter_counts(s, size_);
  int64_t mine_offset = 0;
  bool even = true;
  for (int r = 0; r < size_; ++r) {
    if (r < rank_) mine_offset += counts[r];
    even = even && counts[r] == counts[0];
  }
  const double factor = s.prescale * s.postscale;
  const bool plain = factor == 1.0 && s.reduce_op != FUSEOPT_AVERAGE;
  if (even) {  // buffers never alias here: see take_device
    bool done = plain;
    if (plain) b.reducescatter(w.entry->input, w.entry->output, counts, s.dtype, s.reduce_op);
    else done = b.reducescatter_scaled(w.entry->input, w.entry->output, counts, s.dtype,
                                       s.reduce_op, factor);
    if (done) {
      b.synchronize();
      return complete(w);
    }
  }
  std::vector<Work*> one{&w};
  char* buf = static_cast<char*>(agreed_buffer(b, tensor_bytes(s), one));
  if (!buf) return;
  b.copy(buf, w.entry->input, tensor_bytes(s));
  if (s.prescale != 1.0 && !w.entry->stand_in)
    scale_through_host(b, buf, s, s.num_elements(), s.prescale, false);
  const bool average = s.reduce_op == FUSEOPT_AVERAGE;
  const fuseopt_reduce_op_t op = average ? FUSEOPT_SUM : s.reduce_op;
  if (even) {
    b.reducescatter(buf, w.entry->output, counts, s.dtype, op);
  } else {
    b.allreduce(buf, buf, s.num_elements(), s.dtype, op);
    b.copy(w.entry->output, buf + mine_offset * esize, counts[rank_] * esize);
  }
  scale_through_host(b, w.entry->output, s, counts[rank_], s.postscale, average);
  b.synchronize();
  complete(w);
}

void DeviceExecutor::complete(Work& w, OwnedOutput output) {
  if (w.entry && w.entry->handle) complete_(w, std::move(output));
  else free_memory(output.device, output.data);  // a joined rank's result
}

void DeviceExecutor::fail(std::vector<Work*>& bucket, fuseopt_status_t status,
                          const std::string& message) {
  for (Work* w : bucket)
    if (w->entry && w->entry->handle) handles_.complete(w->entry->handle, Outcome{status, message});
}

}  // namespace fuseopt
