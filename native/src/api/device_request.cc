// The device part of a request: which kind of memory its buffers are in,
// and (local to this rank) the device index, stream and ready event.
//
// The device fields were appended to fuseopt_request_t after ABI 1 first
// shipped. A caller compiled against the older header passes the older
// struct_size; it gets host memory, and arrays of its requests are walked at
// its own stride.
#include <cstddef>
#include <cstring>
#include <string>

#include "api/context.h"
#include "base/error.h"

namespace fuseopt {
namespace {

// The end of the last field of the first release: num_splits.
constexpr size_t kFirstRequestSize =
    offsetof(fuseopt_request_t, num_splits) + sizeof(int32_t);

size_t checked_size(const fuseopt_request_t& q) {
  if (q.struct_size < kFirstRequestSize)
    throw Error(FUSEOPT_INVALID_ARG,
                "request.struct_size " + std::to_string(q.struct_size) +
                    " is smaller than any fuseopt_request_t (" +
                    std::to_string(kFirstRequestSize) + " bytes)");
  return q.struct_size;
}

}  // namespace

fuseopt_request_t Context::request_at(const fuseopt_request_t* requests, int64_t i) {
  const size_t stride = checked_size(requests[0]);
  const char* p = reinterpret_cast<const char*>(requests) + stride * i;
  const size_t size = reinterpret_cast<const fuseopt_request_t*>(p)->struct_size;
  if (size != stride)
    throw Error(FUSEOPT_INVALID_ARG, "requests of one call must share one struct_size");
  fuseopt_request_t q;
  std::memset(&q, 0, sizeof(q));  // fields a shorter struct lacks: host memory
  std::memcpy(&q, p, size < sizeof(q) ? size : sizeof(q));
  return q;
}

void Context::take_device(const fuseopt_request_t& q, Entry* e) const {
  if (q.struct_size < offsetof(fuseopt_request_t, ready_event) + sizeof(void*)) return;
  if (q.device_type < 0 || q.device_type >= FUSEOPT_DEVICE_COUNT)
    throw Error(FUSEOPT_INVALID_ARG, "tensor '" + e->spec.name + "': unknown device type " +
                                         std::to_string(q.device_type));
  e->spec.device = static_cast<fuseopt_device_t>(q.device_type);
  if (e->spec.device == FUSEOPT_DEVICE_HOST) return;
  if (q.device_id < 0)
    throw Error(FUSEOPT_INVALID_ARG, "tensor '" + e->spec.name + "': negative device index");
  // Which buffers a device bucket uses must not depend on a rank's own
  // pointers (every rank's fusion buffer must grow in the same buckets).
  if (e->spec.collective == FUSEOPT_REDUCESCATTER && q.input == q.output && q.input)
    throw Error(FUSEOPT_INVALID_ARG, "reducescatter '" + e->spec.name +
                                         "': input and output must differ for device memory");
  e->device_id = q.device_id;
  e->stream = q.stream;
  e->ready_event = q.ready_event;
}

}  // namespace fuseopt
