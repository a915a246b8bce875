#include "policy/response_cache.h"

#include <algorithm>

namespace fuseopt {

bool is_cacheable(const Response& r) {
  return !r.is_error() && r.joined.empty() && r.spec.collective != FUSEOPT_BARRIER &&
         r.spec.collective != FUSEOPT_JOIN && r.spec.collective != FUSEOPT_PROCESS_SET_ADD &&
         r.spec.collective != FUSEOPT_PROCESS_SET_REMOVE;
}

ResponseCache::Lookup ResponseCache::lookup(const TensorSpec& spec, int rank,
                                            int64_t* slot) const {
  auto it = by_name_.find(spec.name);
  if (it == by_name_.end()) return Lookup::kMiss;
  *slot = it->second;
  const Response& cached = slots_[it->second].response;
  if (!cached.spec.compatible_with(spec)) return Lookup::kStale;
  // Allgather/alltoall responses record every rank's first dimension, and the
  // cached answer is only right if ours is unchanged.
  if (spec.first_dim_may_differ() && !spec.shape.empty() &&
      cached.first_dims[rank] != spec.shape[0])
    return Lookup::kStale;
  return Lookup::kHit;
}

bool ResponseCache::holds(int64_t slot, const std::string& name) const {
  return slot >= 0 && slot < (int64_t)slots_.size() && slots_[slot].used &&
         slots_[slot].response.spec.name == name;
}

void ResponseCache::touch(int64_t slot) {
  Slot& s = slots_[slot];
  lru_.splice(lru_.begin(), lru_, s.lru_pos);
}

int64_t ResponseCache::put(const Response& response) {
  if (capacity_ <= 0) return -1;
  auto it = by_name_.find(response.spec.name);
  if (it != by_name_.end()) erase(it->second);
  if ((int64_t)by_name_.size() >= capacity_) erase(lru_.back());
  int64_t slot;
  if (!free_slots_.empty()) {
    // Reuse the lowest free slot so every rank picks the same one.
    auto low = std::min_element(free_slots_.begin(), free_slots_.end());
    slot = *low;
    free_slots_.erase(low);
  } else {
    slot = (int64_t)slots_.size();
    slots_.emplace_back();
  }
  Slot& s = slots_[slot];
  s.used = true;
  s.response = response;
  lru_.push_front(slot);
  s.lru_pos = lru_.begin();
  by_name_[response.spec.name] = slot;
  return slot;
}

void ResponseCache::erase(int64_t slot) {
  Slot& s = slots_[slot];
  if (!s.used) return;
  by_name_.erase(s.response.spec.name);
  lru_.erase(s.lru_pos);
  s.used = false;
  s.response = Response();
  free_slots_.push_back(slot);
}

std::vector<int64_t> ResponseCache::used_slots() const {
  std::vector<int64_t> out;
  for (int64_t s = 0; s < (int64_t)slots_.size(); ++s)
    if (slots_[s].used) out.push_back(s);
  return out;
}

}  // namespace fuseopt
