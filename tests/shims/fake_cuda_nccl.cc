// Test shim: the CUDA runtime and NCCL symbols fuseopt's NCCL backend uses,
// over host memory and MPI (fake_device_core.h explains the engine). Built
// by tests/shims/build.py; FUSEOPT_CUDART_LIBRARY and FUSEOPT_NCCL_LIBRARY
// both point at the one library, so streams and events are shared.
//
// Signatures and enum values are those of cuda_runtime_api.h and nccl.h.
#include "fake_device_core.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using fake::Type;
using Lock = std::lock_guard<std::recursive_mutex>;

constexpr int kCudaSuccess = 0, kCudaInvalidValue = 1, kCudaNotReady = 600;
constexpr int kNcclSuccess = 0, kNcclSystemError = 2, kNcclInvalidArgument = 4,
              kNcclInvalidUsage = 5, kNcclRemoteError = 6;
constexpr int kNcclNumOps = 5;  // ncclSum..ncclAvg; PreMulSum ops come after

struct UniqueId { char internal[128]; };
constexpr char kMagic[] = "fuseopt-fake-nccl-id";

int g_device = 0;
int g_group_depth = 0;
std::vector<std::pair<void*, fake::Work>> g_group;  // (stream, work) until ncclGroupEnd
std::vector<double> g_premul;                       // scalar of op kNcclNumOps + i

bool type_of(int dt, Type* t) {
  static const Type map[] = {Type::I8, Type::U8, Type::I32, Type::U32, Type::I64,
                             Type::U64, Type::F16, Type::F32, Type::F64, Type::BF16};
  if (dt < 0 || dt > 9) return false;
  *t = map[dt];
  return true;
}

bool op_of(int op, fake::Op* o, double* scalar) {
  static const fake::Op map[] = {fake::Op::Sum, fake::Op::Prod, fake::Op::Max, fake::Op::Min,
                                 fake::Op::Avg};
  if (op >= 0 && op < kNcclNumOps) {
    *o = map[op];
    return true;
  }
  const size_t i = static_cast<size_t>(op - kNcclNumOps);
  if (op < kNcclNumOps || i >= g_premul.size()) return false;
  *o = fake::Op::PreMulSum;
  *scalar = g_premul[i];  // captured now: the op may be destroyed before it runs
  return true;
}

bool device_buffers(const void* a, size_t abytes, const void* b, size_t bbytes, const char* who) {
  if (fake::on_device(a, abytes) && fake::on_device(b, bbytes)) return true;
  fake::complain(std::string(who) + ": a buffer is not device memory");
  return false;
}

int enqueue(void* stream, fake::Work w) {
  if (g_group_depth > 0) g_group.emplace_back(stream, std::move(w));
  else fake::push(stream, std::move(w));
  return kNcclSuccess;
}

fake::Comm* comm_of(void* c) { return static_cast<fake::Comm*>(c); }

}  // namespace

// ---- CUDA runtime ---------------------------------------------------------

EXPORT int cudaSetDevice(int device) { g_device = device; return kCudaSuccess; }
EXPORT int cudaGetDevice(int* device) { *device = g_device; return kCudaSuccess; }

EXPORT int cudaMalloc(void** p, size_t bytes) {
  Lock l(fake::mu());
  *p = fake::device_alloc(bytes);
  return kCudaSuccess;
}

EXPORT int cudaFree(void* p) {
  Lock l(fake::mu());
  return fake::device_free(p) ? kCudaSuccess : kCudaInvalidValue;
}

// kind: 0 host-host, 1 host-device, 2 device-host, 3 device-device, 4 default.
static bool kind_ok(const void* dst, const void* src, size_t n, int kind) {
  if (n == 0) return true;
  const bool dd = fake::on_device(dst, n), sd = fake::on_device(src, n);
  switch (kind) {
    case 1: return dd && !sd;
    case 2: return !dd && sd;
    case 3: return dd && sd;
    default: return true;
  }
}

EXPORT int cudaMemcpyAsync(void* dst, const void* src, size_t n, int kind, void* stream) {
  Lock l(fake::mu());
  if (!kind_ok(dst, src, n, kind)) {
    fake::complain("cudaMemcpyAsync: pointers do not match kind " + std::to_string(kind));
    return kCudaInvalidValue;
  }
  fake::push(stream, [=] { std::memmove(dst, src, n); return true; });
  return kCudaSuccess;
}

EXPORT int cudaMemcpy(void* dst, const void* src, size_t n, int kind) {
  Lock l(fake::mu());
  if (!kind_ok(dst, src, n, kind)) return kCudaInvalidValue;
  fake::sync_stream(nullptr);  // the legacy default stream's earlier work first
  std::memmove(dst, src, n);
  return kCudaSuccess;
}

