// Handles: the integer tokens framework threads hold while the loop thread
// works. The loop thread completes them; framework threads poll and wait.
// A handle is released by the wait that returns its final status.
//
// The table also owns the rule that a tensor name is in flight from enqueue
// until its handle completes: the name is freed under the same lock that
// publishes completion, so a thread woken by the completion can reuse it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/error.h"

namespace fuseopt {

// A result buffer the runtime allocated (allgather, alltoall), malloc'ed so
// that the caller can release it with fuseopt_free; for a device request,
// device memory that fuseopt_free_device releases (device_free.h).
struct OwnedOutput {
  fuseopt_device_t device = FUSEOPT_DEVICE_HOST;
  void* data = nullptr;
  int64_t nbytes = 0;
  int64_t first_dim = 0;
  std::vector<int64_t> recv_splits;
};

class HandleTable {
 public:
  ~HandleTable();
  // Throws Error(INVALID_ARG) if name is already in flight.
  int64_t create(const std::string& name, int32_t process_set = 0);
  // Forgets a handle nobody was given (its enqueue was refused).
  void discard(int64_t handle);
  void complete(int64_t handle, Outcome outcome, OwnedOutput output = OwnedOutput());
  // Completes every handle still pending (shutdown, fatal errors).
  void fail_pending(const Outcome& outcome);

  // Throws Error(INVALID_ARG) for an unknown or already released handle.
  bool poll(int64_t handle);
  // Returns the final outcome and releases the handle, or FUSEOPT_TIMEOUT.
  // If out is non-null, ownership of the output moves there.
  Outcome wait(int64_t handle, int64_t timeout_ms, OwnedOutput* out);
  // Waits for every handle (a grouped operation), then releases them all,
  // freeing runtime-allocated outputs, and returns the first failure in list
  // order, or OK. On FUSEOPT_TIMEOUT none is released. One call instead of
  // one per tensor: per-call overhead is most of the cost of waiting on 200
  // small tensors that completed together.
  Outcome wait_all(const int64_t* handles, int64_t count, int64_t timeout_ms);

  int64_t count();

 private:
  struct State {
    std::string name;
    bool done = false;
    int waiters = 0;  // threads blocked on this handle: completion wakes only them
    Outcome outcome;
    OwnedOutput output;
  };
  State& find(int64_t handle);  // with mu_ held
  // Spins briefly, then blocks until the handle is done or the deadline
  // passes (steady clock; time_point::max() for none). With mu_ held. See
  // Note [Poll schedule].
  bool wait_done(std::unique_lock<std::mutex>& lock, int64_t handle,
                 std::chrono::steady_clock::time_point deadline);

  std::mutex mu_;
  std::condition_variable cv_;
  int64_t next_ = 1;
  std::unordered_map<int64_t, State> states_;
  std::unordered_set<std::string> in_flight_;
};

}  // namespace fuseopt
