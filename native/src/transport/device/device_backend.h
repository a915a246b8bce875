// The interface a device backend (NCCL for CUDA, HCCL for Ascend NPU)
// implements on top of Backend's collectives.
//
// One object serves one device of this rank, with its own stream and
// communicator (created when the first tensor on that device arrives; see
// backend_registry.h). Everything is enqueued on the backend's stream and
// runs asynchronously, in order: collectives, copies, uploads. Nothing is
// known to be finished until synchronize() returns, which is also where an
// asynchronous error of the library (a peer that failed) becomes an Error
// instead of a hang.
//
// The executor keeps no device arithmetic: the only scaling a backend can do
// on the device is what its library offers (allreduce_scaled); anything else
// goes through host memory (device_executor.cc says when).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "transport/backend.h"

namespace fuseopt {

class MpiWorld;

class DeviceBackend : public Backend {
 public:
  // Makes this backend's device current on the calling (loop) thread.
  virtual void activate() = 0;

  // Device memory on this backend's device. allocate throws Error on failure.
  virtual void* allocate(int64_t bytes) = 0;
  virtual void release(void* p) = 0;

  // Enqueued on the backend's stream: device to device, host to device
  // (host must stay untouched until synchronize), device to host (complete
  // when synchronize returns).
  virtual void copy(void* dst, const void* src, int64_t bytes) = 0;
  virtual void upload(void* dst, const void* host, int64_t bytes) = 0;
  virtual void download(void* host, const void* src, int64_t bytes) = 0;

  // The backend's stream waits for the framework's work: for event if given,
  // else for everything queued on stream so far (NULL: the default stream).
  virtual void wait_for(void* stream, void* event) = 0;

  // Blocks until everything enqueued has finished. Throws Error(BACKEND) on
  // an asynchronous error (the communicator is then unusable).
  virtual void synchronize() = 0;

  // Allreduce whose result is multiplied by factor, computed on the device by
  // the library itself (NCCL: ncclAvg, ncclRedOpCreatePreMulSum). Returns
  // false, having enqueued nothing, when the library cannot do it for this
  // dtype and op; the executor then scales through host memory.
  virtual bool allreduce_scaled(const void* send, void* recv, int64_t count,
                                fuseopt_dtype_t dtype, fuseopt_reduce_op_t op, double factor) {
    return false;
  }
  // The same for a reduce-scatter whose parts are all the same size.
  virtual bool reducescatter_scaled(const void* send, void* recv,
                                    const std::vector<int64_t>& recv_counts,
                                    fuseopt_dtype_t dtype, fuseopt_reduce_op_t op, double factor) {
    return false;
  }

  // A persistent buffer of at least bytes (the fusion buffer), grown on
  // demand. Growing frees the old one, so call it only after synchronize().
  void* fusion_buffer(int64_t bytes);
  int64_t fusion_capacity() const { return fusion_bytes_; }

 protected:
  // For derived destructors, while release() still reaches the library.
  void free_fusion_buffer();

 private:
  void* fusion_ = nullptr;
  int64_t fusion_bytes_ = 0;
};

// What a device backend needs to bootstrap itself.
struct DeviceSetup {
  int device_id = 0;
  int rank = 0, size = 1;          // in the world (the communicator's ranks)
  Backend* host = nullptr;         // MPI over all ranks: broadcasts, agreement
  const MpiWorld* world = nullptr; // topology and node communicators
  bool hierarchical = false;       // FUSEOPT_HIERARCHICAL_ALLREDUCE
};

// A backend whose library is loaded but which is not yet connected.
class DeviceBackendFactory {
 public:
  virtual ~DeviceBackendFactory() = default;
  // Collective: creates the communicator; returns the ready backend.
  virtual std::unique_ptr<DeviceBackend> connect(const DeviceSetup& setup) = 0;
};

// Everyone learns whether any rank failed a local step (loading a library,
// allocating), so that all skip the collective that follows together instead
// of some waiting for the others forever. Returns "" when no rank failed,
// else "rank R: <R's message>" for the first rank that did, on every rank.
// Collective over host (MPI).
std::string first_error_everywhere(Backend& host, int size, const std::string& mine);

}  // namespace fuseopt
