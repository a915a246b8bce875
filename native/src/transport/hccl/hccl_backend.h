// Ascend NPU memory over HCCL, loaded at run time (libhccl.so and
// libascendcl.so from CANN; FUSEOPT_HCCL_LIBRARY / FUSEOPT_ACL_LIBRARY name
// other files). One HcclBackend per NPU of this rank: its communicator and
// an ACL stream of its own.
#pragma once

#include <memory>

#include "transport/device/device_backend.h"

namespace fuseopt {

// Loads both libraries and resolves every symbol (backend_registry.cc's table).
std::unique_ptr<DeviceBackendFactory> open_hccl();

}  // namespace fuseopt
