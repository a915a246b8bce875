#include "exec/handle_table.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "base/poll_schedule.h"
#include "transport/device/device_free.h"

namespace fuseopt {

HandleTable::~HandleTable() {
  for (auto& kv : states_) free_memory(kv.second.output.device, kv.second.output.data);
}

int64_t HandleTable::create(const std::string& name, int32_t process_set) {
  std::lock_guard<std::mutex> lock(mu_);
  // Names are unique per process set: sets negotiate apart.
  const std::string key = process_set == 0 ? name : std::to_string(process_set) + ":" + name;
  if (!in_flight_.insert(key).second)
    throw Error(FUSEOPT_INVALID_ARG,
                "tensor name '" + name + "' is already in flight on this rank" +
                    (process_set ? " in process set " + std::to_string(process_set) : "") +
                    "; wait for it before reusing the name");
  int64_t h = next_++;
  State s;
  s.name = key;
  states_.emplace(h, std::move(s));
  return h;
}

void HandleTable::discard(int64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = states_.find(handle);
  if (it == states_.end()) return;
  in_flight_.erase(it->second.name);
  states_.erase(it);
}

void HandleTable::complete(int64_t handle, Outcome outcome, OwnedOutput output) {
  bool waited_on;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = states_.find(handle);
    if (it == states_.end() || it->second.done) {
      free_memory(output.device, output.data);
      return;
    }
    it->second.done = true;
    in_flight_.erase(it->second.name);
    it->second.outcome = std::move(outcome);
    it->second.output = std::move(output);
    waited_on = it->second.waiters > 0;
  }
  // Completing 200 fused tensors must not wake a waiter 200 times.
  if (waited_on) cv_.notify_all();
}

void HandleTable::fail_pending(const Outcome& outcome) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& kv : states_) {
      if (kv.second.done) continue;
      kv.second.done = true;
      in_flight_.erase(kv.second.name);
      kv.second.outcome = outcome;
    }
  }
  cv_.notify_all();
}

HandleTable::State& HandleTable::find(int64_t handle) {
  auto it = states_.find(handle);
  if (it == states_.end())
    throw Error(FUSEOPT_INVALID_ARG, "unknown handle " + std::to_string(handle) +
                                         " (never issued, or already waited on)");
  return it->second;
}

bool HandleTable::poll(int64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  return find(handle).done;
}

bool HandleTable::wait_done(std::unique_lock<std::mutex>& lock, int64_t handle,
                            std::chrono::steady_clock::time_point deadline) {
  using clock = std::chrono::steady_clock;
  FrameworkBlocked blocked;
  const auto spin_end = std::min(deadline, clock::now() + kHandleWaitSpin);
  while (!find(handle).done && clock::now() < spin_end) {
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
  }
  auto is_done = [&] { return find(handle).done; };
  find(handle).waiters++;
  const bool done = deadline == clock::time_point::max() ? (cv_.wait(lock, is_done), true)
                                                         : cv_.wait_until(lock, deadline, is_done);
  find(handle).waiters--;
  return done;
}

namespace {
std::chrono::steady_clock::time_point deadline_after(int64_t timeout_ms) {
  return timeout_ms < 0 ? std::chrono::steady_clock::time_point::max()
                        : std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
}
}  // namespace

Outcome HandleTable::wait(int64_t handle, int64_t timeout_ms, OwnedOutput* out) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!wait_done(lock, handle, deadline_after(timeout_ms)))
    return Outcome{FUSEOPT_TIMEOUT, "handle " + std::to_string(handle) + " not complete after " +
                                        std::to_string(timeout_ms) + " ms"};
  State& s = find(handle);
  Outcome outcome = s.outcome;
  if (out && outcome.ok()) {
    *out = std::move(s.output);
    s.output = OwnedOutput();
  }
  free_memory(s.output.device, s.output.data);
  states_.erase(handle);
  return outcome;
}

Outcome HandleTable::wait_all(const int64_t* handles, int64_t count, int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  for (int64_t i = 0; i < count; ++i) find(handles[i]);  // all known before any wait
  const auto deadline = deadline_after(timeout_ms);
  // Handles of one bucket complete together: blocking on each not-yet-done
  // one in turn wakes this thread about once per bucket, not per tensor.
  for (int64_t i = 0; i < count; ++i)
    if (!wait_done(lock, handles[i], deadline))
      return Outcome{FUSEOPT_TIMEOUT, "handle " + std::to_string(handles[i]) + " (" +
                                          std::to_string(i + 1) + " of " + std::to_string(count) +
                                          ") not complete after " + std::to_string(timeout_ms) +
                                          " ms"};
  Outcome first;
  for (int64_t i = 0; i < count; ++i) {
    auto it = states_.find(handles[i]);
    if (it == states_.end()) continue;  // listed twice
    if (first.ok() && !it->second.outcome.ok()) first = it->second.outcome;
    free_memory(it->second.output.device, it->second.output.data);
    states_.erase(it);
  }
  return first;
}

int64_t HandleTable::count() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(states_.size());
}

}  // namespace fuseopt
