// CUDA memory over NCCL, loaded at run time (libnccl.so.2 and the CUDA
// runtime; FUSEOPT_NCCL_LIBRARY / FUSEOPT_CUDART_LIBRARY name other files).
// One NcclBackend per CUDA device of this rank: its communicator, a
// non-blocking stream of its own, and the events it waits on.
#pragma once

#include <memory>

#include "transport/device/device_backend.h"

namespace fuseopt {

// Loads both libraries and resolves every symbol (backend_registry.cc's table).
std::unique_ptr<DeviceBackendFactory> open_nccl();

}  // namespace fuseopt
