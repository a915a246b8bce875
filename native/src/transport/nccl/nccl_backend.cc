// NCCL backend. Vocabulary: the *stream* is this backend's own CUDA stream;
// every copy and collective is enqueued on it, after a wait on the
// framework's stream (wait_for), so device tensors are reduced only once the
// kernels that produced them have run. synchronize() polls the stream and,
// while it is busy, NCCL's asynchronous error: a peer that died makes NCCL
// report ncclRemoteError / ncclSystemError here, and the communicator is
// aborted rather than waited on forever.
#include "transport/nccl/nccl_backend.h"

#include <climits>
#include <string>

#include "base/common.h"
#include "base/dtype.h"
#include "base/log.h"
#include "base/poll_schedule.h"
#include "transport/mpi/mpi_world.h"
#include "transport/nccl/nccl_api.h"

namespace fuseopt {
namespace {

class NcclBackend : public DeviceBackend {
 public:
  NcclBackend(std::shared_ptr<nccl::Libraries> libs, const DeviceSetup& setup)
      : libs_(std::move(libs)), cuda_(libs_->cuda), nccl_(libs_->nccl), setup_(setup) {}
  ~NcclBackend() override;
  const char* name() const override { return "nccl"; }
  void connect();

  void activate() override { cuda_check(cuda_.cudaSetDevice(setup_.device_id), "cudaSetDevice"); }
  void* allocate(int64_t bytes) override;
  void release(void* p) override { cuda_.cudaFree(p); }
  void copy(void* dst, const void* src, int64_t bytes) override {
    memcpy_async(dst, src, bytes, cuda::kDeviceToDevice);
  }
  void upload(void* dst, const void* host, int64_t bytes) override {
    memcpy_async(dst, host, bytes, cuda::kHostToDevice);
  }
  void download(void* host, const void* src, int64_t bytes) override {
    memcpy_async(host, src, bytes, cuda::kDeviceToHost);
  }
  void wait_for(void* stream, void* event) override;
  void synchronize() override;

  void allreduce(const void* send, void* recv, int64_t count, fuseopt_dtype_t dtype,
                 fuseopt_reduce_op_t op) override;
  bool allreduce_scaled(const void* send, void* recv, int64_t count, fuseopt_dtype_t dtype,
                        fuseopt_reduce_op_t op, double factor) override;
  bool reducescatter_scaled(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                            fuseopt_dtype_t dtype, fuseopt_reduce_op_t op,
                            double factor) override;
  void broadcast(void* buf, int64_t count, fuseopt_dtype_t dtype, int root) override;
  void allgatherv(const void* send, int64_t send_bytes, void* recv,
                  const std::vector<int64_t>& recv_bytes) override;
  void alltoallv(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                 const std::vector<int64_t>& recv_bytes) override;
  void reducescatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                     fuseopt_dtype_t dtype, fuseopt_reduce_op_t op) override;

 private:
  void memcpy_async(void* dst, const void* src, int64_t bytes, int kind);
  void connect_node();
  int scaled_op(fuseopt_dtype_t dtype, fuseopt_reduce_op_t op, double factor, bool* created);
  void check_async(nccl::Comm comm);
  void check(nccl::Result r, const char* what) const;
  void cuda_check(cuda::Error e, const char* what) const;
  std::string where() const { return "cuda:" + std::to_string(setup_.device_id); }

