#include "transport/device/device_free.h"

#include <atomic>

#include "transport/output_pool.h"

namespace fuseopt {
namespace {

std::atomic<DeviceFreeFn> g_device_free[FUSEOPT_DEVICE_COUNT];

}  // namespace

void set_device_free(fuseopt_device_t device, DeviceFreeFn fn) {
  if (device > FUSEOPT_DEVICE_HOST && device < FUSEOPT_DEVICE_COUNT) g_device_free[device] = fn;
}

int free_memory(fuseopt_device_t device, void* p) {
  if (!p) return 0;
  if (device == FUSEOPT_DEVICE_HOST) {
    output_free(p);
    return 0;
  }
  if (device < 0 || device >= FUSEOPT_DEVICE_COUNT) return -1;
  DeviceFreeFn fn = g_device_free[device];
  return fn ? fn(p) : -1;
}

}  // namespace fuseopt
