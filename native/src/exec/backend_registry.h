// Which backend serves which memory, by name.
//
//   host memory  -> "mpi"   (created by the loop; always present)
//   CUDA memory  -> "nccl"  (FUSEOPT_CUDA_BACKEND overrides the name)
//   NPU memory   -> "hccl"  (FUSEOPT_NPU_BACKEND overrides the name)
//
// Device backends are made by factories listed in one table
// (backend_registry.cc), one object per device of this rank, on first use.
// Making one is split in two so that every rank can agree before anything
// collective happens: open() loads the library and checks the device, which
// can fail on one rank alone; connect() then creates the communicator, which
// every rank does together (NCCL's unique id / HCCL's root info is broadcast
// from rank 0 over the host backend, i.e. MPI).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "transport/device/device_backend.h"
#include "transport/device/device_free.h"

namespace fuseopt {

using OpenFn = std::unique_ptr<DeviceBackendFactory> (*)();

struct DeviceBackendEntry {
  const char* name;
  fuseopt_device_t default_for;  // the device kind it serves unless overridden
  OpenFn open;                   // loads the libraries; throws Error(UNSUPPORTED)
};

// The backend name for a device kind: the environment override or the default.
std::string backend_name_for(fuseopt_device_t device);

// Loads the libraries of the named backend. Throws Error(UNSUPPORTED) for an
// unknown name (listing the known ones) or a library that cannot be loaded.
std::unique_ptr<DeviceBackendFactory> open_device_backend(const std::string& name);

// The connected device backends of one rank, by (kind, device index).
class DeviceBackends {
 public:
  // nullptr if not yet connected.
  DeviceBackend* find(fuseopt_device_t device, int device_id);
  void add(fuseopt_device_t device, int device_id, std::unique_ptr<DeviceBackend> backend);
  // The device index already in use for a kind, or -1.
  int bound_device(fuseopt_device_t device) const;

 private:
  std::map<std::pair<int, int>, std::unique_ptr<DeviceBackend>> backends_;
};

}  // namespace fuseopt