  std::shared_ptr<nccl::Libraries> libs_;
  const cuda::Api& cuda_;
  const nccl::Api& nccl_;
  DeviceSetup setup_;
  int rank_ = 0, size_ = 1;
  nccl::Comm comm_ = nullptr;
  // FUSEOPT_HIERARCHICAL_ALLREDUCE on several nodes of several ranks: a
  // second communicator of this node's ranks; allreduce is then an NCCL
  // reduce to the node's leader, an MPI allreduce among the leaders (in host
  // memory), and an NCCL broadcast from the leader.
  bool hierarchical_ = false;
  nccl::Comm node_comm_ = nullptr;
  std::vector<char> staging_;  // the leader's host copy
  void* stream_ = nullptr;
  void* marker_ = nullptr;  // recorded on a framework stream that gave no event
};

void NcclBackend::check(nccl::Result r, const char* what) const {
  if (r == nccl::kSuccess) return;
  throw Error(FUSEOPT_BACKEND, std::string(what) + " failed on " + where() + ": " +
                                   nccl_.ncclGetErrorString(r) + " (ncclResult_t " +
                                   std::to_string(r) + ")");
}

void NcclBackend::cuda_check(cuda::Error e, const char* what) const {
  if (e == cuda::kSuccess) return;
  throw Error(FUSEOPT_BACKEND, std::string(what) + " failed on " + where() + ": " +
                                   cuda_.cudaGetErrorString(e) + " (cudaError_t " +
                                   std::to_string(e) + ")");
}

// Collective over all ranks. Rank 0 makes the unique id and broadcasts it
// over MPI; every step that can fail on one rank alone is agreed on before
// the next collective step, so a failure is an error everywhere, not a hang.
void NcclBackend::connect() {
  const fuseopt_comm_info_t& info = setup_.world->info();
  rank_ = info.rank;
  size_ = info.size;
  Backend& host = *setup_.host;
  std::string error;
  nccl::UniqueId id{};
  try {
    activate();
    if (rank_ == 0) check(nccl_.ncclGetUniqueId(&id), "ncclGetUniqueId");
  } catch (const Error& e) {
    error = e.what();
  }
  std::string agreed = first_error_everywhere(host, size_, error);
  if (!agreed.empty()) throw Error(FUSEOPT_BACKEND, "NCCL set-up failed on " + agreed);
  host.broadcast(&id, sizeof(id), FUSEOPT_UINT8, 0);
  nccl::Result r = nccl_.ncclCommInitRank(&comm_, size_, id, rank_);
  try {
    check(r, "ncclCommInitRank");
    cuda_check(cuda_.cudaStreamCreateWithFlags(&stream_, cuda::kStreamNonBlocking),
               "cudaStreamCreateWithFlags");
    cuda_check(cuda_.cudaEventCreateWithFlags(&marker_, cuda::kEventDisableTiming),
               "cudaEventCreateWithFlags");
  } catch (const Error& e) {
    error = e.what();
  }
  agreed = first_error_everywhere(host, size_, error);
  if (!agreed.empty()) throw Error(FUSEOPT_BACKEND, "NCCL set-up failed on " + agreed);
  hierarchical_ = setup_.hierarchical && info.cross_size > 1 && info.local_size > 1;
  if (hierarchical_) connect_node();
}

// Collective: each node's leader makes an id and broadcasts it within its node.
void NcclBackend::connect_node() {
  const fuseopt_comm_info_t& info = setup_.world->info();
  nccl::UniqueId id{};
  std::string error;
  if (info.local_rank == 0) {
    nccl::Result r = nccl_.ncclGetUniqueId(&id);
    if (r != nccl::kSuccess) error = std::string("ncclGetUniqueId: ") + nccl_.ncclGetErrorString(r);
  }
  std::string agreed = first_error_everywhere(*setup_.host, size_, error);
  if (!agreed.empty()) throw Error(FUSEOPT_BACKEND, "NCCL node set-up failed on " + agreed);
  mpi_check(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, setup_.world->local_comm()),
            "MPI_Bcast(NCCL node id)");
  nccl::Result r = nccl_.ncclCommInitRank(&node_comm_, info.local_size, id, info.local_rank);
  error = r == nccl::kSuccess ? "" : std::string("ncclCommInitRank(node): ") +
                                         nccl_.ncclGetErrorString(r);
  agreed = first_error_everywhere(*setup_.host, size_, error);
  if (!agreed.empty()) throw Error(FUSEOPT_BACKEND, "NCCL node set-up failed on " + agreed);
  FUSEOPT_LOG(kInfo, "NCCL hierarchical allreduce: NCCL within each node of "
                         << info.local_size << " ranks, MPI among " << info.cross_size
                         << " node leaders");
}

NcclBackend::~NcclBackend() {
  free_fusion_buffer();
  if (marker_) cuda_.cudaEventDestroy(marker_);
  if (stream_) cuda_.cudaStreamDestroy(stream_);
  if (node_comm_) nccl_.ncclCommDestroy(node_comm_);
  if (comm_) nccl_.ncclCommDestroy(comm_);
}

void* NcclBackend::allocate(int64_t bytes) {
  void* p = nullptr;
  cuda_check(cuda_.cudaMalloc(&p, static_cast<size_t>(bytes > 0 ? bytes : 1)), "cudaMalloc");
  return p;
}

void NcclBackend::memcpy_async(void* dst, const void* src, int64_t bytes, int kind) {
  if (bytes <= 0 || dst == src) return;
  cuda_check(cuda_.cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), kind, stream_),
             "cudaMemcpyAsync");
}

void NcclBackend::wait_for(void* stream, void* event) {
  if (!event) {
    // No event from the framework: mark "now" on its stream ourselves.
    cuda_check(cuda_.cudaEventRecord(marker_, stream), "cudaEventRecord");
    event = marker_;
  }
  cuda_check(cuda_.cudaStreamWaitEvent(stream_, event, 0), "cudaStreamWaitEvent");
}

