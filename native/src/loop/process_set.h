// One process set as the loop thread of a member rank holds it: its own
// communicator, backend, executor, response cache, coordinator (on the set's
// lowest rank) and tensors in flight. So a set's tensors are negotiated among
// its members only, cached in its own slots, and never share a fusion bucket
// with another set's. Set 0 is every rank (the job without process sets).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "exec/entry.h"
#include "exec/executor.h"
#include "transport/control/control_plane.h"
#include "policy/coordinator.h"
#include "policy/response_cache.h"
#include "transport/mpi/mpi_backend.h"
#include "transport/mpi/mpi_world.h"

namespace fuseopt {

struct ProcessSet {
  int32_t id = 0;
  std::vector<int32_t> ranks;  // global ranks, ascending
  int rank = 0;                // this rank's position in ranks
  int global_rank = 0;

  // Declared first, so destroyed last: the others use it.
  std::unique_ptr<MpiWorld> world;
  std::unique_ptr<ControlPlane> control;
  std::unique_ptr<MpiBackend> backend;
  std::unique_ptr<Executor> executor;
  std::unique_ptr<ResponseCache> cache;
  std::unique_ptr<Coordinator> coordinator;  // on ranks[0] only

  std::unordered_map<std::string, Entry> pending;  // by name
  std::vector<std::string> new_order;              // kNew names, enqueue order
  std::set<int64_t> invalid_slots;                 // to report next round
  // Stalled names already warned about, with when to warn again: a stall
  // is repeated every FUSEOPT_STALL_CHECK_S while it lasts.
  std::map<std::string, double> stall_next_warning_s;
  double next_stall_check_s = 0;

  int size() const { return static_cast<int>(ranks.size()); }
  Entry* pending_entry(const std::string& name) {
    auto it = pending.find(name);
    return it == pending.end() ? nullptr : &it->second;
  }
  // After a failure a peer may be gone and an MPI request outstanding: leave
  // the communicators (whose free may wait for peers) to process exit.
  void abandon() {
    executor.release();
    backend.release();
    control.release();
    world.release();
  }
};

}  // namespace fuseopt