EXPORT int cudaStreamCreateWithFlags(void** s, unsigned) { *s = new fake::Stream; return 0; }
EXPORT int cudaStreamCreate(void** s) { return cudaStreamCreateWithFlags(s, 0); }
EXPORT int cudaStreamDestroy(void* s) {
  Lock l(fake::mu());
  delete static_cast<fake::Stream*>(s);
  return kCudaSuccess;
}

EXPORT int cudaStreamQuery(void* s) {
  Lock l(fake::mu());
  return fake::progress(fake::stream_of(s)) ? kCudaSuccess : kCudaNotReady;
}

EXPORT int cudaStreamSynchronize(void* s) {
  Lock l(fake::mu());
  fake::sync_stream(s);
  return kCudaSuccess;
}

EXPORT int cudaEventCreateWithFlags(void** e, unsigned) { *e = new fake::Event; return 0; }
EXPORT int cudaEventCreate(void** e) { return cudaEventCreateWithFlags(e, 0); }
EXPORT int cudaEventDestroy(void* e) { delete static_cast<fake::Event*>(e); return 0; }

EXPORT int cudaEventRecord(void* e, void* s) {
  Lock l(fake::mu());
  fake::record(static_cast<fake::Event*>(e), s);
  return kCudaSuccess;
}

EXPORT int cudaEventQuery(void* e) {
  Lock l(fake::mu());
  return fake::event_done(static_cast<fake::Event*>(e)) ? kCudaSuccess : kCudaNotReady;
}

EXPORT int cudaStreamWaitEvent(void* s, void* e, unsigned) {
  Lock l(fake::mu());
  fake::wait_event(s, static_cast<fake::Event*>(e));
  return kCudaSuccess;
}

EXPORT const char* cudaGetErrorString(int e) {
  return e == kCudaSuccess ? "no error" : e == kCudaNotReady ? "device not ready"
                                                             : "invalid argument (fake CUDA)";
}

// ---- NCCL -----------------------------------------------------------------

EXPORT int ncclGetUniqueId(UniqueId* id) {
  static int counter = 0;
  std::memset(id, 0, sizeof(*id));
  std::snprintf(id->internal, sizeof(id->internal), "%s/%d/%d", kMagic,
                static_cast<int>(getpid()), ++counter);
  return kNcclSuccess;
}

EXPORT int ncclCommInitRank(void** comm, int nranks, UniqueId id, int rank) {
  Lock l(fake::mu());
  *comm = nullptr;
  const bool genuine = std::strncmp(id.internal, kMagic, sizeof(kMagic) - 1) == 0;
  auto* c = new fake::Comm;
  std::string error = fake::init_comm(c, &id, sizeof(id), nranks, rank, kNcclSystemError,
                                      kNcclRemoteError);
  if (!genuine) error = "the unique id was not made by ncclGetUniqueId (not broadcast?)";
  if (!error.empty()) {
    fake::complain("ncclCommInitRank: " + error);
    return kNcclInvalidUsage;
  }
  *comm = c;
  return kNcclSuccess;
}

EXPORT int ncclCommAbort(void* comm) { return kNcclSuccess; }   // resources leak with the job
EXPORT int ncclCommDestroy(void* comm) { return kNcclSuccess; }

EXPORT int ncclCommGetAsyncError(void* comm, int* error) {
  Lock l(fake::mu());
  *error = comm_of(comm)->async_error;
  return kNcclSuccess;
}

EXPORT const char* ncclGetErrorString(int r) {
  switch (r) {
    case kNcclSuccess: return "no error";
    case kNcclSystemError: return "unhandled system error (injected by the fake NCCL)";
    case kNcclInvalidArgument: return "invalid argument";
    case kNcclInvalidUsage: return "invalid usage";
    case kNcclRemoteError: return "remote process exited or there was a network error";
    default: return "unknown result code";
  }
}

EXPORT int ncclRedOpCreatePreMulSum(int* op, void* scalar, int dt, int residence, void* comm) {
  Type t;
  if (!type_of(dt, &t) || residence != 1) return kNcclInvalidArgument;  // host scalars only
  g_premul.push_back(fake::load(t, scalar, 0));
  *op = kNcclNumOps + static_cast<int>(g_premul.size()) - 1;
  return kNcclSuccess;
}

EXPORT int ncclRedOpDestroy(int op, void* comm) { return op >= kNcclNumOps ? 0 : kNcclInvalidArgument; }

EXPORT int ncclAllReduce(const void* send, void* recv, size_t count, int dt, int op, void* comm,
                         void* stream) {
  Lock l(fake::mu());
  Type t;
  fake::Op o;
  double scalar = 1;
  if (!type_of(dt, &t) || !op_of(op, &o, &scalar)) return kNcclInvalidArgument;
  const size_t n = count * fake::type_size(t);
  if (!device_buffers(send, n, recv, n, "ncclAllReduce")) return kNcclInvalidArgument;
  return enqueue(stream, fake::allreduce(comm_of(comm), send, recv, count, t, o, scalar));
}

