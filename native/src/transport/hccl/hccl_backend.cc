// HCCL backend: the same shape as the NCCL backend (nccl_backend.cc), over
// HCCL and ACL. Differences that matter:
//  - HCCL has no average and no pre-multiplied sum: allreduce_scaled says no,
//    and the executor applies factors in host memory.
//  - allgather with uneven first dimensions is an HcclAlltoAllV in which
//    every rank sends its rows to all (HcclAllGatherV is not in every CANN).
//  - HCCL has no abort: after an asynchronous error the communicator is
//    abandoned, not destroyed (destroying it could wait for the dead peer).
#include "transport/hccl/hccl_backend.h"

#include <string>

#include "base/common.h"
#include "base/log.h"
#include "base/poll_schedule.h"
#include "transport/device/device_free.h"
#include "transport/device/dynlib.h"
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

class HcclBackend : public DeviceBackend {
 public:
  HcclBackend(std::shared_ptr<HcclLibs> libs, const DeviceSetup& setup)
      : libs_(std::move(libs)), acl_(libs_->acl), hccl_(libs_->hccl), setup_(setup) {}
  ~HcclBackend() override;
  const char* name() const override { return "hccl"; }
  void connect();

  void activate() override { acl_check(acl_.aclrtSetDevice(setup_.device_id), "aclrtSetDevice"); }
  void* allocate(int64_t bytes) override;
  void release(void* p) override { acl_.aclrtFree(p); }
  void copy(void* dst, const void* src, int64_t bytes) override {
    memcpy_async(dst, src, bytes, acl::kDeviceToDevice);
  }
  void upload(void* dst, const void* host, int64_t bytes) override {
    memcpy_async(dst, host, bytes, acl::kHostToDevice);
  }
  void download(void* host, const void* src, int64_t bytes) override {
    memcpy_async(host, src, bytes, acl::kDeviceToHost);
  }
  void wait_for(void* stream, void* event) override;
  void synchronize() override;

  void allreduce(const void* send, void* recv, int64_t count, fuseopt_dtype_t dtype,
                 fuseopt_reduce_op_t op) override;
  void broadcast(void* buf, int64_t count, fuseopt_dtype_t dtype, int root) override;
  void allgatherv(const void* send, int64_t send_bytes, void* recv,
                  const std::vector<int64_t>& recv_bytes) override;
  void alltoallv(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                 const std::vector<int64_t>& recv_bytes) override;
  void reducescatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                     fuseopt_dtype_t dtype, fuseopt_reduce_op_t op) override;

 private:
  void memcpy_async(void* dst, const void* src, int64_t bytes, int kind);
  // Counts and displacements in bytes, per rank.
  void alltoallv_raw(const void* send, const std::vector<uint64_t>& sc,
                     const std::vector<uint64_t>& sd, void* recv, const std::vector<uint64_t>& rc,
                     const std::vector<uint64_t>& rd);
  void check(hccl::Result r, const char* what) const;
  void acl_check(acl::Error e, const char* what) const;
  std::string where() const { return "npu:" + std::to_string(setup_.device_id); }

  std::shared_ptr<HcclLibs> libs_;
  const acl::Api& acl_;
  const hccl::Api& hccl_;
  DeviceSetup setup_;
  int rank_ = 0, size_ = 1;
  hccl::Comm comm_ = nullptr;
  void* stream_ = nullptr;
  void* marker_ = nullptr;  // recorded on a framework stream that gave no event
  void* done_ = nullptr;    // recorded on our stream by synchronize()
};

void HcclBackend::check(hccl::Result r, const char* what) const {
  if (r == hccl::kSuccess) return;
  throw Error(FUSEOPT_BACKEND, std::string(what) + " failed on " + where() + ": " +
                                   hccl_.HcclGetErrorString(r) + " (HcclResult " +
                                   std::to_string(r) + ")");
}

void HcclBackend::acl_check(acl::Error e, const char* what) const {
  if (e == acl::kSuccess) return;
  const char* detail = acl_.aclGetRecentErrMsg();
  throw Error(FUSEOPT_BACKEND, std::string(what) + " failed on " + where() + ": aclError " +
                                   std::to_string(e) + (detail ? std::string(": ") + detail : ""));
}