void NcclBackend::synchronize() {
  // Poll rather than block in cudaStreamSynchronize: a collective whose peer
  // has died never finishes, and only NCCL's async error says so.
  poll_until(
      [&] {
        cuda::Error e = cuda_.cudaStreamQuery(stream_);
        if (e == cuda::kSuccess) return true;
        if (e != cuda::kNotReady) cuda_check(e, "cudaStreamQuery");
        check_async(comm_);
        if (node_comm_) check_async(node_comm_);
        return false;
      },
      kStreamPoll);
}

void NcclBackend::check_async(nccl::Comm comm) {
  nccl::Result async = nccl::kSuccess;
  check(nccl_.ncclCommGetAsyncError(comm, &async), "ncclCommGetAsyncError");
  if (async == nccl::kSuccess || async == nccl::kInProgress) return;
  // NCCL's rule after an async error: abort. Both communicators are done for.
  for (nccl::Comm* c : {&comm_, &node_comm_}) {
    if (*c) nccl_.ncclCommAbort(*c);
    *c = nullptr;
  }
  throw Error(FUSEOPT_BACKEND,
              "NCCL reported an asynchronous error on " + where() + ": " +
                  nccl_.ncclGetErrorString(async) + " (ncclResult_t " + std::to_string(async) +
                  "). A peer rank has probably failed or lost its network; the NCCL "
                  "communicator was aborted and fuseopt has stopped on this rank");
}

void NcclBackend::allreduce(const void* send, void* recv, int64_t count, fuseopt_dtype_t dtype,
                            fuseopt_reduce_op_t op) {
  if (!hierarchical_) {
    check(nccl_.ncclAllReduce(send, recv, count, nccl::data_type(dtype), nccl::red_op(op), comm_,
                              stream_),
          "ncclAllReduce");
    return;
  }
  check(nccl_.ncclReduce(send, recv, count, nccl::data_type(dtype), nccl::red_op(op), 0,
                         node_comm_, stream_),
        "ncclReduce(node)");
  if (setup_.world->info().local_rank == 0) {
    if (count > INT_MAX) unsupported("hierarchical allreduce of more than 2^31 elements");
    const int64_t bytes = count * static_cast<int64_t>(dtype_size(dtype));
    staging_.resize(bytes);
    download(staging_.data(), recv, bytes);
    synchronize();
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, staging_.data(), static_cast<int>(count),
                            MpiWorld::datatype(dtype), MpiWorld::op(op, dtype),
                            setup_.world->cross_comm()),
              "MPI_Allreduce(node leaders)");
    upload(recv, staging_.data(), bytes);
  }
  check(nccl_.ncclBroadcast(recv, recv, count, nccl::data_type(dtype), 0, node_comm_, stream_),
        "ncclBroadcast(node)");
}

// The NCCL op that reduces with the result multiplied by factor, or -1 if
// NCCL cannot: integers would round the factor, and ncclAvg's integer
// rounding is not documented, so those go through host memory
// (divide_integers: exact). *created: a pre-multiplied sum made here, to be
// destroyed once the call using it has returned (NCCL allows that).
int NcclBackend::scaled_op(fuseopt_dtype_t dtype, fuseopt_reduce_op_t op, double factor,
                           bool* created) {
  *created = false;
  if (!is_floating(dtype) || (op != FUSEOPT_SUM && op != FUSEOPT_AVERAGE)) return -1;
  if (factor == 1.0) return nccl::red_op(op);  // ncclSum or ncclAvg
  // sum(x_r * s) with s = factor (/ size for an average): NCCL multiplies each
  // rank's input by the scalar on the device as it reduces.
  const double s = op == FUSEOPT_AVERAGE ? factor / size_ : factor;
  union {
    double f64;
    float f32;
    uint16_t f16;
  } scalar;
  switch (dtype) {
    case FUSEOPT_FLOAT64: scalar.f64 = s; break;
    case FUSEOPT_FLOAT32: scalar.f32 = static_cast<float>(s); break;
    case FUSEOPT_FLOAT16: scalar.f16 = float_to_half(static_cast<float>(s)); break;
    default: scalar.f16 = float_to_bfloat(static_cast<float>(s)); break;
  }
  int premul = 0;
  check(nccl_.ncclRedOpCreatePreMulSum(&premul, &scalar, nccl::data_type(dtype),
                                       nccl::kScalarHostImmediate, comm_),
        "ncclRedOpCreatePreMulSum");
  *created = true;
  return premul;
}

