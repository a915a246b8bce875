// Loading NCCL and the CUDA runtime, and fuseopt's enums as NCCL's (see
// nccl_api.h).
#include "transport/nccl/nccl_api.h"

#include "transport/device/device_free.h"

namespace fuseopt {
namespace nccl {

DataType data_type(fuseopt_dtype_t d) {
  switch (d) {
    case FUSEOPT_UINT8: return kUint8;
    case FUSEOPT_INT8: return kInt8;
    case FUSEOPT_INT32: return kInt32;
    case FUSEOPT_INT64: return kInt64;
    case FUSEOPT_FLOAT16: return kFloat16;
    case FUSEOPT_BFLOAT16: return kBfloat16;
    case FUSEOPT_FLOAT32: return kFloat32;
    case FUSEOPT_FLOAT64: return kFloat64;
    case FUSEOPT_INT16:
    case FUSEOPT_UINT16:
      throw Error(FUSEOPT_UNSUPPORTED, "NCCL has no 16-bit integer type: reduce int16/uint16 "
                                       "tensors on the host, or cast them to int32");
    default: throw Error(FUSEOPT_INTERNAL, "nccl: unknown dtype");
  }
}

RedOp red_op(fuseopt_reduce_op_t op) {
  switch (op) {
    case FUSEOPT_SUM: return kSum;
    case FUSEOPT_AVERAGE: return kAvg;
    case FUSEOPT_MIN: return kMin;
    case FUSEOPT_MAX: return kMax;
    case FUSEOPT_PRODUCT: return kProd;
    default: throw Error(FUSEOPT_INTERNAL, "nccl: unknown reduce op");
  }
}

std::shared_ptr<Libraries> load_libraries() {
  auto libs = std::make_shared<Libraries>();
  libs->cudart_lib.reset(new DynLib(
      "FUSEOPT_CUDART_LIBRARY", {"libcudart.so.12", "libcudart.so.11.0", "libcudart.so"},
      "CUDA tensors need the CUDA runtime: it comes with PyTorch's CUDA wheels, the CUDA "
      "toolkit, or `pip install nvidia-cuda-runtime-cu12`."));
  cuda::Api& c = libs->cuda;
  libs->cudart_lib->resolve(
      {FUSEOPT_SYMBOL(c, cudaSetDevice), FUSEOPT_SYMBOL(c, cudaMalloc), FUSEOPT_SYMBOL(c, cudaFree),
       FUSEOPT_SYMBOL(c, cudaMemcpyAsync), FUSEOPT_SYMBOL(c, cudaStreamCreateWithFlags),
       FUSEOPT_SYMBOL(c, cudaStreamDestroy), FUSEOPT_SYMBOL(c, cudaEventQuery),
       FUSEOPT_SYMBOL(c, cudaStreamWaitEvent), FUSEOPT_SYMBOL(c, cudaEventCreateWithFlags),
       FUSEOPT_SYMBOL(c, cudaEventRecord), FUSEOPT_SYMBOL(c, cudaEventDestroy),
       FUSEOPT_SYMBOL(c, cudaGetErrorString)});
  libs->nccl_lib.reset(new DynLib(
      "FUSEOPT_NCCL_LIBRARY", {"libnccl.so.2"},
      "CUDA tensors are reduced with NCCL: install it with `pip install nvidia-nccl-cu12` "
      "(CUDA 12; nvidia-nccl-cu11 for CUDA 11), or move the tensors to the CPU."));
  Api& n = libs->nccl;
  libs->nccl_lib->resolve(
      {FUSEOPT_SYMBOL(n, ncclGetUniqueId), FUSEOPT_SYMBOL(n, ncclCommInitRank),
       FUSEOPT_SYMBOL(n, ncclCommAbort), FUSEOPT_SYMBOL(n, ncclCommDestroy),
       FUSEOPT_SYMBOL(n, ncclCommGetAsyncError), FUSEOPT_SYMBOL(n, ncclGetErrorString),
       FUSEOPT_SYMBOL(n, ncclAllReduce), FUSEOPT_SYMBOL(n, ncclBroadcast),
       FUSEOPT_SYMBOL(n, ncclReduce), FUSEOPT_SYMBOL(n, ncclAllGather),
       FUSEOPT_SYMBOL(n, ncclReduceScatter), FUSEOPT_SYMBOL(n, ncclSend),
       FUSEOPT_SYMBOL(n, ncclRecv), FUSEOPT_SYMBOL(n, ncclGroupStart),
       FUSEOPT_SYMBOL(n, ncclGroupEnd), FUSEOPT_SYMBOL(n, ncclRedOpCreatePreMulSum),
       FUSEOPT_SYMBOL(n, ncclRedOpDestroy)});
  set_device_free(FUSEOPT_DEVICE_CUDA, c.cudaFree);
  return libs;
}

}  // namespace nccl
}  // namespace fuseopt
