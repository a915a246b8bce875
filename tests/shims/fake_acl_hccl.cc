// Test shim: the AscendCL runtime and HCCL symbols fuseopt's HCCL backend
// uses, over host memory and MPI (fake_device_core.h explains the engine).
// Built by tests/shims/build.py; FUSEOPT_ACL_LIBRARY and FUSEOPT_HCCL_LIBRARY
// both point at the one library.
//
// Signatures and enum values are those of acl_rt.h, hccl.h, hccl_types.h.
#include "fake_device_core.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using fake::Type;
using Lock = std::lock_guard<std::recursive_mutex>;

constexpr int kAclSuccess = 0, kAclInvalidParam = 100000, kAclRepeatInitialize = 100002;
constexpr int kHcclSuccess = 0, kHcclPara = 1, kHcclNetwork = 19, kHcclRemote = 21;

struct RootInfo { char internal[4108]; };
constexpr char kMagic[] = "fuseopt-fake-hccl-root";

bool g_initialized = false;
int g_device = -1;
std::string g_last_error;

bool type_of(int dt, Type* t) {
  static const Type map[] = {Type::I8, Type::I16, Type::I32, Type::F16, Type::F32, Type::I64,
                             Type::U64, Type::U8, Type::U16, Type::U32, Type::F64, Type::BF16};
  if (dt < 0 || dt > 11) return false;
  *t = map[dt];
  return true;
}

bool op_of(int op, fake::Op* o) {
  static const fake::Op map[] = {fake::Op::Sum, fake::Op::Prod, fake::Op::Max, fake::Op::Min};
  if (op < 0 || op > 3) return false;
  *o = map[op];
  return true;
}

bool device_buffers(const void* a, size_t abytes, const void* b, size_t bbytes, const char* who) {
  if (fake::on_device(a, abytes) && fake::on_device(b, bbytes)) return true;
  fake::complain(std::string(who) + ": a buffer is not device memory");
  return false;
}

fake::Comm* comm_of(void* c) { return static_cast<fake::Comm*>(c); }

int acl_error(const std::string& what) {
  g_last_error = what;
  fake::complain(what);
  return kAclInvalidParam;
}

}  // namespace

// ---- ACL runtime ----------------------------------------------------------

EXPORT int aclInit(const char*) {
  if (g_initialized) return kAclRepeatInitialize;
  g_initialized = true;
  return kAclSuccess;
}

EXPORT int aclrtSetDevice(int32_t device) {
  if (!g_initialized) return acl_error("aclrtSetDevice before aclInit");
  g_device = device;
  return kAclSuccess;
}

EXPORT int aclrtMalloc(void** p, size_t bytes, int policy) {
  Lock l(fake::mu());
  if (g_device < 0) return acl_error("aclrtMalloc before aclrtSetDevice");
  *p = fake::device_alloc(bytes);
  return kAclSuccess;
}

EXPORT int aclrtFree(void* p) {
  Lock l(fake::mu());
  return fake::device_free(p) ? kAclSuccess : acl_error("aclrtFree: not device memory");
}

// kind: 0 host-host, 1 host-device, 2 device-host, 3 device-device.
static bool kind_ok(const void* dst, const void* src, size_t n, int kind) {
  if (n == 0) return true;
  const bool dd = fake::on_device(dst, n), sd = fake::on_device(src, n);
  switch (kind) {
    case 1: return dd && !sd;
    case 2: return !dd && sd;
    case 3: return dd && sd;
    default: return !dd && !sd;
  }
}

EXPORT int aclrtMemcpyAsync(void* dst, size_t dst_max, const void* src, size_t n, int kind,
                            void* stream) {
  Lock l(fake::mu());
  if (n > dst_max || !kind_ok(dst, src, n, kind))
    return acl_error("aclrtMemcpyAsync: pointers do not match kind " + std::to_string(kind));
  fake::push(stream, [=] { std::memmove(dst, src, n); return true; });
  return kAclSuccess;
}