bool NcclBackend::allreduce_scaled(const void* send, void* recv, int64_t count,
                                   fuseopt_dtype_t dtype, fuseopt_reduce_op_t op, double factor) {
  if (hierarchical_) return false;  // the MPI step has no pre-multiplied sum
  bool created = false;
  const int o = scaled_op(dtype, op, factor, &created);
  if (o < 0) return false;
  nccl::Result r =
      nccl_.ncclAllReduce(send, recv, count, nccl::data_type(dtype), o, comm_, stream_);
  if (created) nccl_.ncclRedOpDestroy(o, comm_);
  check(r, "ncclAllReduce(scaled)");
  return true;
}

bool NcclBackend::reducescatter_scaled(const void* send, void* recv,
                                       const std::vector<int64_t>& recv_counts,
                                       fuseopt_dtype_t dtype, fuseopt_reduce_op_t op,
                                       double factor) {
  for (int64_t c : recv_counts)
    if (c != recv_counts[0]) return false;
  bool created = false;
  const int o = scaled_op(dtype, op, factor, &created);
  if (o < 0) return false;
  nccl::Result r = nccl_.ncclReduceScatter(send, recv, recv_counts[0], nccl::data_type(dtype), o,
                                           comm_, stream_);
  if (created) nccl_.ncclRedOpDestroy(o, comm_);
  check(r, "ncclReduceScatter(scaled)");
  return true;
}

void NcclBackend::broadcast(void* buf, int64_t count, fuseopt_dtype_t dtype, int root) {
  check(nccl_.ncclBroadcast(buf, buf, count, nccl::data_type(dtype), root, comm_, stream_),
        "ncclBroadcast");
}

void NcclBackend::allgatherv(const void* send, int64_t send_bytes, void* recv,
                             const std::vector<int64_t>& recv_bytes) {
  bool even = true;
  for (int64_t b : recv_bytes) even = even && b == recv_bytes[0];
  if (even) {
    check(nccl_.ncclAllGather(send, recv, send_bytes, nccl::kUint8, comm_, stream_),
          "ncclAllGather");
    return;
  }
  // Uneven first dimensions: one broadcast per rank, fused by a group (as
  // Horovod does), each rank the root of its own rows.
  check(nccl_.ncclGroupStart(), "ncclGroupStart");
  char* out = static_cast<char*>(recv);
  nccl::Result r = nccl::kSuccess;
  for (int root = 0; root < size_ && r == nccl::kSuccess; ++root) {
    r = nccl_.ncclBroadcast(root == rank_ ? send : out, out, recv_bytes[root], nccl::kUint8, root,
                            comm_, stream_);
    out += recv_bytes[root];
  }
  nccl::Result end = nccl_.ncclGroupEnd();
  check(r, "ncclBroadcast(allgather)");
  check(end, "ncclGroupEnd");
}

void NcclBackend::alltoallv(const void* send, const std::vector<int64_t>& send_bytes,
                            void* recv, const std::vector<int64_t>& recv_bytes) {
  check(nccl_.ncclGroupStart(), "ncclGroupStart");
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  nccl::Result r = nccl::kSuccess;
  for (int peer = 0; peer < size_ && r == nccl::kSuccess; ++peer) {
    r = nccl_.ncclSend(in, send_bytes[peer], nccl::kUint8, peer, comm_, stream_);
    if (r == nccl::kSuccess)
      r = nccl_.ncclRecv(out, recv_bytes[peer], nccl::kUint8, peer, comm_, stream_);
    in += send_bytes[peer];
    out += recv_bytes[peer];
  }
  nccl::Result end = nccl_.ncclGroupEnd();
  check(r, "ncclSend/ncclRecv(alltoall)");
  check(end, "ncclGroupEnd");
}

void NcclBackend::reducescatter(const void* send, void* recv,
                                const std::vector<int64_t>& recv_counts, fuseopt_dtype_t dtype,
                                fuseopt_reduce_op_t op) {
  for (int64_t c : recv_counts)
    if (c != recv_counts[0]) unsupported("reducescatter with uneven parts (the executor pads)");
  check(nccl_.ncclReduceScatter(send, recv, recv_counts[0], nccl::data_type(dtype),
                                nccl::red_op(op), comm_, stream_),
        "ncclReduceScatter");
}

class NcclFactory : public DeviceBackendFactory {
 public:
  explicit NcclFactory(std::shared_ptr<nccl::Libraries> libs) : libs_(std::move(libs)) {}
  std::unique_ptr<DeviceBackend> connect(const DeviceSetup& setup) override {
    std::unique_ptr<NcclBackend> b(new NcclBackend(libs_, setup));
    b->connect();
    return std::unique_ptr<DeviceBackend>(b.release());
  }

 private:
  std::shared_ptr<nccl::Libraries> libs_;
};

}  // namespace

std::unique_ptr<DeviceBackendFactory> open_nccl() {
  return std::unique_ptr<DeviceBackendFactory>(new NcclFactory(nccl::load_libraries()));
}

}  // namespace fuseopt
