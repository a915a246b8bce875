// HCCL backend: ACL's and HCCL's calls for the skeleton in stream_backend.h,
// and the collectives. Differences from NCCL that matter:
//  - HCCL has no average and no pre-multiplied sum: allreduce_scaled says no,
//    and the executor applies factors in host memory.
//  - allgather with uneven first dimensions is an HcclAlltoAllV in which
//    every rank sends its rows to all (HcclAllGatherV is not in every CANN).
//  - HCCL has no abort: after an asynchronous error the communicator is
//    abandoned, not destroyed (destroying it could wait for the dead peer).
#include "transport/hccl/hccl_backend.h"

#include <algorithm>
#include <string>

#include "base/error.h"
#include "base/log.h"
#include "transport/device/device_free.h"
#include "transport/device/dynlib.h"
#include "transport/device/stream_backend.h"
#include "transport/hccl/hccl_api.h"
#include "transport/mpi/mpi_world.h"

namespace fuseopt {
namespace {

struct HcclLibs {
  std::unique_ptr<DynLib> acl_lib, hccl_lib;
  acl::Api acl{};
  hccl::Api hccl{};
};

int hccl_dtype(fuseopt_dtype_t d) {
  switch (d) {
    case FUSEOPT_UINT8: return hccl::kUint8;
    case FUSEOPT_INT8: return hccl::kInt8;
    case FUSEOPT_INT16: return hccl::kInt16;
    case FUSEOPT_UINT16: return hccl::kUint16;
    case FUSEOPT_INT32: return hccl::kInt32;
    case FUSEOPT_INT64: return hccl::kInt64;
    case FUSEOPT_FLOAT16: return hccl::kFp16;
    case FUSEOPT_BFLOAT16: return hccl::kBfp16;
    case FUSEOPT_FLOAT32: return hccl::kFp32;
    case FUSEOPT_FLOAT64: return hccl::kFp64;
    default: throw Error(FUSEOPT_INTERNAL, "hccl: unknown dtype");
  }
}

int hccl_op(fuseopt_reduce_op_t op) {
  switch (op) {
    case FUSEOPT_SUM: return hccl::kSum;
    case FUSEOPT_MIN: return hccl::kMin;
    case FUSEOPT_MAX: return hccl::kMax;
    case FUSEOPT_PRODUCT: return hccl::kProd;
    default: throw Error(FUSEOPT_INTERNAL, "hccl: average reaches the backend as a sum");
  }
}

class HcclBackend : public StreamBackend {
 public:
  HcclBackend(std::shared_ptr<HcclLibs> libs, const DeviceSetup& setup)
      : StreamBackend("HCCL", "npu", setup),
        libs_(std::move(libs)),
        acl_(libs_->acl),
        hccl_(libs_->hccl) {}
  ~HcclBackend() override;
  const char* name() const override { return "hccl"; }

  void activate() override { acl_check(acl_.aclrtSetDevice(setup_.device_id), "aclrtSetDevice"); }
  void* allocate(int64_t bytes) override;
  void release(void* p) override { acl_.aclrtFree(p); }

  void allreduce(const void* send, void* recv, int64_t count, fuseopt_dtype_t dtype,
                 fuseopt_reduce_op_t op) override;
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
  // Counts and displacements in bytes, per rank.
  void alltoallv_raw(const void* send, const std::vector<uint64_t>& sc,
                     const std::vector<uint64_t>& sd, void* recv, const std::vector<uint64_t>& rc,
                     const std::vector<uint64_t>& rd);
  void check(hccl::Result r, const char* what) const;
  void acl_check(acl::Error e, const char* what) const;

