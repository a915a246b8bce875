// NCCL backend: CUDA's and NCCL's calls for the skeleton in stream_backend.h
// (connect, streams, events, synchronize), and the collectives. A peer that
// died makes NCCL report ncclRemoteError / ncclSystemError while
// synchronize() polls; both communicators are then aborted rather than
// waited on forever.
#include "transport/nccl/nccl_backend.h"

#include <algorithm>
#include <climits>
#include <string>

#include "base/error.h"
#include "base/dtype.h"
#include "base/log.h"
#include "transport/mpi/mpi_world.h"
#include "transport/device/stream_backend.h"
#include "transport/nccl/nccl_api.h"

namespace fuseopt {
namespace {

class NcclBackend : public StreamBackend {
 public:
  NcclBackend(std::shared_ptr<nccl::Libraries> libs, const DeviceSetup& setup)
      : StreamBackend("NCCL", "cuda", setup),
        libs_(std::move(libs)),
        cuda_(libs_->cuda),
        nccl_(libs_->nccl) {}
  ~NcclBackend() override;
  const char* name() const override { return "nccl"; }

  void activate() override { cuda_check(cuda_.cudaSetDevice(setup_.device_id), "cudaSetDevice"); }
  void* allocate(int64_t bytes) override;
  void release(void* p) override { cuda_.cudaFree(p); }

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

 protected:
  FUSEOPT_STREAM_BACKEND_HOOKS

 private:
  int scaled_op(fuseopt_dtype_t dtype, fuseopt_reduce_op_t op, double factor, bool* created);
  bool async_error(nccl::Comm comm, nccl::Result* error);
  void check(nccl::Result r, const char* what) const;
  void cuda_check(cuda::Error e, const char* what) const;

  std::shared_ptr<nccl::Libraries> libs_;
  const cuda::Api& cuda_;
  const nccl::Api& nccl_;
  nccl::Comm comm_ = nullptr;
  // FUSEOPT_HIERARCHICAL_ALLREDUCE on several nodes of several ranks: a
  // second communicator of this node's ranks; allreduce is then an NCCL
  // reduce to the node's leader, an MPI allreduce among the leaders (in host
  // memory), and an NCCL broadcast from the leader.
  bool hierarchical_ = false;
  nccl::Comm node_comm_ = nullptr;
  std::vector<char> staging_;  // the leader's host copy
};

void NcclBackend::check(nccl::Result r, const char* what) const {
  if (r == nccl::kSuccess) return;
  fail(what, std::string(nccl_.ncclGetErrorString(r)) + " (ncclResult_t " + std::to_string(r) +
                 ")");
}

void NcclBackend::cuda_check(cuda::Error e, const char* what) const {
  if (e == cuda::kSuccess) return;
  fail(what, std::string(cuda_.cudaGetErrorString(e)) + " (cudaError_t " + std::to_string(e) +
                 ")");
}

std::vector<char> NcclBackend::open_device() {
  activate();
  nccl::UniqueId id{};
  if (rank_ == 0) check(nccl_.ncclGetUniqueId(&id), "ncclGetUniqueId");
  return std::vector<char>(id.internal, id.internal + sizeof(id));
}

void NcclBackend::open_communicator(const std::vector<char>& bytes) {
  nccl::UniqueId id{};
  std::copy(bytes.begin(), bytes.end(), id.internal);
  check(nccl_.ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
}

void* NcclBackend::create_stream() {
  void* stream = nullptr;
  cuda_check(cuda_.cudaStreamCreateWithFlags(&stream, cuda::kStreamNonBlocking),
             "cudaStreamCreateWithFlags");
  return stream;
}

void* NcclBackend::create_event() {
  void* event = nullptr;
  cuda_check(cuda_.cudaEventCreateWithFlags(&event, cuda::kEventDisableTiming),
             "cudaEventCreateWithFlags");
  return event;
}

void NcclBackend::record(void* event, void* stream) {
  cuda_check(cuda_.cudaEventRecord(event, stream), "cudaEventRecord");
}

void NcclBackend::stream_wait(void* event) {
  cuda_check(cuda_.cudaStreamWaitEvent(stream_, event, 0), "cudaStreamWaitEvent");
}

bool NcclBackend::event_done(void* event) {
  cuda::Error e = cuda_.cudaEventQuery(event);
  if (e == cuda::kNotReady) return false;
  cuda_check(e, "cudaEventQuery");
  return true;
}

// Collective: each node's leader makes an id and broadcasts it within its node.
void NcclBackend::connected() {
  const fuseopt_comm_info_t& info = setup_.world->info();
  hierarchical_ = setup_.hierarchical && info.cross_size > 1 && info.local_size > 1;
  if (!hierarchical_) return;
  nccl::UniqueId id{};
  agree("NCCL node set-up", [&] {
    if (info.local_rank == 0) check(nccl_.ncclGetUniqueId(&id), "ncclGetUniqueId");
  });
  mpi_check(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, setup_.world->local_comm()),
            "MPI_Bcast(NCCL node id)");
  agree("NCCL node set-up", [&] {
    check(nccl_.ncclCommInitRank(&node_comm_, info.local_size, id, info.local_rank),
          "ncclCommInitRank(node)");
  });
  FUSEOPT_LOG(kInfo, "NCCL hierarchical allreduce: NCCL within each node of "
                         << info.local_size << " ranks, MPI among " << info.cross_size
                         << " node leaders");
}

NcclBackend::~NcclBackend() {
  free_fusion_buffer();
  if (done_) cuda_.cudaEventDestroy(done_);
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

void NcclBackend::enqueue_copy(void* dst, const void* src, int64_t bytes, Direction d) {
  if (bytes <= 0 || dst == src) return;
  const int kind = d == kHostToDevice   ? cuda::kHostToDevice
                   : d == kDeviceToHost ? cuda::kDeviceToHost
                                        : cuda::kDeviceToDevice;
  cuda_check(cuda_.cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), kind, stream_),
             "cudaMemcpyAsync");
}

bool NcclBackend::async_error(nccl::Comm comm, nccl::Result* error) {
  *error = nccl::kSuccess;
  if (comm) check(nccl_.ncclCommGetAsyncError(comm, error), "ncclCommGetAsyncError");
  return *error != nccl::kSuccess && *error != nccl::kInProgress;
}

void NcclBackend::check_async_error() {
  nccl::Result error = nccl::kSuccess;
  if (!async_error(comm_, &error) && !async_error(node_comm_, &error)) return;
  // NCCL's rule after an async error: abort. Both communicators are done for.
  for (nccl::Comm* c : {&comm_, &node_comm_}) {
    if (*c) nccl_.ncclCommAbort(*c);
    *c = nullptr;
  }
  peer_failed(std::string(nccl_.ncclGetErrorString(error)) + " (ncclResult_t " +
                  std::to_string(error) + ")",
              "the NCCL communicator was aborted and fuseopt has stopped on this rank");
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
  if (!even(recv_counts)) return false;
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
  if (even(recv_bytes)) {
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
  require_even(recv_counts);
  check(nccl_.ncclReduceScatter(send, recv, recv_counts[0], nccl::data_type(dtype),
                                nccl::red_op(op), comm_, stream_),
        "ncclReduceScatter");
}

}  // namespace

std::unique_ptr<DeviceBackendFactory> open_nccl() {
  return std::unique_ptr<DeviceBackendFactory>(new StreamBackendFactory<NcclBackend, nccl::Libraries>(nccl::load_libraries()));
}

}  // namespace fuseopt
