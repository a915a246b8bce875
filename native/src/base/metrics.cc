#include "base/metrics.h"

namespace fuseopt {

void Metrics::fill(fuseopt_metrics_t* out) const {
  auto get = [](const std::atomic<int64_t>& c) { return c.load(std::memory_order_relaxed); };
  out->rounds = get(rounds);
  out->full_negotiations = get(full_negotiations);
  out->cache_hits = get(cache_hits);
  out->cache_misses = get(cache_misses);
  out->tensors = get(tensors);
  out->collectives = get(collectives);
  out->bytes = get(bytes);
  out->stalls = get(stalls);
  out->negotiation_s = get(negotiation_ns) * 1e-9;
  out->execution_s = get(execution_ns) * 1e-9;
  out->fusion_threshold_bytes = get(fusion_threshold_bytes);
  out->cycle_time_us = get(cycle_time_us);
  out->autotune_state = get(autotune_state);
}

}  // namespace fuseopt