  std::shared_ptr<HcclLibs> libs_;
  const acl::Api& acl_;
  const hccl::Api& hccl_;
  hccl::Comm comm_ = nullptr;
};

void HcclBackend::check(hccl::Result r, const char* what) const {
  if (r == hccl::kSuccess) return;
  fail(what, std::string(hccl_.HcclGetErrorString(r)) + " (HcclResult " + std::to_string(r) +
                 ")");
}

void HcclBackend::acl_check(acl::Error e, const char* what) const {
  if (e == acl::kSuccess) return;
  const char* detail = acl_.aclGetRecentErrMsg();
  fail(what, "aclError " + std::to_string(e) + (detail ? std::string(": ") + detail : ""));
}

std::vector<char> HcclBackend::open_device() {
  acl::Error init = acl_.aclInit(nullptr);
  if (init != acl::kRepeatInitialize) acl_check(init, "aclInit");
  activate();
  hccl::RootInfo root{};
  if (rank_ == 0) check(hccl_.HcclGetRootInfo(&root), "HcclGetRootInfo");
  return std::vector<char>(root.internal, root.internal + sizeof(root));
}

void HcclBackend::open_communicator(const std::vector<char>& bytes) {
  hccl::RootInfo root{};
  std::copy(bytes.begin(), bytes.end(), root.internal);
  check(hccl_.HcclCommInitRootInfo(size_, &root, rank_, &comm_), "HcclCommInitRootInfo");
}

void HcclBackend::connected() {
  const fuseopt_comm_info_t& info = setup_.world->info();
  if (setup_.hierarchical && info.cross_size > 1 && info.local_size > 1 && rank_ == 0)
    FUSEOPT_LOG(kWarning, "FUSEOPT_HIERARCHICAL_ALLREDUCE is not implemented for HCCL: NPU "
                          "allreduces run flat over all ranks");
}

void* HcclBackend::create_stream() {
  void* stream = nullptr;
  acl_check(acl_.aclrtCreateStream(&stream), "aclrtCreateStream");
  return stream;
}

void* HcclBackend::create_event() {
  void* event = nullptr;
  acl_check(acl_.aclrtCreateEvent(&event), "aclrtCreateEvent");
  return event;
}

void HcclBackend::record(void* event, void* stream) {
  acl_check(acl_.aclrtRecordEvent(event, stream), "aclrtRecordEvent");
}

void HcclBackend::stream_wait(void* event) {
  acl_check(acl_.aclrtStreamWaitEvent(stream_, event), "aclrtStreamWaitEvent");
}

bool HcclBackend::event_done(void* event) {
  int status = 0;
  acl_check(acl_.aclrtQueryEventStatus(event, &status), "aclrtQueryEventStatus");
  return status == acl::kEventRecordedComplete;
}

void HcclBackend::check_async_error() {
  hccl::Result async = hccl::kSuccess;
  check(hccl_.HcclGetCommAsyncError(comm_, &async), "HcclGetCommAsyncError");
  if (async == hccl::kSuccess) return;
  comm_ = nullptr;  // abandoned: see the top of this file
  peer_failed(std::string(hccl_.HcclGetErrorString(async)) + " (HcclResult " +
                  std::to_string(async) + ")",
              "fuseopt has stopped on this rank");
}

HcclBackend::~HcclBackend() {
  free_fusion_buffer();
  if (done_) acl_.aclrtDestroyEvent(done_);
  if (marker_) acl_.aclrtDestroyEvent(marker_);
  if (stream_) acl_.aclrtDestroyStream(stream_);
  if (comm_) hccl_.HcclCommDestroy(comm_);
}

void* HcclBackend::allocate(int64_t bytes) {
  void* p = nullptr;
  acl_check(acl_.aclrtMalloc(&p, static_cast<size_t>(bytes > 0 ? bytes : 1),
                             acl::kMallocHugeFirst),
            "aclrtMalloc");
  return p;
}

void HcclBackend::enqueue_copy(void* dst, const void* src, int64_t bytes, Direction d) {
  if (bytes <= 0 || dst == src) return;
  const int kind = d == kHostToDevice   ? acl::kHostToDevice
                   : d == kDeviceToHost ? acl::kDeviceToHost
                                        : acl::kDeviceToDevice;
  acl_check(acl_.aclrtMemcpyAsync(dst, static_cast<size_t>(bytes), src,
                                  static_cast<size_t>(bytes), kind, stream_),
            "aclrtMemcpyAsync");
}

void HcclBackend::allreduce(const void* send, void* recv, int64_t count, fuseopt_dtype_t dtype,
                            fuseopt_reduce_op_t op) {
  check(hccl_.HcclAllReduce(const_cast<void*>(send), recv, count, hccl_dtype(dtype), hccl_op(op),
                            comm_, stream_),
        "HcclAllReduce");
}

void HcclBackend::broadcast(void* buf, int64_t count, fuseopt_dtype_t dtype, int root) {
  check(hccl_.HcclBroadcast(buf, count, hccl_dtype(dtype), root, comm_, stream_),
        "HcclBroadcast");
}

void HcclBackend::allgatherv(const void* send, int64_t send_bytes, void* recv,
                             const std::vector<int64_t>& recv_bytes) {
  if (even(recv_bytes)) {
    check(hccl_.HcclAllGather(const_cast<void*>(send), recv, send_bytes, hccl::kInt8, comm_,
                              stream_),
          "HcclAllGather");
    return;
  }
  // Every rank sends its whole input (displacement 0) to every rank.
  std::vector<uint64_t> sc(size_, send_bytes), sd(size_, 0), rc(size_), rd(size_);
  uint64_t off = 0;
  for (int r = 0; r < size_; ++r) {
    rc[r] = recv_bytes[r];
    rd[r] = off;
    off += recv_bytes[r];
  }
  alltoallv_raw(send, sc, sd, recv, rc, rd);
}

void HcclBackend::alltoallv(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                            const std::vector<int64_t>& recv_bytes) {
  std::vector<uint64_t> sc(size_), sd(size_), rc(size_), rd(size_);
  uint64_t soff = 0, roff = 0;
  for (int r = 0; r < size_; ++r) {
    sc[r] = send_bytes[r];
    rc[r] = recv_bytes[r];
    sd[r] = soff;
    rd[r] = roff;
    soff += send_bytes[r];
    roff += recv_bytes[r];
  }
  alltoallv_raw(send, sc, sd, recv, rc, rd);
}

void HcclBackend::alltoallv_raw(const void* send, const std::vector<uint64_t>& sc,
                                const std::vector<uint64_t>& sd, void* recv,
                                const std::vector<uint64_t>& rc,
                                const std::vector<uint64_t>& rd) {
  check(hccl_.HcclAlltoAllV(send, sc.data(), sd.data(), hccl::kInt8, recv, rc.data(), rd.data(),
                            hccl::kInt8, comm_, stream_),
        "HcclAlltoAllV");
}

void HcclBackend::reducescatter(const void* send, void* recv,
                                const std::vector<int64_t>& recv_counts, fuseopt_dtype_t dtype,
                                fuseopt_reduce_op_t op) {
  require_even(recv_counts);
  check(hccl_.HcclReduceScatter(const_cast<void*>(send), recv, recv_counts[0], hccl_dtype(dtype),
                                hccl_op(op), comm_, stream_),
        "HcclReduceScatter");
}

}  // namespace

std::unique_ptr<DeviceBackendFactory> open_hccl() {
  auto libs = std::make_shared<HcclLibs>();
  const char* hint =
      "NPU tensors are reduced with HCCL, which comes with Huawei's Ascend CANN toolkit: "
      "install CANN and source its set_env.sh (it puts libascendcl.so and libhccl.so on "
      "LD_LIBRARY_PATH), or move the tensors to the CPU.";
  libs->acl_lib.reset(new DynLib("FUSEOPT_ACL_LIBRARY", {"libascendcl.so"}, hint));
  acl::Api& a = libs->acl;
  libs->acl_lib->resolve({FUSEOPT_SYMBOL(a, aclInit), FUSEOPT_SYMBOL(a, aclrtSetDevice),
                          FUSEOPT_SYMBOL(a, aclrtMalloc), FUSEOPT_SYMBOL(a, aclrtFree),
                          FUSEOPT_SYMBOL(a, aclrtMemcpyAsync), FUSEOPT_SYMBOL(a, aclrtCreateStream),
                          FUSEOPT_SYMBOL(a, aclrtDestroyStream),
                          FUSEOPT_SYMBOL(a, aclrtCreateEvent), FUSEOPT_SYMBOL(a, aclrtDestroyEvent),
                          FUSEOPT_SYMBOL(a, aclrtRecordEvent),
                          FUSEOPT_SYMBOL(a, aclrtStreamWaitEvent),
                          FUSEOPT_SYMBOL(a, aclrtQueryEventStatus),
                          FUSEOPT_SYMBOL(a, aclGetRecentErrMsg)});
  libs->hccl_lib.reset(new DynLib("FUSEOPT_HCCL_LIBRARY", {"libhccl.so"}, hint));
  hccl::Api& h = libs->hccl;
  libs->hccl_lib->resolve({FUSEOPT_SYMBOL(h, HcclGetRootInfo),
                           FUSEOPT_SYMBOL(h, HcclCommInitRootInfo),
                           FUSEOPT_SYMBOL(h, HcclCommDestroy),
                           FUSEOPT_SYMBOL(h, HcclGetCommAsyncError),
                           FUSEOPT_SYMBOL(h, HcclGetErrorString), FUSEOPT_SYMBOL(h, HcclAllReduce),
                           FUSEOPT_SYMBOL(h, HcclBroadcast), FUSEOPT_SYMBOL(h, HcclAllGather),
                           FUSEOPT_SYMBOL(h, HcclReduceScatter), FUSEOPT_SYMBOL(h, HcclAlltoAllV)});
  set_device_free(FUSEOPT_DEVICE_NPU, a.aclrtFree);
  return std::unique_ptr<DeviceBackendFactory>(new StreamBackendFactory<HcclBackend, HcclLibs>(libs));
}

}  // namespace fuseopt