EXPORT int aclrtMemcpy(void* dst, size_t dst_max, const void* src, size_t n, int kind) {
  Lock l(fake::mu());
  if (n > dst_max || !kind_ok(dst, src, n, kind)) return acl_error("aclrtMemcpy: bad pointers");
  fake::sync_stream(nullptr);
  std::memmove(dst, src, n);
  return kAclSuccess;
}

EXPORT int aclrtCreateStream(void** s) { *s = new fake::Stream; return kAclSuccess; }
EXPORT int aclrtDestroyStream(void* s) {
  Lock l(fake::mu());
  delete static_cast<fake::Stream*>(s);
  return kAclSuccess;
}

EXPORT int aclrtSynchronizeStream(void* s) {
  Lock l(fake::mu());
  fake::sync_stream(s);
  return kAclSuccess;
}

EXPORT int aclrtCreateEvent(void** e) { *e = new fake::Event; return kAclSuccess; }
EXPORT int aclrtDestroyEvent(void* e) { delete static_cast<fake::Event*>(e); return kAclSuccess; }

EXPORT int aclrtRecordEvent(void* e, void* s) {
  Lock l(fake::mu());
  fake::record(static_cast<fake::Event*>(e), s);
  return kAclSuccess;
}

EXPORT int aclrtStreamWaitEvent(void* s, void* e) {
  Lock l(fake::mu());
  fake::wait_event(s, static_cast<fake::Event*>(e));
  return kAclSuccess;
}

// status: ACL_EVENT_RECORDED_STATUS_NOT_READY 0, ..._COMPLETE 1
EXPORT int aclrtQueryEventStatus(void* e, int* status) {
  Lock l(fake::mu());
  *status = fake::event_done(static_cast<fake::Event*>(e)) ? 1 : 0;
  return kAclSuccess;
}

EXPORT int aclrtSynchronizeEvent(void* e) {
  Lock l(fake::mu());
  while (!fake::event_done(static_cast<fake::Event*>(e)))
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  return kAclSuccess;
}

EXPORT const char* aclGetRecentErrMsg() { return g_last_error.c_str(); }

// ---- HCCL -----------------------------------------------------------------

EXPORT int HcclGetRootInfo(RootInfo* root) {
  static int counter = 0;
  std::memset(root, 0, sizeof(*root));
  std::snprintf(root->internal, sizeof(root->internal), "%s/%d/%d", kMagic,
                static_cast<int>(getpid()), ++counter);
  return kHcclSuccess;
}

EXPORT int HcclCommInitRootInfo(uint32_t nranks, const RootInfo* root, uint32_t rank,
                                void** comm) {
  Lock l(fake::mu());
  *comm = nullptr;
  if (g_device < 0) return acl_error("HcclCommInitRootInfo before aclrtSetDevice"), kHcclPara;
  const bool genuine = std::strncmp(root->internal, kMagic, sizeof(kMagic) - 1) == 0;
  auto* c = new fake::Comm;
  std::string error = fake::init_comm(c, root, sizeof(*root), static_cast<int>(nranks),
                                      static_cast<int>(rank), kHcclNetwork, kHcclRemote);
  if (!genuine) error = "the root info was not made by HcclGetRootInfo (not broadcast?)";
  if (!error.empty()) {
    fake::complain("HcclCommInitRootInfo: " + error);
    return kHcclPara;
  }
  *comm = c;
  return kHcclSuccess;
}

EXPORT int HcclCommDestroy(void* comm) { return kHcclSuccess; }

EXPORT int HcclGetCommAsyncError(void* comm, int* error) {
  Lock l(fake::mu());
  *error = comm_of(comm)->async_error;
  return kHcclSuccess;
}

EXPORT const char* HcclGetErrorString(int r) {
  switch (r) {
    case kHcclSuccess: return "success";
    case kHcclPara: return "parameter error";
    case kHcclNetwork: return "call network api fail (injected by the fake HCCL)";
    case kHcclRemote: return "error cqe (a remote rank failed)";
    default: return "unknown HcclResult";
  }
}

