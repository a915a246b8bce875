// The coordinator's message table (rank 0 only).
//
// Ranks announce tensors at different times, in different orders, over
// several negotiation rounds. The table remembers, per tensor name, which
// ranks have asked for it. Once every rank has (a rank that has joined counts
// as present), the name becomes a Response: the agreed spec, or an error that
// names the tensor, the ranks and what differed. Responses come out in the
// order their names first arrived, which is the same answer for every rank.
//
// Pure bookkeeping: no MPI, so it is unit-tested without ranks.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/message.h"

namespace fuseopt {

struct Stall {
  std::string name;
  std::vector<int32_t> missing_ranks;
  double waiting_s = 0;
};

class Coordinator {
 public:
  explicit Coordinator(int size);
  // A process set's coordinator: requests name their ranks by global rank,
  // and so do its messages and stalls; joined and first_dims are indexed by
  // position in members (ascending global ranks).
  explicit Coordinator(std::vector<int32_t> members);

  // Records requests gathered this round. A name's wait starts when the
  // first rank enqueued it: now_s less that request's waited_s.
  void add(const std::vector<Request>& requests, double now_s);

  // Removes and returns every name that all ranks have now asked for.
  // joined[r] is true for ranks that have run out of data (see join).
  std::vector<Response> take_ready(const std::vector<bool>& joined);

  // Names some ranks asked for and others have not, for longer than min_s.
  std::vector<Stall> stalls(double now_s, double min_s) const;

  // Removes names stalled for longer than min_s and returns RANK_FAILED
  // responses for them that name the missing ranks (stall shutdown).
  std::vector<Response> take_stalled(double now_s, double min_s);

  size_t waiting() const { return table_.size(); }

  // How long the oldest name in the table has waited (0 when empty).
  double oldest_wait_s(double now_s) const;

 private:
  struct Entry {
    std::vector<Request> requests;  // at most one per rank
    std::vector<bool> present;
    double first_seen_s = 0;
    uint64_t order = 0;
  };
  Response make_response(Entry& entry, const std::vector<bool>& joined) const;
  size_t index_of(int32_t rank) const;

  std::vector<int32_t> members_;
  int size_;
  uint64_t next_order_ = 0;
  std::unordered_map<std::string, Entry> table_;
};

}  // namespace fuseopt