EXPORT int ncclReduce(const void* send, void* recv, size_t count, int dt, int op, int root,
                      void* comm, void* stream) {
  Lock l(fake::mu());
  Type t;
  fake::Op o;
  double scalar = 1;
  if (!type_of(dt, &t) || !op_of(op, &o, &scalar)) return kNcclInvalidArgument;
  const size_t n = count * fake::type_size(t);
  const bool root_here = comm_of(comm)->rank == root;
  if (!device_buffers(send, n, root_here ? recv : send, n, "ncclReduce"))
    return kNcclInvalidArgument;
  return enqueue(stream, fake::allreduce(comm_of(comm), send, recv, count, t, o, scalar, root));
}

EXPORT int ncclReduceScatter(const void* send, void* recv, size_t recv_count, int dt, int op,
                             void* comm, void* stream) {
  Lock l(fake::mu());
  Type t;
  fake::Op o;
  double scalar = 1;
  if (!type_of(dt, &t) || !op_of(op, &o, &scalar)) return kNcclInvalidArgument;
  const size_t part = recv_count * fake::type_size(t);
  if (!device_buffers(send, part * comm_of(comm)->size, recv, part, "ncclReduceScatter"))
    return kNcclInvalidArgument;
  return enqueue(stream, fake::reduce_scatter(comm_of(comm), send, recv, recv_count, t, o, scalar));
}

EXPORT int ncclBroadcast(const void* send, void* recv, size_t count, int dt, int root, void* comm,
                         void* stream) {
  Lock l(fake::mu());
  Type t;
  if (!type_of(dt, &t)) return kNcclInvalidArgument;
  const size_t n = count * fake::type_size(t);
  const bool root_here = comm_of(comm)->rank == root;
  if (!device_buffers(root_here ? send : recv, n, recv, n, "ncclBroadcast"))
    return kNcclInvalidArgument;
  return enqueue(stream, fake::broadcast(comm_of(comm), send, recv, n, root));
}

EXPORT int ncclAllGather(const void* send, void* recv, size_t send_count, int dt, void* comm,
                         void* stream) {
  Lock l(fake::mu());
  Type t;
  if (!type_of(dt, &t)) return kNcclInvalidArgument;
  const size_t n = send_count * fake::type_size(t);
  if (!device_buffers(send, n, recv, n * comm_of(comm)->size, "ncclAllGather"))
    return kNcclInvalidArgument;
  return enqueue(stream, fake::allgather(comm_of(comm), send, recv, n));
}

static int point_to_point(bool sending, void* buf, size_t count, int dt, int peer, void* comm,
                          void* stream) {
  Type t;
  if (!type_of(dt, &t)) return kNcclInvalidArgument;
  const size_t n = count * fake::type_size(t);
  if (!device_buffers(buf, n, buf, n, sending ? "ncclSend" : "ncclRecv"))
    return kNcclInvalidArgument;
  fake::Comm* c = comm_of(comm);
  return enqueue(stream, fake::collective(c, [=](std::vector<MPI_Request>* r) {
    r->resize(1);
    if (sending) MPI_Isend(buf, static_cast<int>(n), MPI_BYTE, peer, 1, c->comm, &(*r)[0]);
    else MPI_Irecv(buf, static_cast<int>(n), MPI_BYTE, peer, 1, c->comm, &(*r)[0]);
  }));
}

EXPORT int ncclSend(const void* send, size_t count, int dt, int peer, void* comm, void* stream) {
  Lock l(fake::mu());
  return point_to_point(true, const_cast<void*>(send), count, dt, peer, comm, stream);
}

EXPORT int ncclRecv(void* recv, size_t count, int dt, int peer, void* comm, void* stream) {
  Lock l(fake::mu());
  return point_to_point(false, recv, count, dt, peer, comm, stream);
}

EXPORT int ncclGroupStart() {
  Lock l(fake::mu());
  ++g_group_depth;
  return kNcclSuccess;
}

// The group's operations start together (so sends and receives to one peer
// cannot deadlock) and finish as one stream operation.
EXPORT int ncclGroupEnd() {
  Lock l(fake::mu());
  if (g_group_depth == 0) return kNcclInvalidUsage;
  if (--g_group_depth > 0 || g_group.empty()) return kNcclSuccess;
  void* stream = g_group.front().first;
  auto works = std::make_shared<std::vector<fake::Work>>();
  for (auto& sw : g_group) works->push_back(std::move(sw.second));
  g_group.clear();
  auto done = std::make_shared<std::vector<bool>>(works->size(), false);
  fake::push(stream, [works, done] {
    bool all = true;
    for (size_t i = 0; i < works->size(); ++i)
      if (!(*done)[i]) all = ((*done)[i] = (*works)[i]()) && all;
    return all;
  });
  return kNcclSuccess;
}
