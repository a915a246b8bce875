// Freeing device memory that the runtime handed to the caller (the results
// of allgather/alltoall on a device), from any thread, possibly after the
// backend that allocated it is gone. Each device backend records its
// library's free function (cudaFree, aclrtFree) here when it loads the
// library: a process-wide table, as the loaded libraries themselves are.
#pragma once

#include "fuseopt/fuseopt.h"

namespace fuseopt {

using DeviceFreeFn = int (*)(void*);
void set_device_free(fuseopt_device_t device, DeviceFreeFn fn);

// Returns 0 on success; nonzero if the library reported an error or no
// backend of that kind was ever loaded. Host memory is std::free'd.
int free_memory(fuseopt_device_t device, void* p);

}  // namespace fuseopt
