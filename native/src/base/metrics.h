// Counters the loop thread keeps for fuseopt_metrics: what was reduced, in how
// many collectives, and where the loop's time went. Written by the loop thread
// only and read by any thread, so plain relaxed atomics suffice.
#pragma once

#include <atomic>
#include <cstdint>

#include "fuseopt/fuseopt.h"

namespace fuseopt {

struct Metrics {
  std::atomic<int64_t> rounds{0};             // negotiation rounds posted
  std::atomic<int64_t> full_negotiations{0};  // rounds that gathered requests to rank 0
  std::atomic<int64_t> cache_hits{0};         // enqueued tensors found in the response cache
  std::atomic<int64_t> cache_misses{0};
  std::atomic<int64_t> tensors{0};            // tensors completed by a collective
  std::atomic<int64_t> collectives{0};        // buckets: one backend call (set) each
  std::atomic<int64_t> bytes{0};              // this rank's payload bytes in those buckets
  std::atomic<int64_t> stalls{0};             // stall warnings logged on this rank
  std::atomic<int64_t> negotiation_ns{0};     // time in rounds before the collectives
  std::atomic<int64_t> execution_ns{0};       // time running collectives
  std::atomic<int64_t> fusion_threshold_bytes{0};  // settings in use (autotune moves them)
  std::atomic<int64_t> cycle_time_us{0};
  std::atomic<int64_t> autotune_state{0};     // fuseopt_metrics_t.autotune_state

  void add(std::atomic<int64_t>& counter, int64_t n) {
    counter.fetch_add(n, std::memory_order_relaxed);
  }
  void fill(fuseopt_metrics_t* out) const;
};

}  // namespace fuseopt
