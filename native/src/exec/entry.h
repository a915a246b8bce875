// A tensor operation as it lives on its own rank, from enqueue until its
// handle completes: the agreed-upon spec plus the caller's buffers and where
// it stands in negotiation.
#pragma once

#include <cstdint>
#include <vector>

#include "base/message.h"

namespace fuseopt {

struct Entry {
  int64_t handle = 0;
  TensorSpec spec;
  const void* input = nullptr;
  void* output = nullptr;
  // A float32 tensor that travels as spec.dtype, a 16-bit float
  // (fuseopt_request_t::wire): the executor converts on its copies.
  bool narrowed = false;
  std::vector<int64_t> splits;  // alltoall rows per destination rank
  int32_t process_set = 0;      // its set's id (process_set.h); 0: every rank

  enum class State {
    kNew,     // not yet announced: will go to the coordinator in full
    kSent,    // announced in full; the coordinator's table holds it
    kCached,  // announced as bit `slot` of the response cache
  };
  State state = State::kNew;
  int64_t slot = -1;
  double enqueued_s = 0;  // now_s() when the framework thread enqueued it
  bool stand_in = false;  // a joined rank's placeholder (identity values, no handle)

  // Device requests (spec.device != host): this rank's device index, and the
  // framework stream and event after which the input is ready. Local facts,
  // not negotiated: each rank has its own device.
  int32_t device_id = 0;
  void* stream = nullptr;
  void* ready_event = nullptr;

  // The element type of input and output (spec.dtype is what travels).
  fuseopt_dtype_t memory_dtype() const { return narrowed ? FUSEOPT_FLOAT32 : spec.dtype; }
};

}  // namespace fuseopt
