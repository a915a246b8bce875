// Runs the buckets of device tensors (CUDA, NPU) that Executor hands over:
// the same negotiated, fused work as the host path, with every byte moved
// by the device backend on its own stream (device_backend.h), after waiting
// for the framework's stream, and one synchronize per bucket before the
// handles complete. Host memory is touched only to apply scale factors the
// library cannot apply itself (see allreduce() in the .cc).
//
// Before a bucket runs, every rank agrees that it can run it (its library
// loads, its device matches the one it already uses, its buffers could be
// allocated), so a rank that cannot fails the bucket with the same message
// everywhere instead of leaving the others inside a collective.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "exec/backend_registry.h"
#include "exec/handle_table.h"
#include "exec/work.h"

namespace fuseopt {

class DeviceExecutor {
 public:
  // complete: the Executor's, which releases handles after the bucket is
  // counted and traced. Failures complete their handles at once.
  using CompleteFn = std::function<void(Work&, OwnedOutput)>;
  DeviceExecutor(Backend& host, HandleTable& handles, const MpiWorld& world, bool hierarchical,
                 CompleteFn complete);
  // Completes the bucket's handles; throws Error when a backend fails
  // mid-collective (fatal for the runtime, like a host backend failure).
  void run(std::vector<Work*>& bucket);

 private:
  DeviceBackend* backend_for(std::vector<Work*>& bucket);  // nullptr: failed everywhere
  std::string check_device(const std::vector<Work*>& bucket, int* device_id);
  bool prepare(DeviceBackend& b, std::vector<Work*>& bucket);
  void* agreed_buffer(DeviceBackend& b, int64_t bytes, std::vector<Work*>& bucket);
  void allreduce(DeviceBackend& b, std::vector<Work*>& bucket);
  void staged_allreduce(DeviceBackend& b, std::vector<Work*>& bucket, char* buf, int64_t total);
  void broadcast(DeviceBackend& b, std::vector<Work*>& bucket);
  void allgather(DeviceBackend& b, Work& w);
  void alltoall(DeviceBackend& b, Work& w);
  void reducescatter(DeviceBackend& b, Work& w);
  // buf[i] = buf[i] * factor (then / size for an integer average), through
  // host memory: download, scale, upload.
  void scale_through_host(DeviceBackend& b, void* buf, const TensorSpec& s, int64_t count,
                          double factor, bool divide_by_size);
  OwnedOutput agreed_output(DeviceBackend& b, Work& w, int64_t bytes, bool* ok);
  void complete(Work& w, OwnedOutput output = OwnedOutput());
  void fail(std::vector<Work*>& bucket, fuseopt_status_t status, const std::string& message);

  Backend& host_;
  HandleTable& handles_;
  CompleteFn complete_;
  const MpiWorld& world_;
  bool hierarchical_;
  int rank_, size_;
  DeviceBackends backends_;
  std::map<std::string, std::unique_ptr<DeviceBackendFactory>> opened_;  // by backend name
  std::vector<void*> temporaries_;  // device copies of stand-ins, freed after each bucket
  std::vector<char> staging_;       // host copy for scaling
};

}  // namespace fuseopt