// Collective over all ranks; see NcclBackend::connect for the pattern.
void HcclBackend::connect() {
  const fuseopt_comm_info_t& info = setup_.world->info();
  rank_ = info.rank;
  size_ = info.size;
  Backend& host = *setup_.host;
  std::string error;
  hccl::RootInfo root{};
  try {
    acl::Error init = acl_.aclInit(nullptr);
    if (init != acl::kRepeatInitialize) acl_check(init, "aclInit");
    activate();
    if (rank_ == 0) check(hccl_.HcclGetRootInfo(&root), "HcclGetRootInfo");
  } catch (const Error& e) {
    error = e.what();
  }
  std::string agreed = first_error_everywhere(host, size_, error);
  if (!agreed.empty()) throw Error(FUSEOPT_BACKEND, "HCCL set-up failed on " + agreed);
  host.broadcast(&root, sizeof(root), FUSEOPT_UINT8, 0);
  hccl::Result r = hccl_.HcclCommInitRootInfo(size_, &root, rank_, &comm_);
  try {
    check(r, "HcclCommInitRootInfo");
    acl_check(acl_.aclrtCreateStream(&stream_), "aclrtCreateStream");
    acl_check(acl_.aclrtCreateEvent(&marker_), "aclrtCreateEvent");
    acl_check(acl_.aclrtCreateEvent(&done_), "aclrtCreateEvent");
  } catch (const Error& e) {
    error = e.what();
  }
  agreed = first_error_everywhere(host, size_, error);
  if (!agreed.empty()) throw Error(FUSEOPT_BACKEND, "HCCL set-up failed on " + agreed);
  if (setup_.hierarchical && info.cross_size > 1 && info.local_size > 1 && rank_ == 0)
    FUSEOPT_LOG(kWarning, "FUSEOPT_HIERARCHICAL_ALLREDUCE is not implemented for HCCL: NPU "
                          "allreduces run flat over all ranks");
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

void HcclBackend::memcpy_async(void* dst, const void* src, int64_t bytes, int kind) {
  if (bytes <= 0 || dst == src) return;
  acl_check(acl_.aclrtMemcpyAsync(dst, static_cast<size_t>(bytes), src,
                                  static_cast<size_t>(bytes), kind, stream_),
            "aclrtMemcpyAsync");
}

void HcclBackend::wait_for(void* stream, void* event) {
  if (!event) {
    acl_check(acl_.aclrtRecordEvent(marker_, stream), "aclrtRecordEvent");
    event = marker_;
  }
  acl_check(acl_.aclrtStreamWaitEvent(stream_, event), "aclrtStreamWaitEvent");
}

void HcclBackend::synchronize() {
  // Poll an event instead of blocking in aclrtSynchronizeStream, so that
  // HCCL's asynchronous error (a failed peer) can end the wait.
  acl_check(acl_.aclrtRecordEvent(done_, stream_), "aclrtRecordEvent");
  poll_until(
      [&] {
        int status = 0;
        acl_check(acl_.aclrtQueryEventStatus(done_, &status), "aclrtQueryEventStatus");
        if (status == acl::kEventRecordedComplete) return true;
        hccl::Result async = hccl::kSuccess;
        check(hccl_.HcclGetCommAsyncError(comm_, &async), "HcclGetCommAsyncError");
        if (async != hccl::kSuccess) {
          comm_ = nullptr;  // abandoned: see the top of this file
          throw Error(FUSEOPT_BACKEND,
                      "HCCL reported an asynchronous error on " + where() + ": " +
                          hccl_.HcclGetErrorString(async) + " (HcclResult " +
                          std::to_string(async) +
                          "). A peer rank has probably failed or lost its network; fuseopt has "
                          "stopped on this rank");
        }
        return false;
      },
      kStreamPoll);
  acl_check(acl_.aclrtSynchronizeStream(stream_), "aclrtSynchronizeStream");
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
  bool even = true;
  for (int64_t b : recv_bytes) even = even && b == recv_bytes[0];
  if (even) {
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
  for (int64_t c : recv_counts)
    if (c != recv_counts[0]) unsupported("reducescatter with uneven parts (the executor pads)");
  check(hccl_.HcclReduceScatter(const_cast<void*>(send), recv, recv_counts[0], hccl_dtype(dtype),
                                hccl_op(op), comm_, stream_),
        "HcclReduceScatter");
}

class HcclFactory : public DeviceBackendFactory {
 public:
  explicit HcclFactory(std::shared_ptr<HcclLibs> libs) : libs_(std::move(libs)) {}
  std::unique_ptr<DeviceBackend> connect(const DeviceSetup& setup) override {
    std::unique_ptr<HcclBackend> b(new HcclBackend(libs_, setup));
    b->connect();
    return std::unique_ptr<DeviceBackend>(b.release());
  }

 private:
  std::shared_ptr<HcclLibs> libs_;
};

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
                          FUSEOPT_SYMBOL(a, aclrtSynchronizeStream),
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
  return std::unique_ptr<DeviceBackendFactory>(new HcclFactory(libs));
}

}  // namespace fuseopt
