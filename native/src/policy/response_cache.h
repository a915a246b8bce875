// Response cache: steady-state negotiation without names.
//
// Training submits the same tensors every step. After a name's first
// negotiation its response is stored in a numbered *slot*, identically on
// every rank (all ranks apply the same updates in the same order). From then
// on a rank announces "slot k is ready here" as one bit, and one bitwise-AND
// allreduce tells everyone which slots are ready everywhere.
//
// A rank whose tensor no longer matches the cached response (new shape, say)
// reports the slot *invalid*; every rank then evicts it and renegotiates the
// name in full. Eviction when full is least-recently-used, and deterministic.
//
// Pure bookkeeping, unit-tested without ranks.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/message.h"

namespace fuseopt {

class ResponseCache {
 public:
  enum class Lookup { kHit, kMiss, kStale };

  explicit ResponseCache(int64_t capacity) : capacity_(capacity) {}

  int64_t capacity() const { return capacity_; }
  size_t size() const { return by_name_.size(); }

  // Whether the cached response for spec.name fits this rank's request.
  // On kHit and kStale *slot is the cached slot.
  Lookup lookup(const TensorSpec& spec, int rank, int64_t* slot) const;

  // Whether slot still holds the response for name.
  bool holds(int64_t slot, const std::string& name) const;

  const Response& get(int64_t slot) const { return slots_[slot].response; }

  // Marks a slot as just used (for LRU).
  void touch(int64_t slot);

  // Stores a response (replacing any entry of the same name), evicting the
  // least recently used slot when full. Returns the slot, or -1 if disabled.
  int64_t put(const Response& response);

  void erase(int64_t slot);

  // Slots in use, ascending.
  std::vector<int64_t> used_slots() const;

 private:
  struct Slot {
    bool used = false;
    Response response;
    std::list<int64_t>::iterator lru_pos;
  };
  int64_t capacity_;
  std::vector<Slot> slots_;
  std::vector<int64_t> free_slots_;
  std::list<int64_t> lru_;  // front: most recently used
  std::unordered_map<std::string, int64_t> by_name_;
};

// Whether a response may be cached: errors and rounds with joined ranks are
// one-off answers, not steady state.
bool is_cacheable(const Response& response);

}  // namespace fuseopt
