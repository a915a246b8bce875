// The part of NCCL's and the CUDA runtime's C API that the NCCL backend
// calls, as tables of function pointers filled by dlopen/dlsym (dynlib.h).
// fuseopt builds without CUDA headers, so the types are restated here with
// the layouts and enum values of nccl.h (2.11 and later) and
// cuda_runtime_api.h; enums travel as int, which is how C passes them.
#pragma once

#include <cstddef>
#include <memory>

#include "base/error.h"
#include "transport/device/dynlib.h"

namespace fuseopt {
namespace nccl {

using Result = int;      // ncclResult_t
using Comm = void*;      // ncclComm_t
using Stream = void*;    // cudaStream_t
using Event = void*;     // cudaEvent_t

constexpr Result kSuccess = 0;           // ncclSuccess
constexpr Result kInProgress = 7;        // ncclInProgress (non-blocking communicators)

// ncclUniqueId: 128 opaque bytes, passed by value to ncclCommInitRank.
struct UniqueId {
  char internal[128];
};
static_assert(sizeof(UniqueId) == 128, "ncclUniqueId is 128 bytes");

// ncclDataType_t
enum DataType : int {
  kInt8 = 0, kUint8 = 1, kInt32 = 2, kUint32 = 3, kInt64 = 4, kUint64 = 5,
  kFloat16 = 6, kFloat32 = 7, kFloat64 = 8, kBfloat16 = 9,
};
// ncclRedOp_t (custom ops from ncclRedOpCreatePreMulSum come after kAvg)
enum RedOp : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };
constexpr int kScalarHostImmediate = 1;  // ncclScalarResidence_t

// fuseopt's dtypes and reduce ops as NCCL's (Error(INTERNAL) for others).
DataType data_type(fuseopt_dtype_t d);
RedOp red_op(fuseopt_reduce_op_t op);

struct Api {
  Result (*ncclGetUniqueId)(UniqueId* id);
  Result (*ncclCommInitRank)(Comm* comm, int nranks, UniqueId id, int rank);
  Result (*ncclCommAbort)(Comm comm);
  Result (*ncclCommDestroy)(Comm comm);
  Result (*ncclCommGetAsyncError)(Comm comm, Result* async_error);
  const char* (*ncclGetErrorString)(Result result);
  Result (*ncclAllReduce)(const void* send, void* recv, size_t count, int dtype, int op,
                          Comm comm, Stream stream);
  Result (*ncclBroadcast)(const void* send, void* recv, size_t count, int dtype, int root,
                          Comm comm, Stream stream);
  Result (*ncclReduce)(const void* send, void* recv, size_t count, int dtype, int op, int root,
                       Comm comm, Stream stream);
  Result (*ncclAllGather)(const void* send, void* recv, size_t send_count, int dtype, Comm comm,
                          Stream stream);
  Result (*ncclReduceScatter)(const void* send, void* recv, size_t recv_count, int dtype, int op,
                              Comm comm, Stream stream);
  Result (*ncclSend)(const void* send, size_t count, int dtype, int peer, Comm comm,
                     Stream stream);
  Result (*ncclRecv)(void* recv, size_t count, int dtype, int peer, Comm comm, Stream stream);
  Result (*ncclGroupStart)();
  Result (*ncclGroupEnd)();
  Result (*ncclRedOpCreatePreMulSum)(int* op, void* scalar, int dtype, int residence, Comm comm);
  Result (*ncclRedOpDestroy)(int op, Comm comm);
};

}  // namespace nccl

namespace cuda {

using Error = int;  // cudaError_t
constexpr Error kSuccess = 0;
constexpr Error kNotReady = 600;                 // cudaErrorNotReady
constexpr unsigned kStreamNonBlocking = 0x1;     // cudaStreamNonBlocking
constexpr unsigned kEventDisableTiming = 0x2;    // cudaEventDisableTiming
enum MemcpyKind : int { kHostToDevice = 1, kDeviceToHost = 2, kDeviceToDevice = 3 };

struct Api {
  Error (*cudaSetDevice)(int device);
  Error (*cudaMalloc)(void** ptr, size_t bytes);
  Error (*cudaFree)(void* ptr);
  Error (*cudaMemcpyAsync)(void* dst, const void* src, size_t bytes, int kind, void* stream);
  Error (*cudaStreamCreateWithFlags)(void** stream, unsigned flags);
  Error (*cudaStreamDestroy)(void* stream);
  Error (*cudaStreamWaitEvent)(void* stream, void* event, unsigned flags);
  Error (*cudaEventCreateWithFlags)(void** event, unsigned flags);
  Error (*cudaEventRecord)(void* event, void* stream);
  Error (*cudaEventDestroy)(void* event);
  Error (*cudaEventQuery)(void* event);
  const char* (*cudaGetErrorString)(Error error);
};

}  // namespace cuda

namespace nccl {

// Both libraries, loaded and resolved; shared by every NCCL backend object
// of the process. The loaded libraries are never unloaded (dynlib.h).
struct Libraries {
  std::unique_ptr<DynLib> cudart_lib, nccl_lib;
  cuda::Api cuda{};
  Api nccl{};
};

// Opens libcudart and libnccl (or FUSEOPT_CUDART_LIBRARY /
// FUSEOPT_NCCL_LIBRARY) and resolves every symbol above; throws
// Error(UNSUPPORTED) naming the library, or the first missing symbol, and
// how to install it.
std::shared_ptr<Libraries> load_libraries();

}  // namespace nccl
}  // namespace fuseopt
