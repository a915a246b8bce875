// Loading NCCL and the CUDA runtime (see nccl_api.h).
#include "nccl_api.h"

#include "device_free.h"

namespace fuseopt {
namespace nccl {

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
       FUSEOPT_SYMBOL(c, cudaStreamDestroy), FUSEOPT_SYMBOL(c, cudaStreamQuery),
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
