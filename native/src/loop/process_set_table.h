// The process sets of the job (Horovod >= 0.23), as every rank knows them:
// ids and members. Identical on all ranks, because sets are only added and
// removed by operations of the global set, which every rank executes in the
// same round and order (loop_process_sets.cc). Ids count up from 1 and are
// never reused, so a stale id names no set rather than the wrong one.
//
// Read by framework threads (to validate requests at enqueue) and written by
// the loop thread, hence the mutex.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace fuseopt {

class ProcessSetTable {
 public:
  struct Set {
    std::vector<int32_t> ranks;  // global ranks, ascending
    int32_t rank = -1;           // this rank's index in ranks; -1: not a member
  };

  // Forgets every set but the global one (id 0: ranks 0..size-1).
  void reset(int size, int rank);
  bool find(int32_t id, Set* out) const;
  // The id of the set with exactly these ranks, or -1.
  int32_t id_of(const std::vector<int32_t>& ranks) const;
  int32_t add(const std::vector<int32_t>& ranks);  // returns the new id
  void remove(int32_t id);
  // Ids ever handed out are < next_id(): the size of per-set bit fields.
  int32_t next_id() const;

 private:
  mutable std::mutex mu_;
  std::map<int32_t, Set> sets_;
  int32_t next_id_ = 1;
  int rank_ = 0;
};

// "[0, 1, 3]", for messages.
std::string ranks_string(const std::vector<int32_t>& ranks);

}  // namespace fuseopt
