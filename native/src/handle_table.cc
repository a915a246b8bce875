#include "handle_table.h"

#include <chrono>
#include <cstdlib>
#include <thread>

#include "device_free.h"

namespace fuseopt {

HandleTable::~HandleTable() {
  for (auto& kv : states_) free_memory(kv.second.output.device, kv.second.output.data);
}

int64_t HandleTable::create(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!in_flight_.insert(name).second)
    throw Error(FUSEOPT_INVALID_ARG,
                "tensor name '" + name +
                    "' is already in flight on this rank; wait for it before reusing the name");
  int64_t h = next_++;
  State s;
  s.name = name;
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

namespace {
// A blocked waiter pays a futex wake-up when its handle completes, tens of
// microseconds on a virtual machine; a small op often completes sooner than
// that, so look a few times before blocking.
constexpr auto kWaitSpin = std::chrono::microseconds(50);
}  // namespace

Outcome HandleTable::wait(int64_t handle, int64_t timeout_ms, OwnedOutput* out) {
  std::unique_lock<std::mutex> lock(mu_);
  find(handle);
  const auto spin_end = std::chrono::steady_clock::now() + kWaitSpin;
  while (timeout_ms != 0 && !find(handle).done && std::chrono::steady_clock::now() < spin_end) {
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
  }
  auto is_done = [&] { return find(handle).done; };
  find(handle).waiters++;
  bool done = true;
  if (timeout_ms < 0) {
    cv_.wait(lock, is_done);
  } else {
    done = cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), is_done);
  }
  find(handle).waiters--;
  if (!done)
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

int64_t HandleTable::count() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(states_.size());
}

}  // namespace fuseopt
