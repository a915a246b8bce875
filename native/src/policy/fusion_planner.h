// Fusion planning: which ready tensors share one collective.
//
// Input: the ready responses in their agreed order, each reduced to a *fusion
// key* (tensors may share a bucket only when the key matches: same collective,
// dtype, reduce op, scale factors, root) and a byte size. Output: buckets, each
// a list of indices into the input. A bucket holds at most `threshold` bytes,
// except that a single tensor larger than the threshold gets a bucket of its
// own. Buckets are ordered by their first tensor, so communication follows the
// order in which tensors became ready (for training: the order of backward).
//
// A pure function: every rank computes the same plan from the same responses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fuseopt {

struct PlanItem {
  std::string fusion_key;  // empty: never fused (one bucket per tensor)
  int64_t bytes = 0;
};

using Bucket = std::vector<size_t>;

std::vector<Bucket> plan_buckets(const std::vector<PlanItem>& items, int64_t threshold);

}  // namespace fuseopt