EXPORT int HcclAllReduce(void* send, void* recv, uint64_t count, int dt, int op, void* comm,
                         void* stream) {
  Lock l(fake::mu());
  Type t;
  fake::Op o;
  if (!type_of(dt, &t) || !op_of(op, &o)) return kHcclPara;
  const size_t n = count * fake::type_size(t);
  if (!device_buffers(send, n, recv, n, "HcclAllReduce")) return kHcclPara;
  fake::push(stream, fake::allreduce(comm_of(comm), send, recv, count, t, o, 1.0));
  return kHcclSuccess;
}

EXPORT int HcclBroadcast(void* buf, uint64_t count, int dt, uint32_t root, void* comm,
                         void* stream) {
  Lock l(fake::mu());
  Type t;
  if (!type_of(dt, &t)) return kHcclPara;
  const size_t n = count * fake::type_size(t);
  if (!device_buffers(buf, n, buf, n, "HcclBroadcast")) return kHcclPara;
  fake::push(stream, fake::broadcast(comm_of(comm), buf, buf, n, static_cast<int>(root)));
  return kHcclSuccess;
}

EXPORT int HcclAllGather(void* send, void* recv, uint64_t send_count, int dt, void* comm,
                         void* stream) {
  Lock l(fake::mu());
  Type t;
  if (!type_of(dt, &t)) return kHcclPara;
  const size_t n = send_count * fake::type_size(t);
  if (!device_buffers(send, n, recv, n * comm_of(comm)->size, "HcclAllGather")) return kHcclPara;
  fake::push(stream, fake::allgather(comm_of(comm), send, recv, n));
  return kHcclSuccess;
}

EXPORT int HcclReduceScatter(void* send, void* recv, uint64_t recv_count, int dt, int op,
                             void* comm, void* stream) {
  Lock l(fake::mu());
  Type t;
  fake::Op o;
  if (!type_of(dt, &t) || !op_of(op, &o)) return kHcclPara;
  const size_t part = recv_count * fake::type_size(t);
  if (!device_buffers(send, part * comm_of(comm)->size, recv, part, "HcclReduceScatter"))
    return kHcclPara;
  fake::push(stream, fake::reduce_scatter(comm_of(comm), send, recv, recv_count, t, o, 1.0));
  return kHcclSuccess;
}

// Counts and displacements: uint64_t arrays, in elements of the types.
EXPORT int HcclAlltoAllV(const void* send, const void* send_counts, const void* sdispls,
                         int send_type, const void* recv, const void* recv_counts,
                         const void* rdispls, int recv_type, void* comm, void* stream) {
  Lock l(fake::mu());
  Type st, rt;
  if (!type_of(send_type, &st) || !type_of(recv_type, &rt)) return kHcclPara;
  fake::Comm* c = comm_of(comm);
  std::vector<int> sc(c->size), sd(c->size), rc(c->size), rd(c->size);
  size_t send_end = 0, recv_end = 0;
  for (int r = 0; r < c->size; ++r) {
    sc[r] = static_cast<int>(static_cast<const uint64_t*>(send_counts)[r] * fake::type_size(st));
    sd[r] = static_cast<int>(static_cast<const uint64_t*>(sdispls)[r] * fake::type_size(st));
    rc[r] = static_cast<int>(static_cast<const uint64_t*>(recv_counts)[r] * fake::type_size(rt));
    rd[r] = static_cast<int>(static_cast<const uint64_t*>(rdispls)[r] * fake::type_size(rt));
    send_end = std::max(send_end, static_cast<size_t>(sd[r] + sc[r]));
    recv_end = std::max(recv_end, static_cast<size_t>(rd[r] + rc[r]));
  }
  if (!device_buffers(send, send_end, recv, recv_end, "HcclAlltoAllV")) return kHcclPara;
  fake::push(stream, fake::alltoallv(c, send, sc, sd, const_cast<void*>(recv), rc, rd));
  return kHcclSuccess;
}
