#include "exec/backend_registry.h"

#include <cstdlib>

#include "base/error.h"
#include "transport/hccl/hccl_backend.h"
#include "transport/nccl/nccl_backend.h"

namespace fuseopt {
namespace {

// Every device backend there is. Adding one is a line here and its files.
const DeviceBackendEntry kDeviceBackends[] = {
    {"nccl", FUSEOPT_DEVICE_CUDA, &open_nccl},
    {"hccl", FUSEOPT_DEVICE_NPU, &open_hccl},
};

// Environment knobs, declared once. Library paths are read where each
// library is opened (nccl_backend.cc, hccl_backend.cc).
const char* override_variable(fuseopt_device_t device) {
  switch (device) {
    case FUSEOPT_DEVICE_CUDA: return "FUSEOPT_CUDA_BACKEND";  // backend name for CUDA tensors
    case FUSEOPT_DEVICE_NPU: return "FUSEOPT_NPU_BACKEND";    // backend name for NPU tensors
    default: return nullptr;
  }
}

}  // namespace

std::string backend_name_for(fuseopt_device_t device) {
  const char* var = override_variable(device);
  const char* value = var ? std::getenv(var) : nullptr;
  if (value && *value) return value;
  for (const DeviceBackendEntry& e : kDeviceBackends)
    if (e.default_for == device) return e.name;
  return "mpi";
}

std::unique_ptr<DeviceBackendFactory> open_device_backend(const std::string& name) {
  std::string known;
  for (const DeviceBackendEntry& e : kDeviceBackends) {
    if (name == e.name) return e.open();
    known += std::string(known.empty() ? "" : ", ") + e.name;
  }
  throw Error(FUSEOPT_UNSUPPORTED, "no device backend named '" + name + "' (known: " + known +
                                       "; FUSEOPT_CUDA_BACKEND / FUSEOPT_NPU_BACKEND choose one)");
}

DeviceBackend* DeviceBackends::find(fuseopt_device_t device, int device_id) {
  auto it = backends_.find({device, device_id});
  return it == backends_.end() ? nullptr : it->second.get();
}

void DeviceBackends::add(fuseopt_device_t device, int device_id,
                         std::unique_ptr<DeviceBackend> backend) {
  backends_[{device, device_id}] = std::move(backend);
}

int DeviceBackends::bound_device(fuseopt_device_t device) const {
  for (const auto& kv : backends_)
    if (kv.first.first == device) return kv.first.second;
  return -1;
}

}  // namespace fuseopt
