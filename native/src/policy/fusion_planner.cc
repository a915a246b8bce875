#include "policy/fusion_planner.h"

#include <map>

namespace fuseopt {

std::vector<Bucket> plan_buckets(const std::vector<PlanItem>& items, int64_t threshold) {
  std::vector<Bucket> buckets;
  std::vector<int64_t> bucket_bytes;
  std::map<std::string, size_t> open;  // fusion key -> index of its open bucket
  for (size_t i = 0; i < items.size(); ++i) {
    const PlanItem& item = items[i];
    if (!item.fusion_key.empty() && threshold > 0) {
      auto it = open.find(item.fusion_key);
      if (it != open.end() && bucket_bytes[it->second] + item.bytes <= threshold) {
        buckets[it->second].push_back(i);
        bucket_bytes[it->second] += item.bytes;
        continue;
      }
    }
    buckets.push_back({i});
    bucket_bytes.push_back(item.bytes);
    // A tensor that fills a bucket on its own leaves the open bucket open.
    if (!item.fusion_key.empty() && threshold > 0 && item.bytes < threshold)
      open[item.fusion_key] = buckets.size() - 1;
  }
  return buckets;
}

}  // namespace fuseopt
