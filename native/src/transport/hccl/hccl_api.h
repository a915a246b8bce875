// The part of HCCL's and AscendCL's (ACL) C API that the HCCL backend calls,
// as tables of function pointers filled by dlopen/dlsym (dynlib.h). Types are
// restated with the layouts and enum values of CANN's hccl_types.h and
// acl_rt.h; enums travel as int, which is how C passes them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fuseopt {
namespace hccl {

using Result = int;    // HcclResult
using Comm = void*;    // HcclComm
using Stream = void*;  // aclrtStream

constexpr Result kSuccess = 0;  // HCCL_SUCCESS

// HcclRootInfo: HCCL_ROOT_INFO_BYTES (4108) opaque bytes.
struct RootInfo {
  char internal[4108];
};
static_assert(sizeof(RootInfo) == 4108, "HcclRootInfo is 4108 bytes");

// HcclDataType
enum DataType : int {
  kInt8 = 0, kInt16 = 1, kInt32 = 2, kFp16 = 3, kFp32 = 4, kInt64 = 5, kUint64 = 6,
  kUint8 = 7, kUint16 = 8, kUint32 = 9, kFp64 = 10, kBfp16 = 11,
};
// HcclReduceOp (no average, no pre-multiplied sum)
enum ReduceOp : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3 };

struct Api {
  Result (*HcclGetRootInfo)(RootInfo* root_info);
  Result (*HcclCommInitRootInfo)(uint32_t nranks, const RootInfo* root_info, uint32_t rank,
                                 Comm* comm);
  Result (*HcclCommDestroy)(Comm comm);
  Result (*HcclGetCommAsyncError)(Comm comm, Result* async_error);
  const char* (*HcclGetErrorString)(Result code);
  Result (*HcclAllReduce)(void* send, void* recv, uint64_t count, int dtype, int op, Comm comm,
                          Stream stream);
  Result (*HcclBroadcast)(void* buf, uint64_t count, int dtype, uint32_t root, Comm comm,
                          Stream stream);
  Result (*HcclAllGather)(void* send, void* recv, uint64_t send_count, int dtype, Comm comm,
                          Stream stream);
  Result (*HcclReduceScatter)(void* send, void* recv, uint64_t recv_count, int dtype, int op,
                              Comm comm, Stream stream);
  // Counts and displacements are uint64_t arrays, in elements of the type.
  Result (*HcclAlltoAllV)(const void* send, const void* send_counts, const void* send_displs,
                          int send_type, const void* recv, const void* recv_counts,
                          const void* recv_displs, int recv_type, Comm comm, Stream stream);
};

}  // namespace hccl

namespace acl {

using Error = int;  // aclError
constexpr Error kSuccess = 0;
constexpr Error kRepeatInitialize = 100002;  // ACL_ERROR_REPEAT_INITIALIZE: torch_npu did it
constexpr int kMallocHugeFirst = 0;          // ACL_MEM_MALLOC_HUGE_FIRST
constexpr int kEventRecordedComplete = 1;    // ACL_EVENT_RECORDED_STATUS_COMPLETE
enum MemcpyKind : int { kHostToDevice = 1, kDeviceToHost = 2, kDeviceToDevice = 3 };

struct Api {
  Error (*aclInit)(const char* config_path);
  Error (*aclrtSetDevice)(int32_t device);
  Error (*aclrtMalloc)(void** ptr, size_t bytes, int policy);
  Error (*aclrtFree)(void* ptr);
  Error (*aclrtMemcpyAsync)(void* dst, size_t dst_max, const void* src, size_t bytes, int kind,
                            void* stream);
  Error (*aclrtCreateStream)(void** stream);
  Error (*aclrtDestroyStream)(void* stream);
  Error (*aclrtCreateEvent)(void** event);
  Error (*aclrtDestroyEvent)(void* event);
  Error (*aclrtRecordEvent)(void* event, void* stream);
  Error (*aclrtStreamWaitEvent)(void* stream, void* event);
  Error (*aclrtQueryEventStatus)(void* event, int* status);
  const char* (*aclGetRecentErrMsg)();
};

}  // namespace acl
}  // namespace fuseopt
